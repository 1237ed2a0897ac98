/* market, regions, gpu-models: the catalog a renter chooses from. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* "24 GiB" from MiB, with one decimal when it is not whole. */
static char *gib(int64_t mib, char *buf)
{
    if (mib % 1024 == 0)
        snprintf(buf, 32, "%" PRId64 " GiB", mib / 1024);
    else
        snprintf(buf, 32, "%" PRId64 ".%" PRId64 " GiB", mib / 1024, mib % 1024 * 10 / 1024);
    return buf;
}

static const struct cli_option region_options[] = {
    { .name = "region", .arg = "REGION", .help = "only one region (default: all)" },
    { 0 },
};

/* base with ?region= when --region was given; a new string. */
static char *region_path(const struct cli_args *a, const char *base)
{
    const char *region = cli_text(a, "region", NULL);
    cleanup_free char *r = region ? sl_client_escape(region) : NULL;

    return r ? xasprintf("%s?region=%s", base, r) : xstrdup(base);
}

static const struct cli_option market_options[] = {
    { .name = "region", .arg = "REGION", .help = "only one region (default: all)" },
    { .name = "gpu-model", .arg = "MODEL", .help = "only one GPU model (its name or id)" },
    { .name = "min-free",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 0,
      .max = 1024,
      .help = "only hosts where an instance can get N GPUs now" },
    { .name = "min-vram",
      .arg = "GIB",
      .type = CLI_OPT_INT,
      .min = 0,
      .max = 1 << 20,
      .help = "only GPUs with this much memory, in GiB (24 takes a 24 GB card)" },
    { .name = "cuda",
      .arg = "VERSION",
      .help = "only hosts whose driver runs this CUDA version or newer, such as 12.2" },
    { .name = "fits",
      .arg = "\"MODEL [PRECISION [JOB]]\"",
      .help = "only hosts whose free GPUs hold it, such as \"7B bf16 lora\" (suanli estimate)" },
    { 0 },
};

/* /v1/market with the filters given; a new string. */
static char *market_path(const struct cli_args *a)
{
    static const struct {
        const char *option, *param;
    } text[] = { { "region", "region" }, { "gpu-model", "gpu_model" }, { "cuda", "cuda" } },
      numbers[] = { { "min-free", "min_free" }, { "min-vram", "min_vram_gib" } };
    cleanup_buf struct sl_buf path = SL_BUF_INIT;

    sl_buf_addf(&path, "/v1/market");
    for (size_t i = 0; i < ARRAY_SIZE(text); i++) {
        const char *v = cli_text(a, text[i].option, NULL);
        cleanup_free char *e = v ? sl_client_escape(v) : NULL;
        if (e)
            sl_buf_addf(&path, "%s%s=%s", strchr(path.data, '?') ? "&" : "?", text[i].param, e);
    }
    for (size_t i = 0; i < ARRAY_SIZE(numbers); i++)
        if (cli_has(a, numbers[i].option))
            sl_buf_addf(&path, "%s%s=%" PRId64, strchr(path.data, '?') ? "&" : "?",
                        numbers[i].param, cli_number(a, numbers[i].option, 0));
    return xstrdup(path.data);
}

/* "0.25" cores from millicores: whole cores without decimals. */
static char *cores(int64_t millicores, char *buf)
{
    if (millicores % 1000 == 0)
        snprintf(buf, 32, "%" PRId64, millicores / 1000);
    else if (millicores % 100 == 0)
        snprintf(buf, 32, "%" PRId64 ".%" PRId64, millicores / 1000, millicores % 1000 / 100);
    else
        snprintf(buf, 32, "%" PRId64 ".%02" PRId64, millicores / 1000, millicores % 1000 / 10);
    return buf;
}

static const char *price(json_t *j, const char *key, const char *currency, const char *unit,
                         char *buf, size_t size)
{
    char amount[OUTPUT_MONEY_MAX];

    if (!json_is_integer(json_object_get(j, key)))
        return "-";
    snprintf(buf, size, "%s%s", output_money(jint(j, key), currency, amount), unit);
    return buf;
}

