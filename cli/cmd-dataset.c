/* dataset ls, admin dataset add/ls/rm: public data, read-only at
 * /root/public/NAME in every instance of a region. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "1.2 GiB", "350 MiB"; "-" while no host holds it (0). */
static const char *size_text(int64_t bytes, char *buf)
{
    return bytes > 0 ? output_size(bytes, buf) : "-";
}

static const char *text_or_dash(json_t *j, const char *key)
{
    const char *s = jstr(j, key);
    return s && *s ? s : NULL;
}

static int list(struct cli *cli, const char *path, bool admin)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *l = sl_client_list(&cli->client, path, 500, &err);
    if (!l)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, l);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "NAME",  "SIZE",  "REGION",     "PATH INSIDE",
                                           "STATE", "NODES", "DESCRIPTION" };
    struct table t;
    size_t i;
    json_t *d;
    table_init(&t, admin ? 7 : 4,
               admin ? headers
                     : (const char *const[]){ "NAME", "SIZE", "PATH INSIDE", "DESCRIPTION" });
    json_array_foreach(json_object_get(l, "items"), i, d)
    {
        char size[32], nodes[32];
        cleanup_free char *inside = xasprintf("/root/public/%s", jstr(d, "name"));
        snprintf(nodes, sizeof(nodes), "%" PRId64, jint(d, "nodes"));
        const char *region = text_or_dash(d, "region") ? jstr(d, "region") : "all";
        const char *admin_row[] = { jstr(d, "name"),
                                    size_text(jint(d, "size_bytes"), size),
                                    region,
                                    inside,
                                    jstr(d, "state"),
                                    nodes,
                                    text_or_dash(d, "description") };
        const char *row[] = { jstr(d, "name"), size_text(jint(d, "size_bytes"), size), inside,
                              text_or_dash(d, "description") };
        table_add(&t, admin ? admin_row : row);
    }
    table_print(&t, stdout);
    table_release(&t);
    if (admin) {
        json_array_foreach(json_object_get(l, "items"), i, d)
        {
            if (text_or_dash(d, "message"))
                fprintf(stderr, "%s: %s\n", jstr(d, "name"), jstr(d, "message"));
        }
    }
    return CLI_EXIT_OK;
}

static const struct cli_option dataset_ls_options[] = {
    { .name = "region", .arg = "REGION", .help = "only those of one region" },
    { 0 },
};

static int run_dataset_ls(struct cli *cli, const struct cli_args *a)
{
    const char *region = cli_text(a, "region", NULL);
    cleanup_buf struct sl_buf path = SL_BUF_INIT;
    sl_buf_addf(&path, "/v1/datasets");
    if (region) {
        cleanup_free char *r = sl_client_escape(region);
        sl_buf_addf(&path, "?region=%s", r);
    }
    return list(cli, path.data, false);
}

static int run_admin_dataset_ls(struct cli *cli, const struct cli_args *a)
{
    (void)a;
    return list(cli, "/v1/admin/datasets", true);
}

static const struct cli_option dataset_add_options[] = {
    { .name = "description", .arg = "TEXT", .help = "a line that says what is in it" },
    { .name = "region", .arg = "REGION", .help = "only the hosts of one region (default: all)" },
    { 0 },
};

/* "uploading:  42% of 812.3 MiB" on stderr, redrawn when the percent changes. */
static void show_upload(int64_t sent, int64_t total, void *arg)
{
    int *last_percent = arg;
    int percent = (int)(sent * 100 / total);

    if (percent == *last_percent)
        return;
    *last_percent = percent;
    fprintf(stderr, "\ruploading: %3d%% of %.1f MiB", percent, (double)total / 1048576.0);
    if (percent == 100)
        fputc('\n', stderr);
}

/* A FILE here is a tar to upload; an absolute path that is no file here is
 * a directory on the hosts, bound as it is. */
static int run_admin_dataset_add(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *name = a->argv[0], *src = a->argv[1];
    const char *region = cli_text(a, "region", NULL),
               *description = cli_text(a, "description", NULL);
    cleanup_json json_t *d = NULL;
    struct stat st;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    bool upload = stat(src, &st) == 0 && S_ISREG(st.st_mode);
    if (!upload && src[0] != '/')
        return cli_usage_error(cli,
                               "'%s' is no file here, and a directory on the hosts is "
                               "given by its absolute path, such as /srv/datasets/mnist",
                               src);
    if (upload) {
        cleanup_buf struct sl_buf path = SL_BUF_INIT;
        cleanup_free char *ename = sl_client_escape(name);
        sl_buf_addf(&path, "/v1/admin/datasets/%s/archive?", ename);
        const char *keys[] = { "region", "description" };
        const char *values[] = { region, description };
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
            if (!values[i])
                continue;
            cleanup_free char *v = sl_client_escape(values[i]);
            sl_buf_addf(&path, "%s=%s&", keys[i], v);
        }
        int last_percent = -1;
        if (sl_client_upload(&cli->client, "PUT", path.data, src,
                             isatty(STDERR_FILENO) ? show_upload : NULL, &last_percent, &d,
                             &err) < 0)
            return cli_fail(&err);
    } else {
        cleanup_json json_t *body = json_pack("{s:s, s:s}", "name", name, "path", src);
        if (region)
            json_object_set_new(body, "region", json_string(region));
        if (description)
            json_object_set_new(body, "description", json_string(description));
        if (sl_client_request(&cli->client, "POST", "/v1/admin/datasets", body, NULL, &d, &err) < 0)
            return cli_fail(&err);
    }
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, d);
        return CLI_EXIT_OK;
    }
    if (upload)
        printf("uploaded dataset %s (sha256 %.12s): the hosts of %s fetch and unpack it\n", name,
               jstr(d, "sha256") ? jstr(d, "sha256") : "?", region ? region : "every region");
    else
        printf("published dataset %s: the hosts of %s bind their %s\n", name,
               region ? region : "every region", src);
    fprintf(stderr,
            "instances read it at /root/public/%s; follow it with suanli admin dataset ls\n", name);
    return CLI_EXIT_OK;
}

static int run_admin_dataset_rm(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *out = NULL;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *ename = sl_client_escape(a->argv[0]);
    cleanup_free char *path = xasprintf("/v1/admin/datasets/%s", ename);
    if (sl_client_request(&cli->client, "DELETE", path, NULL, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        printf("{\"name\": \"%s\", \"removed\": true}\n", a->argv[0]);
        return CLI_EXIT_OK;
    }
    printf("removed dataset %s: it leaves /root/public on every host\n", a->argv[0]);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_dataset_ls = {
    .name = "dataset ls",
    .aliases = { "dataset list", "datasets" },
    .options = dataset_ls_options,
    .summary = "list the public datasets, read-only at /root/public in every instance",
    .run = run_dataset_ls,
};

const struct cli_command cmd_admin_dataset_add = {
    .name = "admin dataset add",
    .args = "NAME PATH|TAR",
    .options = dataset_add_options,
    .summary = "publish a dataset: a tar uploaded here, or a directory each host has",
    .run = run_admin_dataset_add,
};

const struct cli_command cmd_admin_dataset_ls = {
    .name = "admin dataset ls",
    .aliases = { "admin dataset list" },
    .summary = "list the public datasets with their state on the hosts",
    .run = run_admin_dataset_ls,
};

const struct cli_command cmd_admin_dataset_rm = {
    .name = "admin dataset rm",
    .args = "NAME",
    .summary = "remove a public dataset from every host",
    .run = run_admin_dataset_rm,
};
