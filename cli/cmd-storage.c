/* storage, admin storage ls/set: file storage, the renter's directory of a
 * region at /root/storage in every instance there. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* "1.2 GiB", "350 MiB", "0 B". */
static const char *size_text(int64_t bytes, char *buf)
{
    return output_size(bytes, buf);
}

static int run_storage(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;
    size_t i;
    json_t *d;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *l = sl_client_list(&cli->client, "/v1/storage", 500, &err);
    if (!l)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, l);
        return CLI_EXIT_OK;
    }
    json_t *items = json_object_get(l, "items");
    if (json_array_size(items) == 0) {
        printf("no file storage yet: your first instance in a region makes it, at "
               "/root/storage\n");
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "REGION", "PATH INSIDE",   "USED",   "QUOTA",
                                           "FREE",   "PRICE/GIB-DAY", "PER DAY" };
    struct table t;
    table_init(&t, 7, headers);
    json_array_foreach(items, i, d)
    {
        char used[32], quota[32], free_size[32], cost[OUTPUT_MONEY_MAX], per_day[OUTPUT_MONEY_MAX];
        const char *row[] = { jstr(d, "region"),
                              jstr(d, "path"),
                              size_text(jint(d, "used_bytes"), used),
                              size_text(jint(d, "quota_bytes"), quota),
                              size_text(jint(d, "free_bytes"), free_size),
                              output_money(jint(d, "price_per_gib_day_micros"), NULL, cost),
                              output_money(jint(d, "per_day_micros"), NULL, per_day) };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    bool billed = false;
    json_array_foreach(items, i, d)
    {
        billed = billed || json_is_true(json_object_get(d, "billed"));
    }
    if (billed)
        fprintf(stderr, "the use over the free size is billed per GiB-day in whole MiB "
                        "(suanli bill --kind file_storage)\n");
    return CLI_EXIT_OK;
}

static int run_admin_storage_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;
    size_t i;
    json_t *d;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *l = sl_client_list(&cli->client, "/v1/admin/storage", 500, &err);
    if (!l)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, l);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = {
        "REGION", "KIND", "SPEC", "QUOTA", "FREE", "DIRS", "USED"
    };
    struct table t;
    table_init(&t, 7, headers);
    json_array_foreach(json_object_get(l, "items"), i, d)
    {
        char quota[32], free_size[32], dirs[32], used[32];
        snprintf(quota, sizeof(quota), "%" PRId64 " GiB", jint(d, "quota_gib"));
        snprintf(free_size, sizeof(free_size), "%" PRId64 " GiB", jint(d, "free_gib"));
        snprintf(dirs, sizeof(dirs), "%" PRId64, jint(d, "dirs"));
        const char *spec = jstr(d, "spec");
        const char *row[] = { jstr(d, "region"),
                              jstr(d, "kind"),
                              spec && *spec ? spec : NULL,
                              quota,
                              free_size,
                              dirs,
                              size_text(jint(d, "used_bytes"), used) };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static const struct cli_option storage_set_options[] = {
    { .name = "kind",
      .arg = "local|mount|glusterfs",
      .help = "the backend (default: as it is; local)" },
    { .name = "spec",
      .arg = "PATH|SERVER:/VOLUME",
      .help = "mount: the shared mount's path on every host, such as /mnt/cephfs/suanli; "
              "glusterfs: the volume, such as gluster1:/suanli" },
    { .name = "quota-gib",
      .arg = "GIB",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 65536,
      .help = "each renter's quota in GiB (local: a smaller one applies to new renters)" },
    { 0 },
};

static int run_admin_storage_set(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *out = NULL;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    if (!cli_has(a, "kind") && !cli_has(a, "spec") && !cli_has(a, "quota-gib"))
        return cli_usage_error(cli, "say what to set: --kind, --spec or --quota-gib");
    cleanup_json json_t *body = json_pack("{s:s}", "region", a->argv[0]);
    if (cli_has(a, "kind"))
        json_object_set_new(body, "kind", json_string(cli_text(a, "kind", "")));
    if (cli_has(a, "spec"))
        json_object_set_new(body, "spec", json_string(cli_text(a, "spec", "")));
    if (cli_has(a, "quota-gib"))
        json_object_set_new(body, "quota_gib", json_integer(cli_number(a, "quota-gib", 0)));
    if (sl_client_request(&cli->client, "POST", "/v1/admin/storage", body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, out);
        return CLI_EXIT_OK;
    }
    const char *spec = jstr(out, "spec");
    printf("region %s: file storage on %s%s%s, %" PRId64 " GiB per renter\n", jstr(out, "region"),
           jstr(out, "kind"), spec && *spec ? " at " : "", spec ? spec : "",
           jint(out, "quota_gib"));
    fprintf(stderr, "instances started from now on mount it at /root/storage\n");
    return CLI_EXIT_OK;
}

const struct cli_command cmd_storage = {
    .name = "storage",
    .aliases = { "storage ls", "storage list" },
    .summary = "show your file storage (/root/storage): use, quota, free size, price",
    .run = run_storage,
};

const struct cli_command cmd_admin_storage_ls = {
    .name = "admin storage ls",
    .aliases = { "admin storage list", "admin storage" },
    .summary = "list each region's file storage backend",
    .run = run_admin_storage_ls,
};

const struct cli_command cmd_admin_storage_set = {
    .name = "admin storage set",
    .args = "REGION",
    .options = storage_set_options,
    .summary = "set a region's file storage backend and per-renter quota",
    .run = run_admin_storage_set,
};