/* "6/8", with the simulated GPUs marked: "6/8 (simulated)" when all are,
 * "6/8 (2 simulated)" when some are. */
static char *supply(json_t *m, char *buf, size_t size)
{
    int64_t total = jint(m, "gpus_total"), simulated = jint(m, "simulated_gpus");

    if (simulated > 0 && simulated >= total)
        snprintf(buf, size, "%" PRId64 "/%" PRId64 " (simulated)", jint(m, "gpus_free"), total);
    else if (simulated > 0)
        snprintf(buf, size, "%" PRId64 "/%" PRId64 " (%" PRId64 " simulated)", jint(m, "gpus_free"),
                 total, simulated);
    else
        snprintf(buf, size, "%" PRId64 "/%" PRId64, jint(m, "gpus_free"), total);
    return buf;
}

/* Whether key names a node and GPU model in offers (POST /v1/estimate's),
 * and how many GPUs it needs there; 0 when it does not fit. */
static int64_t offer_need(json_t *offers, const char *node_id, const char *model_id)
{
    size_t i;
    json_t *o;

    json_array_foreach(offers, i, o)
    {
        if (strcmp(jstr(o, "node_id"), node_id) == 0 &&
            strcmp(jstr(o, "gpu_model_id"), model_id) == 0)
            return jint(o, "gpus_needed");
    }
    return 0;
}

/* --fits: keeps the hosts and GPU models where the estimate fits, each with
 * gpus_needed, and adds the estimate's summary as "fits". */
static void apply_fits(json_t *market, json_t *estimate)
{
    json_t *offers = json_object_get(estimate, "offers"), *r;
    size_t i;

    json_array_foreach(json_object_get(market, "items"), i, r)
    {
        json_t *hosts = json_object_get(r, "hosts"), *models = json_object_get(r, "gpu_models");
        for (size_t j = json_array_size(hosts); j-- > 0;) {
            json_t *h = json_array_get(hosts, j);
            int64_t need = offer_need(offers, jstr(h, "node_id"), jstr(h, "gpu_model_id"));
            if (need)
                json_object_set_new(h, "gpus_needed", json_integer(need));
            else
                json_array_remove(hosts, j);
        }
        for (size_t j = json_array_size(models); j-- > 0;) {
            json_t *m = json_array_get(models, j), *need = NULL, *e;
            size_t k;
            json_array_foreach(json_object_get(estimate, "gpu_models"), k, e)
            {
                if (strcmp(jstr(e, "id"), jstr(m, "id")) == 0)
                    need = json_object_get(e, "gpus_needed");
            }
            if (json_is_integer(need))
                json_object_set(m, "gpus_needed", need);
            else
                json_array_remove(models, j);
        }
    }
    json_object_set_new(
        market, "fits",
        json_pack("{s:O, s:O, s:O, s:O, s:O, s:O}", "model", json_object_get(estimate, "model"),
                  "precision", json_object_get(estimate, "precision"), "job",
                  json_object_get(estimate, "job"), "context", json_object_get(estimate, "context"),
                  "batch", json_object_get(estimate, "batch"), "total_bytes",
                  json_object_get(estimate, "total_bytes")));
}

