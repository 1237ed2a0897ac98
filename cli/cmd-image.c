/* image ls, admin image build, import, hosts and rm: the root filesystems an
 * instance starts from. An import waits for the hosts' verdict, as create
 * waits for the instance to run, unless --no-wait. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define IMPORT_POLL_MS         500
#define IMPORT_DEFAULT_TIMEOUT 3600

/* "1.2 GiB", "350 MiB", "12 KiB" from bytes; "-" when unknown (0). */
static const char *size_text(int64_t bytes, char *buf)
{
    return bytes > 0 ? output_size(bytes, buf) : "-";
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
    static const char *const headers[] = { "NAME",  "KIND",      "OS",         "PYTHON",
                                           "CUDA",  "FRAMEWORK", "SIZE",       "NODES",
                                           "STATE", "PARENT",    "DESCRIPTION" };
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
            field(img, "parent"),
            field(img, "description"),
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
      .help = "what to build it from: base (default), jupyter, pytorch, venv or desktop" },
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
    { .name = "no-wait", .help = "return once uploaded, before the hosts import it" },
    { .name = "timeout",
      .arg = "SECONDS",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 86400,
      .help = "wait at most this long for the hosts (default 3600); they go on after" },
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

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The image's hosts: GET /v1/admin/images/{name}/hosts's items, or NULL. */
static json_t *image_hosts(struct cli *cli, const char *name, struct sl_error *err)
{
    cleanup_free char *ename = sl_client_escape(name);
    cleanup_free char *path = xasprintf("/v1/admin/images/%s/hosts", ename);
    cleanup_json json_t *page = NULL;

    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &page, err) < 0)
        return NULL;
    return json_incref(json_object_get(page, "items"));
}

/* How far the hosts are: online hosts by state, and offline ones. */
struct import_tally {
    int ready, building, failed, waiting, offline;
};

static void tally(json_t *hosts, struct import_tally *t)
{
    size_t i;
    json_t *h;

    memset(t, 0, sizeof(*t));
    json_array_foreach(hosts, i, h)
    {
        const char *state = jstr(h, "state") ? jstr(h, "state") : "missing";
        if (strcmp(state, "ready") == 0)
            t->ready++;
        else if (strcmp(state, "failed") == 0)
            t->failed++;
        else if (!json_is_true(json_object_get(h, "online")))
            t->offline++; /* it imports it when it is back */
        else if (strcmp(state, "building") == 0)
            t->building++;
        else
            t->waiting++;
    }
}

/* "importing image x: 1 of 3 hosts ready, 1 importing, 1 not started yet,
 * 0 failed (12 s)" on stderr: redrawn on a terminal, else a line each time
 * the counts change. */
static void show_import(bool tty, const char *name, const struct import_tally *t,
                        struct import_tally *last, int64_t elapsed_ms)
{
    int total = t->ready + t->building + t->failed + t->waiting + t->offline;

    if (!tty && last && memcmp(t, last, sizeof(*t)) == 0)
        return;
    if (last)
        *last = *t;
    fprintf(stderr,
            "%simporting image %s: %d of %d host(s) ready, %d importing, %d not started yet, %d "
            "failed",
            tty ? "\r\033[K" : "", name, t->ready, total, t->building, t->waiting, t->failed);
    if (t->offline)
        fprintf(stderr, ", %d offline", t->offline);
    fprintf(stderr, " (%" PRId64 " s)%s", elapsed_ms / 1000, tty ? "" : "\n");
    fflush(stderr);
}

/* Waits until every online host of the image's region has said ready or
 * failed, polling its hosts. CLI_EXIT_OK when none failed; else the status
 * after saying why: a host failed (1, each host's message), the time ran out
 * (5), the server's answer. *hosts is the last list seen. */
