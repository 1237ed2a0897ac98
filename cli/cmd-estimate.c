/* estimate: which card fits. The server computes (POST /v1/estimate), so
 * the CLI and the console show the same figures; this prints them. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define CONFIG_MAX_BYTES (1 << 20)

/* "17.3 GiB", or "512.0 MiB" under a GiB; buf holds 32 bytes. */
static const char *memory(int64_t bytes, char *buf)
{
    if (bytes >= (1LL << 30))
        snprintf(buf, 32, "%.1f GiB", (double)bytes / (1LL << 30));
    else if (bytes > 0)
        snprintf(buf, 32, "%.1f MiB", (double)bytes / (1LL << 20));
    else
        snprintf(buf, 32, "0");
    return buf;
}

json_t *cli_estimate(struct cli *cli, json_t *body, struct sl_error *err)
{
    json_t *out = NULL;

    if (sl_client_request(&cli->client, "POST", "/v1/estimate", body, NULL, &out, err) < 0)
        return NULL;
    return out;
}

/* "7B bf16 lora": MODEL [PRECISION [JOB]] into a request body; NULL with err
 * saying what to write otherwise. */
json_t *cli_estimate_fits_body(const char *fits, struct sl_error *err)
{
    cleanup_free char *copy = xstrdup(fits);
    char *words[4] = { 0 }, *save = NULL;
    int n = 0;

    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        if (n == 3)
            return sl_fail(err, SL_E_INVALID, NULL,
                           "--fits takes \"MODEL [PRECISION [JOB]]\", such as \"7B bf16 lora\""),
                   NULL;
        words[n++] = w;
    }
    if (n == 0)
        return sl_fail(err, SL_E_INVALID, NULL,
                       "--fits takes \"MODEL [PRECISION [JOB]]\", such as \"7B bf16 lora\""),
               NULL;
    json_t *body = json_pack("{s:s}", "model", words[0]);
    if (words[1])
        json_object_set_new(body, "precision", json_string(words[1]));
    if (words[2])
        json_object_set_new(body, "job", json_string(words[2]));
    return body;
}

static const struct cli_option estimate_options[] = {
    { .name = "config",
      .arg = "FILE",
      .help = "the model's Hugging Face config.json instead of a size" },
    { .name = "precision", .arg = "P", .help = "fp32, bf16, fp16, int8 or int4 (default bf16)" },
    { .name = "job",
      .arg = "JOB",
      .help = "inference, full (a full fine-tune with Adam) or lora (default inference)" },
    { .name = "context",
      .arg = "TOKENS",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 1 << 20,
      .help = "tokens per sequence (default 4096)" },
    { .name = "batch",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 4096,
      .help = "sequences at once (default 1)" },
    { .name = "lora-rank",
      .arg = "R",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 4096,
      .help = "LoRA's rank r (default 16)" },
    { .name = "checkpointing", .help = "training with activation checkpointing" },
    { .name = "region", .arg = "REGION", .help = "only offers of one region" },
    { 0 },
};