static int run_market(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *market = NULL;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *path = market_path(a);
    const char *fits = cli_text(a, "fits", NULL);
    cleanup_json json_t *fits_body = fits ? cli_estimate_fits_body(fits, &err) : NULL;
    if (fits && !fits_body)
        return cli_usage_error(cli, "%s", err.message);
    if (fits_body && cli_has(a, "region"))
        json_object_set_new(fits_body, "region", json_string(cli_text(a, "region", "")));
    cleanup_json json_t *estimate = fits_body ? cli_estimate(cli, fits_body, &err) : NULL;
    if (fits && !estimate)
        return cli_fail(&err);
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &market, &err) < 0)
        return cli_fail(&err);
    if (estimate)
        apply_fits(market, estimate);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, market);
        return CLI_EXIT_OK;
    }
    const char *currency = jstr(market, "currency");
    struct table t;
    size_t i, j, offers = 0;
    json_t *r, *m;
    /* the hosts first, as AutoDL lists them; then the models and prices */
    static const char *const host_headers[] = { "REGION", "HOST",    "NODE",    "GPU",  "FREE",
                                                "VRAM",   "CPU/GPU", "MEM/GPU", "DISK", "DRIVER",
                                                "CUDA",   "PRICE",   "NEED" };
    if (estimate)
        printf("%.*s %s %s needs %.1f GiB (suanli estimate for the parts); where it fits "
               "now:\n\n",
               (int)strcspn(fits + strspn(fits, " \t"), " \t"), fits + strspn(fits, " \t"),
               jstr(estimate, "precision"), jstr(estimate, "job"),
               (double)jint(estimate, "total_bytes") / (1LL << 30));
    table_init(&t, ARRAY_SIZE(host_headers) - (estimate ? 0 : 1), host_headers);
    json_array_foreach(json_object_get(market, "items"), i, r)
    {
        json_array_foreach(json_object_get(r, "hosts"), j, m)
        {
            char vram[32], cpu[32], mem[32], disk[32], per_hour[64], gpus[80], need[32];
            snprintf(need, sizeof(need), "%" PRId64 " GPU%s", jint(m, "gpus_needed"),
                     jint(m, "gpus_needed") == 1 ? "" : "s");
            snprintf(gpus, sizeof(gpus), "%" PRId64 "/%" PRId64 "%s", jint(m, "gpus_free"),
                     jint(m, "gpus_total"),
                     json_is_true(json_object_get(m, "simulated")) ? " (simulated)" : "");
            snprintf(disk, sizeof(disk), "%" PRId64 " GiB", jint(m, "data_disk_free_gib"));
            const char *row[] = {
                jstr(r, "region"),
                jstr(m, "hostname"),
                jstr(m, "node_id"),
                jstr(m, "gpu_model"),
                gpus,
                gib(jint(m, "vram_mib"), vram),
                cores(jint(m, "cpu_millicores_per_gpu"), cpu),
                gib(jint(m, "memory_mib_per_gpu"), mem),
                disk,
                jstr(m, "driver_version"),
                jstr(m, "cuda_version"),
                price(m, "price_per_hour_micros", currency, "/h", per_hour, sizeof(per_hour)),
                need,
            };
            table_add(&t, row);
            offers++;
        }
    }
    if (offers) {
        table_print(&t, stdout);
        printf("\n");
    } else if (estimate) {
        printf("no host has the free GPUs for it now\n\n");
    }
    table_release(&t);
    /* per model, the catalog's CPU and memory per GPU: the most a host gives */
    static const char *const headers[] = { "REGION",      "GPU",   "VRAM",       "MAX CPU/GPU",
                                           "MAX MEM/GPU", "PRICE", "FREE/TOTAL", "HOSTS" };
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(market, "items"), i, r)
    {
        json_array_foreach(json_object_get(r, "gpu_models"), j, m)
        {
            char vram[32], cpu[32], mem[32], per_hour[64], gpus[80], hosts[32];
            snprintf(cpu, sizeof(cpu), "%" PRId64, jint(m, "cpu_cores_per_gpu"));
            supply(m, gpus, sizeof(gpus));
            snprintf(hosts, sizeof(hosts), "%" PRId64, jint(m, "hosts"));
            const char *row[] = {
                jstr(r, "region"),
                jstr(m, "name"),
                gib(jint(m, "vram_mib"), vram),
                cpu,
                gib(jint(m, "memory_mib_per_gpu"), mem),
                price(m, "price_per_hour_micros", currency, "/h", per_hour, sizeof(per_hour)),
                gpus,
                hosts,
            };
            table_add(&t, row);
        }
    }
    table_print(&t, stdout);
    table_release(&t);
    json_array_foreach(json_object_get(market, "items"), i, r)
    {
        char nogpu[64], disk[64], files[64];
        json_t *d = json_object_get(r, "data_disk"), *f = json_object_get(r, "file_storage");
        printf("\n%s (%s)%s: no-GPU mode %s; data disk %" PRId64 " GiB free, then %s; "
               "file storage %" PRId64 " GiB free, then %s\n",
               jstr(r, "region"), jstr(r, "region_name"),
               json_is_true(json_object_get(r, "sample")) ? " [sample]" : "",
               price(r, "nogpu_price_per_hour_micros", currency, "/h", nogpu, sizeof(nogpu)),
               jint(d, "free_gib"),
               price(d, "price_per_gib_day_micros", currency, "/GiB/day", disk, sizeof(disk)),
               jint(f, "free_gib"),
               price(f, "price_per_gib_day_micros", currency, "/GiB/day", files, sizeof(files)));
    }
    return CLI_EXIT_OK;
}