static int wait_import(struct cli *cli, const char *name, int64_t timeout_s, json_t **hosts)
{
    bool tty = isatty(STDERR_FILENO);
    int64_t start = now_ms();
    struct import_tally t, last = { -1, -1, -1, -1, -1 };
    struct sl_error err = SL_ERROR_INIT;

    for (;;) {
        json_t *next = image_hosts(cli, name, &err);
        if (next) {
            json_decref(*hosts);
            *hosts = next;
        } else if (err.kind == SL_E_UNAVAILABLE) {
            sl_error_clear(&err); /* a blip of the network or a restarting server */
        } else {
            if (tty)
                fputs("\r\033[K", stderr);
            return cli_fail(&err);
        }
        tally(*hosts, &t);
        int64_t elapsed = now_ms() - start;
        if (*hosts && t.building + t.waiting == 0)
            break;
        show_import(tty, name, &t, &last, elapsed);
        if (elapsed >= timeout_s * 1000) {
            if (tty)
                fputs("\r\033[K", stderr);
            fprintf(stderr,
                    "suanli: image %s is still importing on %d host(s) after %" PRId64
                    " s; they go on in the background: follow it with suanli admin image hosts "
                    "%s\n",
                    name, t.building + t.waiting, timeout_s, name);
            return CLI_EXIT_UNAVAILABLE;
        }
        struct timespec pause = { 0, IMPORT_POLL_MS * 1000000L };
        while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
            ;
    }
    if (tty)
        fputs("\r\033[K", stderr);
    else if (last.ready >= 0)
        show_import(false, name, &t, NULL, now_ms() - start);
    if (!t.failed)
        return CLI_EXIT_OK;
    size_t i;
    json_t *h;
    json_array_foreach(*hosts, i, h)
    {
        if (strcmp(jstr(h, "state") ? jstr(h, "state") : "", "failed") == 0)
            fprintf(stderr, "suanli: image %s failed on host %s: %s\n", name,
                    jstr(h, "hostname") ? jstr(h, "hostname") : jstr(h, "node_id"),
                    jstr(h, "message") && *jstr(h, "message") ? jstr(h, "message") : "(no reason)");
    }
    if (t.ready)
        fprintf(stderr,
                "suanli: image %s is ready on %d other host(s): instances start there only; "
                "see suanli admin image hosts %s\n",
                name, t.ready, name);
    else
        fprintf(stderr,
                "suanli: no host could import image %s: renters do not see it; once the cause "
                "is fixed, suanli admin image rm %s and import it again\n",
                name, name);
    return CLI_EXIT_REFUSED;
}

static int run_image_import(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *name = cli_text(a, "name", NULL), *region = cli_text(a, "region", NULL),
               *kind = cli_text(a, "kind", NULL), *description = cli_text(a, "description", NULL);
    int64_t timeout = cli_number(a, "timeout", IMPORT_DEFAULT_TIMEOUT);
    bool wait = !cli_has(a, "no-wait");
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
    if (!wait) {
        if (cli->output == OUTPUT_JSON) {
            output_json(stdout, img);
            return CLI_EXIT_OK;
        }
        printf("uploaded image %s (sha256 %.12s): the hosts of %s fetch and import it\n", name,
               jstr(img, "sha256") ? jstr(img, "sha256") : "?", region ? region : "every region");
        fprintf(stderr, "follow it with suanli admin image hosts %s\n", name);
        return CLI_EXIT_OK;
    }
    cleanup_json json_t *hosts = NULL;
    status = wait_import(cli, name, timeout, &hosts);
    struct import_tally t;
    tally(hosts, &t);
    if (cli->output == OUTPUT_JSON) {
        json_object_set_new(img, "state",
                            json_string(t.ready                   ? "ready"
                                        : t.failed && !t.building ? "failed"
                                        : t.building              ? "building"
                                                                  : "pending"));
        json_object_set_new(img, "nodes", json_integer(t.ready));
        json_object_set_new(img, "hosts", hosts ? json_incref(hosts) : json_array());
        output_json(stdout, img);
        return status;
    }
    if (status != CLI_EXIT_OK)
        return status;
    if (t.ready)
        printf("image %s is ready on %d host(s) (sha256 %.12s)\n", name, t.ready,
               jstr(img, "sha256") ? jstr(img, "sha256") : "?");
    else
        printf("uploaded image %s (sha256 %.12s): no host of %s is online to import it; hosts "
               "import it when they are\n",
               name, jstr(img, "sha256") ? jstr(img, "sha256") : "?",
               region ? region : "any region");
    if (t.offline)
        printf("%d host(s) offline import it when they are back\n", t.offline);
    return CLI_EXIT_OK;
}

