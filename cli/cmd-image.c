/* image ls, admin image build: the root filesystems an instance starts from. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

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

static int run_image_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/images", 500, &err);
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

static const struct cli_option image_build_options[] = {
    { .name = "recipe",
      .arg = "RECIPE",
      .help = "what to build it from: base (default), jupyter, pytorch or venv" },
    { .name = "region", .arg = "REGION", .help = "only the nodes of one region (default: all)" },
    { 0 },
};

static int run_image_build(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *recipe = cli_text(a, "recipe", "base"), *region = cli_text(a, "region", NULL);
    const char *name = a->argv[0];
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s, s:s}", "name", name, "recipe", recipe);
    if (region)
        json_object_set_new(body, "region", json_string(region));
    cleanup_json json_t *img = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/admin/images", body, NULL, &img, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, img);
        return CLI_EXIT_OK;
    }
    printf("asked the nodes of %s to build image %s from recipe %s: %s\n",
           region ? region : "every region", name, recipe,
           jstr(img, "state") ? jstr(img, "state") : "requested");
    fputs("follow it with suanli image ls\n", stderr);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_image_ls = {
    .name = "image ls",
    .aliases = { "image list", "images" },
    .summary = "list the images an instance can start from",
    .run = run_image_ls,
};

static const struct cli_option image_import_options[] = {
    { .name = "name",
      .arg = "NAME",
      .required = true,
      .help = "the image's name, as create --image takes it" },
    { .name = "region", .arg = "REGION", .help = "only the nodes of one region (default: all)" },
    { .name = "kind", .arg = "base|framework", .help = "what the image is (default base)" },
    { .name = "description", .arg = "TEXT", .help = "a line that says what is in it" },
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

static int run_image_import(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *name = cli_text(a, "name", NULL), *region = cli_text(a, "region", NULL),
               *kind = cli_text(a, "kind", NULL), *description = cli_text(a, "description", NULL);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_buf struct sl_buf path = SL_BUF_INIT;
    cleanup_free char *ename = sl_client_escape(name);
    sl_buf_addf(&path, "/v1/admin/images/%s/archive?", ename);
    const char *keys[] = { "region", "kind", "description" };
    const char *values[] = { region, kind, description };
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        if (!values[i])
            continue;
        cleanup_free char *v = sl_client_escape(values[i]);
        sl_buf_addf(&path, "%s=%s&", keys[i], v);
    }
    cleanup_json json_t *img = NULL;
    int last_percent = -1;
    int rc =
        sl_client_upload(&cli->client, "PUT", path.data, a->argv[0],
                         isatty(STDERR_FILENO) ? show_upload : NULL, &last_percent, &img, &err);
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
    .args = "FILE",
    .options = image_import_options,
    .summary = "upload an image: a rootfs tarball, a docker save tarball or a tarred OCI layout",
    .run = run_image_import,
};

const struct cli_command cmd_admin_image_build = {
    .name = "admin image build",
    .args = "NAME",
    .options = image_build_options,
    .summary = "have every node of a region (or all) build an image from a recipe",
    .run = run_image_build,
};
