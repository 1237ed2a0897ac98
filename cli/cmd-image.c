/* image ls, admin image build: the root filesystems an instance starts from. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>

/* "1.2 GiB", "350 MiB", "12 KiB" from bytes; "-" when unknown (0). */
static const char *size_text(int64_t bytes, char *buf)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int64_t whole = bytes, tenths = 0;
    size_t u = 0;

    if (bytes <= 0)
        return "-";
    while (whole >= 1024 && u + 1 < ARRAY_SIZE(units)) {
        tenths = whole % 1024 * 10 / 1024;
        whole /= 1024;
        u++;
    }
    if (tenths && whole < 10)
        snprintf(buf, 32, "%" PRId64 ".%" PRId64 " %s", whole, tenths, units[u]);
    else
        snprintf(buf, 32, "%" PRId64 " %s", whole, units[u]);
    return buf;
}

/* The string field, or NULL (printed "-") when absent or empty. */
static const char *field(json_t *j, const char *key)
{
    const char *s = jstr(j, key);

    return s && *s ? s : NULL;
}

/* "nodes" as a count, whether the API sends a number or a list of node ids. */
static const char *nodes_text(json_t *image, char *buf)
{
    json_t *n = json_object_get(image, "nodes");

    if (json_is_integer(n))
        snprintf(buf, 32, "%" JSON_INTEGER_FORMAT, json_integer_value(n));
    else if (json_is_array(n))
        snprintf(buf, 32, "%zu", json_array_size(n));
    else
        return NULL;
    return buf;
}

static int run_image_ls(struct cli *cli, int argc, char **argv)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_no_args(cli, argc, argv)) || (status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = client_list(&cli->client, "/v1/images", 500, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "NAME",      "KIND", "OS",    "PYTHON", "CUDA",
                                           "FRAMEWORK", "SIZE", "NODES", "STATE" };
    struct table t;
    size_t i;
    json_t *img;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, img)
    {
        char size[32], nodes[32];
        const char *row[] = {
            jstr(img, "name"),
            field(img, "kind"),
            field(img, "os"),
            field(img, "python"),
            field(img, "cuda"),
            field(img, "framework"),
            size_text(jint(img, "size_bytes"), size),
            nodes_text(img, nodes),
            field(img, "state"),
        };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_image_build(struct cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
        { "recipe", required_argument, NULL, 'c' },
        { "region", required_argument, NULL, 'r' },
        { 0 },
    };
    struct sl_error err = SL_ERROR_INIT;
    const char *recipe = "base", *region = NULL;
    int c, status;

    while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
        if (c == 'c')
            recipe = optarg;
        else if (c == 'r')
            region = optarg;
        else
            return cli_usage_error(cli, "bad option");
    }
    if ((status = cli_positionals(cli, argc, argv, 1)) || (status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s, s:s}", "name", argv[optind], "recipe", recipe);
    if (region)
        json_object_set_new(body, "region", json_string(region));
    cleanup_json json_t *img = NULL;
    if (client_request(&cli->client, "POST", "/v1/admin/images", body, NULL, &img, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, img);
        return CLI_EXIT_OK;
    }
    printf("asked the nodes of %s to build image %s from recipe %s: %s\n",
           region ? region : "every region", argv[optind], recipe,
           jstr(img, "state") ? jstr(img, "state") : "requested");
    fputs("follow it with suanli image ls\n", stderr);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_image_ls = {
    .name = "image ls",
    .aliases = { "image list", "images" },
    .usage = "",
    .summary = "list the images an instance can start from",
    .run = run_image_ls,
};

static int run_image_import(struct cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
        { "name", required_argument, NULL, 'n' },
        { "region", required_argument, NULL, 'r' },
        { "kind", required_argument, NULL, 'k' },
        { "description", required_argument, NULL, 'd' },
        { 0 },
    };
    struct sl_error err = SL_ERROR_INIT;
    const char *name = NULL, *region = NULL, *kind = NULL, *description = NULL;
    int c, status;

    while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
        if (c == 'n')
            name = optarg;
        else if (c == 'r')
            region = optarg;
        else if (c == 'k')
            kind = optarg;
        else if (c == 'd')
            description = optarg;
        else
            return cli_usage_error(cli, "bad option");
    }
    if ((status = cli_positionals(cli, argc, argv, 1)))
        return status;
    if (!name)
        return cli_usage_error(cli, "--name NAME is required");
    if ((status = cli_need_token(cli)))
        return status;
    struct sl_buf path;
    sl_buf_init(&path);
    cleanup_free char *ename = client_escape(name);
    sl_buf_addf(&path, "/v1/admin/images/%s/archive?", ename);
    const char *keys[] = { "region", "kind", "description" };
    const char *values[] = { region, kind, description };
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        if (!values[i])
            continue;
        cleanup_free char *v = client_escape(values[i]);
        sl_buf_addf(&path, "%s=%s&", keys[i], v);
    }
    cleanup_json json_t *img = NULL;
    int rc = client_upload(&cli->client, "PUT", path.data, argv[optind], isatty(2), &img, &err);
    sl_buf_release(&path);
    if (rc < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, img);
        return CLI_EXIT_OK;
    }
    printf("uploaded image %s (sha256 %.12s): the nodes of %s fetch and import it\n", name,
           jstr(img, "sha256") ? jstr(img, "sha256") : "?", region ? region : "every region");
    fputs("follow it with suanli image ls\n", stderr);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_admin_image_import = {
    .name = "admin image import",
    .usage = "FILE --name NAME [--region R] [--kind base|framework] [--description TEXT]",
    .summary = "upload an image: a rootfs tarball, a docker save tarball or a tarred OCI layout",
    .run = run_image_import,
};

const struct cli_command cmd_admin_image_build = {
    .name = "admin image build",
    .usage = "NAME [--recipe base] [--region REGION]",
    .summary = "have every node of a region (or all) build an image from a recipe",
    .run = run_image_build,
};