static int run_image_hosts(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *hosts = image_hosts(cli, a->argv[0], &err);
    if (!hosts)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        cleanup_json json_t *out = json_pack("{s:s, s:O}", "image", a->argv[0], "items", hosts);
        output_json(stdout, out);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "HOST", "NODE", "REGION", "STATE", "ONLINE", "MESSAGE" };
    struct table tb;
    size_t i;
    json_t *h;
    table_init(&tb, ARRAY_SIZE(headers), headers);
    json_array_foreach(hosts, i, h)
    {
        const char *row[] = {
            jstr(h, "hostname"),
            jstr(h, "node_id"),
            field(h, "region"),
            jstr(h, "state"),
            json_is_true(json_object_get(h, "online")) ? "yes" : "no",
            field(h, "message"),
        };
        table_add(&tb, row);
    }
    table_print(&tb, stdout);
    table_release(&tb);
    return CLI_EXIT_OK;
}

static int run_image_rm(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/admin/images", "image");
}

const struct cli_command cmd_admin_image_hosts = {
    .name = "admin image hosts",
    .args = "NAME",
    .summary = "an image on each host of its region: ready, building, failed (and why) or missing",
    .run = run_image_hosts,
};

const struct cli_command cmd_admin_image_rm = {
    .name = "admin image rm",
    .aliases = { "admin image remove", "admin image delete" },
    .args = "NAME",
    .summary = "delete an image (a failed import, say); refused while an instance uses it",
    .run = run_image_rm,
};

const struct cli_command cmd_admin_image_import = {
    .name = "admin image import",
    .args = "FILE",
    .options = image_import_options,
    .summary = "upload an image (a rootfs tarball, a docker save tarball or a tarred OCI "
               "layout) and wait until its hosts have imported it",
    .run = run_image_import,
};

const struct cli_command cmd_admin_image_build = {
    .name = "admin image build",
    .args = "NAME",
    .options = image_build_options,
    .summary = "have every node of a region (or all) build an image from a recipe",
    .run = run_image_build,
};

/* Saved images: image save, rm, share and unshare (a renter's own). */

#define SAVE_DEFAULT_TIMEOUT 3600

static const struct cli_option image_save_options[] = {
    { .name = "description", .arg = "TEXT", .help = "a line that says what is in it" },
    { .name = "no-wait", .help = "return once asked, before the host has saved it" },
    { .name = "timeout",
      .arg = "SECONDS",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 86400,
      .help = "wait at most this long for the host (default 3600); it goes on after" },
    { 0 },
};

static json_t *image_get(struct cli *cli, const char *name, struct sl_error *err)
{
    cleanup_free char *ename = sl_client_escape(name);
    cleanup_free char *path = xasprintf("/v1/images/%s", ename);
    json_t *out = NULL;

    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &out, err) < 0)
        return NULL;
    return out;
}

/* Polls the image until its host's verdict: ready (0), failed (1, with
 * the host's reason), or the time is up (5). */
static int wait_save(struct cli *cli, const char *name, int64_t timeout_s, json_t **img)
{
    bool tty = isatty(STDERR_FILENO);
    int64_t start = now_ms();
    struct sl_error err = SL_ERROR_INIT;

    for (;;) {
        json_t *next = image_get(cli, name, &err);
        if (next) {
            json_decref(*img);
            *img = next;
        } else if (err.kind == SL_E_UNAVAILABLE) {
            sl_error_clear(&err);
        } else {
            if (tty)
                fputs("\r\033[K", stderr);
            return cli_fail(&err);
        }
        const char *state = *img && jstr(*img, "state") ? jstr(*img, "state") : "saving";
        int64_t elapsed = now_ms() - start;
        if (strcmp(state, "ready") == 0 || strcmp(state, "failed") == 0) {
            if (tty)
                fputs("\r\033[K", stderr);
            if (strcmp(state, "ready") == 0)
                return CLI_EXIT_OK;
            fprintf(stderr, "suanli: saving image %s failed: %s\n", name,
                    jstr(*img, "message") && *jstr(*img, "message") ? jstr(*img, "message")
                                                                    : "(no reason)");
            fprintf(stderr, "suanli: delete it with suanli image rm %s and save again\n", name);
            return CLI_EXIT_REFUSED;
        }
        if (tty)
            fprintf(stderr, "\r\033[Kimage %s: %s (%" PRId64 " s)", name, state, elapsed / 1000);
        if (elapsed >= timeout_s * 1000) {
            if (tty)
                fputs("\r\033[K", stderr);
            fprintf(stderr,
                    "suanli: image %s is still %s after %" PRId64 " s; the host goes on in the "
                    "background: follow it with suanli image ls\n",
                    name, state, timeout_s);
            return CLI_EXIT_UNAVAILABLE;
        }
        struct timespec pause = { 0, IMPORT_POLL_MS * 1000000L };
        while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
            ;
    }
}