static int run_regions(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *list = NULL;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    if (sl_client_request(&cli->client, "GET",
                          cli->cmd == &cmd_admin_region_ls ? "/v1/admin/regions" : "/v1/regions",
                          NULL, NULL, &list, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID", "NAME", "SAMPLE", "CREATED" };
    struct table t;
    size_t i;
    json_t *r;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, r)
    {
        char created[32];
        const char *row[] = { jstr(r, "id"), jstr(r, "name"),
                              json_is_true(json_object_get(r, "sample")) ? "yes" : "no",
                              output_time(jstr(r, "created_at"), created) };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_gpu_models(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *list = NULL;
    bool admin = cli->cmd == &cmd_admin_gpu_model_ls;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *path = region_path(a, admin ? "/v1/admin/gpu-models" : "/v1/gpu-models");
    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &list, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID",      "NAME",       "VRAM",  "CPU/GPU",
                                           "MEM/GPU", "PRICE/HOUR", "SAMPLE" };
    struct table t;
    size_t i;
    json_t *m;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, m)
    {
        char vram[32], cpu[32], mem[32], per_hour[64];
        snprintf(cpu, sizeof(cpu), "%" PRId64, jint(m, "cpu_cores_per_gpu"));
        const char *row[] = {
            jstr(m, "id"),
            jstr(m, "name"),
            gib(jint(m, "vram_mib"), vram),
            cpu,
            gib(jint(m, "memory_mib_per_gpu"), mem),
            price(m, "price_per_hour_micros", NULL, "", per_hour, sizeof(per_hour)),
            json_is_true(json_object_get(m, "sample")) ? "yes" : "no",
        };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_market = {
    .name = "market",
    .options = market_options,
    .summary = "the hosts for rent in each region (free GPUs, CPU and memory per GPU, disk, "
               "driver, price) and the GPU models",
    .run = run_market,
};

const struct cli_command cmd_regions = {
    .name = "regions",
    .aliases = { "region ls", "region list" },
    .summary = "list the regions",
    .run = run_regions,
};

const struct cli_command cmd_gpu_models = {
    .name = "gpu-models",
    .aliases = { "gpu-model ls", "gpu-model list" },
    .options = region_options,
    .summary = "list the GPU models with their hourly price",
    .run = run_gpu_models,
};

/* The admin views share these bodies; the admin routes need the admin role. */
const struct cli_command cmd_admin_region_ls = {
    .name = "admin region ls",
    .aliases = { "admin region list" },
    .summary = "list the regions (admin)",
    .run = run_regions,
};

const struct cli_command cmd_admin_gpu_model_ls = {
    .name = "admin gpu-model ls",
    .aliases = { "admin gpu-model list" },
    .options = region_options,
    .summary = "list the GPU models with their price (admin)",
    .run = run_gpu_models,
};