/* The config file as a JSON object; NULL after saying what is wrong. */
static json_t *read_config(const char *path)
{
    json_error_t jerr;
    FILE *f = fopen(path, "r");

    if (!f) {
        fprintf(stderr, "suanli: cannot open '%s': %m\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    if (size > CONFIG_MAX_BYTES) {
        fclose(f);
        fprintf(stderr, "suanli: '%s' is over %d bytes: give the model's config.json\n", path,
                CONFIG_MAX_BYTES);
        return NULL;
    }
    json_t *config = json_loadf(f, JSON_REJECT_DUPLICATES, &jerr);
    fclose(f);
    if (!config) {
        fprintf(stderr, "suanli: '%s' is not JSON (line %d: %s): give the model's config.json\n",
                path, jerr.line, jerr.text);
        return NULL;
    }
    if (!json_is_object(config)) {
        json_decref(config);
        fprintf(stderr, "suanli: '%s' is not a config.json: it must hold a JSON object\n", path);
        return NULL;
    }
    return config;
}

static void print_estimate(json_t *e)
{
    char mem[32], n[64];
    json_t *model = json_object_get(e, "model"), *parts = json_object_get(e, "parts"), *p;
    size_t i;
    const char *currency = jstr(e, "currency");

    printf("model:      %s\n", jstr(model, "source"));
    printf("parameters: %s\n", jstr(model, "parameter_formula"));
    printf("job:        %s, %s, context %" PRId64 " × batch %" PRId64, jstr(e, "job"),
           jstr(e, "precision"), jint(e, "context"), jint(e, "batch"));
    if (strcmp(jstr(e, "job"), "lora") == 0)
        printf(", rank %" PRId64 " (%" PRId64 " trainable parameters)", jint(e, "lora_rank"),
               jint(e, "trainable_parameters"));
    if (strcmp(jstr(e, "job"), "inference") != 0)
        printf(", checkpointing %s",
               json_is_true(json_object_get(e, "checkpointing")) ? "on" : "off");
    printf("\n\n");
    static const char *const headers[] = { "PART", "MEMORY", "FORMULA" };
    struct table t;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(parts, i, p)
    {
        const char *row[] = { jstr(p, "name"), memory(jint(p, "bytes"), mem), jstr(p, "formula") };
        table_add(&t, row);
    }
    const char *total[] = { "total", memory(jint(e, "total_bytes"), mem), "the sum" };
    table_add(&t, total);
    table_print(&t, stdout);
    table_release(&t);

    json_t *offers = json_object_get(e, "offers");
    printf("\n%s\n", jstr(e, "fit_rule"));
    if (json_array_size(offers) == 0) {
        printf("no host has the free GPUs for it now\n");
    } else {
        static const char *const oh[] = { "REGION", "HOST", "NODE", "GPU",
                                          "GPUS",   "FREE", "VRAM", "PRICE" };
        table_init(&t, ARRAY_SIZE(oh), oh);
        json_array_foreach(offers, i, p)
        {
            char gpus[32], free[48], vram[32], money[OUTPUT_MONEY_MAX], price[64];
            snprintf(gpus, sizeof(gpus), "%" PRId64, jint(p, "gpus_needed"));
            snprintf(free, sizeof(free), "%" PRId64 "%s", jint(p, "gpus_free"),
                     json_is_true(json_object_get(p, "simulated")) ? " (simulated)" : "");
            snprintf(vram, sizeof(vram), "%" PRId64 " GiB", (jint(p, "vram_mib") + 512) / 1024);
            if (json_is_integer(json_object_get(p, "price_per_hour_micros")))
                snprintf(price, sizeof(price), "%s/h",
                         output_money(jint(p, "price_per_hour_micros"), currency, money));
            else
                snprintf(price, sizeof(price), "-");
            const char *row[] = { jstr(p, "region"),
                                  jstr(p, "hostname"),
                                  jstr(p, "node_id"),
                                  jstr(p, "gpu_model"),
                                  gpus,
                                  free,
                                  vram,
                                  price };
            table_add(&t, row);
        }
        table_print(&t, stdout);
        table_release(&t);
    }
    cleanup_buf struct sl_buf models = SL_BUF_INIT;
    json_array_foreach(json_object_get(e, "gpu_models"), i, p)
    {
        json_t *need = json_object_get(p, "gpus_needed");
        if (json_is_integer(need))
            snprintf(n, sizeof(n), "%s × %" PRId64, jstr(p, "name"),
                     (int64_t)json_integer_value(need));
        else
            snprintf(n, sizeof(n), "%s: more than 8", jstr(p, "name"));
        sl_buf_addf(&models, "%s%s", models.len ? ", " : "", n);
    }
    if (models.len)
        printf("\nGPUs needed per model: %s\n", models.data);
}

static int run_estimate(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *path = cli_text(a, "config", NULL);
    static const char *const texts[][2] = { { "precision", "precision" },
                                            { "job", "job" },
                                            { "region", "region" } };
    static const char *const numbers[][2] = { { "context", "context" },
                                              { "batch", "batch" },
                                              { "lora-rank", "lora_rank" } };
    int status;

    if ((a->argc > 0) == (path != NULL))
        return cli_usage_error(cli, "give a model size such as 7B, or --config FILE (not both)");
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_object();
    if (path) {
        json_t *config = read_config(path);
        if (!config)
            return CLI_EXIT_USAGE;
        json_object_set_new(body, "config", config);
    } else {
        json_object_set_new(body, "model", json_string(a->argv[0]));
    }
    for (size_t i = 0; i < ARRAY_SIZE(texts); i++)
        if (cli_has(a, texts[i][0]))
            json_object_set_new(body, texts[i][1], json_string(cli_text(a, texts[i][0], "")));
    for (size_t i = 0; i < ARRAY_SIZE(numbers); i++)
        if (cli_has(a, numbers[i][0]))
            json_object_set_new(body, numbers[i][1], json_integer(cli_number(a, numbers[i][0], 0)));
    if (cli_has(a, "checkpointing"))
        json_object_set_new(body, "checkpointing", json_true());
    cleanup_json json_t *e = cli_estimate(cli, body, &err);
    if (!e)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, e);
    else
        print_estimate(e);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_estimate = {
    .name = "estimate",
    .args = "[MODEL]",
    .options = estimate_options,
    .summary = "the GPU memory a model needs (7B, 350M or --config config.json) for inference, a "
               "full fine-tune or LoRA, part by part with the formulas, and the offers that fit",
    .run = run_estimate,
};