static int run_image_save(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *id = a->argv[0], *name = a->argv[1];
    const char *description = cli_text(a, "description", NULL);
    int64_t timeout = cli_number(a, "timeout", SAVE_DEFAULT_TIMEOUT);
    bool wait = !cli_has(a, "no-wait");
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s}", "name", name);
    if (description)
        json_object_set_new(body, "description", json_string(description));
    cleanup_free char *path = cli_instance_path(id, "image");
    cleanup_json json_t *img = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &img, &err) < 0)
        return cli_fail(&err);
    if (wait && (status = wait_save(cli, name, timeout, &img)) != CLI_EXIT_OK)
        return status;
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, img);
        return CLI_EXIT_OK;
    }
    char layer[32], total[32];
    if (!wait)
        printf("saving instance %s as image %s; follow it with suanli image ls\n", id, name);
    else
        printf("saved instance %s as image %s (%s over %s, %s in all): start it with suanli "
               "create --image %s\n",
               id, name, size_text(jint(img, "layer_bytes"), layer),
               jstr(img, "parent") ? jstr(img, "parent") : "?",
               size_text(jint(img, "size_bytes"), total), name);
    return CLI_EXIT_OK;
}

static int run_image_rm_own(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/images", "image");
}

static const struct cli_option image_share_options[] = {
    { .name = "community", .help = "every renter (they see it in image ls and start from it)" },
    { .name = "user", .arg = "EMAIL", .help = "one renter, by the email they log in with" },
    { 0 },
};

static int share(struct cli *cli, const struct cli_args *a, bool on)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *name = a->argv[0], *user = cli_text(a, "user", NULL);
    bool community = cli_has(a, "community");
    int status;

    if (community == (user != NULL)) {
        fputs("suanli: say whom: --community (every renter) or --user EMAIL\n", stderr);
        return CLI_EXIT_USAGE;
    }
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body =
        community ? json_pack("{s:b}", "community", 1) : json_pack("{s:s}", "email", user);
    cleanup_free char *ename = sl_client_escape(name);
    cleanup_free char *path = xasprintf("/v1/images/%s/%s", ename, on ? "share" : "unshare");
    cleanup_json json_t *img = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &img, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, img);
        return CLI_EXIT_OK;
    }
    if (on)
        printf("shared image %s with %s: they can start from it, not delete or share it\n", name,
               community ? "every renter" : user);
    else
        printf("image %s is no longer shared with %s\n", name, community ? "every renter" : user);
    return CLI_EXIT_OK;
}

static int run_image_share(struct cli *cli, const struct cli_args *a)
{
    return share(cli, a, true);
}

static int run_image_unshare(struct cli *cli, const struct cli_args *a)
{
    return share(cli, a, false);
}

const struct cli_command cmd_image_save = {
    .name = "image save",
    .args = "ID NAME",
    .options = image_save_options,
    .summary = "save an instance (stopped, or running) as a private image and wait until it is "
               "ready",
    .run = run_image_save,
};

const struct cli_command cmd_image_rm = {
    .name = "image rm",
    .aliases = { "image remove", "image delete" },
    .args = "NAME",
    .summary = "delete an image you saved; refused while an instance uses it",
    .run = run_image_rm_own,
};

const struct cli_command cmd_image_share = {
    .name = "image share",
    .args = "NAME",
    .options = image_share_options,
    .summary = "let every renter (--community) or one (--user EMAIL) start from an image you saved",
    .run = run_image_share,
};

const struct cli_command cmd_image_unshare = {
    .name = "image unshare",
    .args = "NAME",
    .options = image_share_options,
    .summary = "take back a share of an image you saved",
    .run = run_image_unshare,
};
