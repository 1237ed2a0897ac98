/* create, ls, show, events, stop, start, restart, release, ssh: a renter's
 * instances (DESIGN.md section 3). The lifecycle commands wait for the state
 * they ask for, polling the instance, unless --no-wait. */
#include "cli.h"
#include "config.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/json.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLL_INTERVAL_NS (100L * SL_NSEC_PER_MSEC)
#define DEFAULT_TIMEOUT  120
#define MAX_TIMEOUT      SL_SEC_PER_DAY

/* "24 GiB" from MiB, with one decimal when it is not whole. */
static char *gib(int64_t mib, char *buf)
{
    if (mib % 1024 == 0)
        snprintf(buf, 32, "%" PRId64 " GiB", mib / 1024);
    else
        snprintf(buf, 32, "%" PRId64 ".%" PRId64 " GiB", mib / 1024, mib % 1024 * 10 / 1024);
    return buf;
}

/* "1×RTX 4090", with " (sim)" when the GPUs are simulated; "none" for 0. */
static char *gpu_text(json_t *inst, char *buf, size_t size)
{
    int64_t n = jint(inst, "gpus");

    if (n <= 0)
        snprintf(buf, size, "none");
    else
        snprintf(buf, size, "%" PRId64 "×%s%s", n,
                 jstr(inst, "gpu_model") ? jstr(inst, "gpu_model") : "?",
                 json_is_true(json_object_get(inst, "simulated_gpus")) ? " (sim)" : "");
    return buf;
}

static bool state_is(json_t *inst, const char *state)
{
    const char *s = jstr(inst, "state");

    return s && strcmp(s, state) == 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SL_MSEC_PER_SEC + ts.tv_nsec / SL_NSEC_PER_MSEC;
}

static void progress(bool shown, const char *id, const char *state, int64_t elapsed_ms)
{
    if (!shown)
        return;
    fprintf(stderr, "\r\033[K%s: %s, %" PRId64 "s (Ctrl-C stops waiting, not the instance)", id,
            state ? state : "?", elapsed_ms / SL_MSEC_PER_SEC);
    fflush(stderr);
}

static void clear_progress(bool shown)
{
    if (shown)
        fputs("\r\033[K", stderr);
}

/* Polls the instance in *inst (replaced as it goes) every 100 ms until its
 * state is target. Returns CLI_EXIT_OK, or the status of the failure after
 * saying what it was: the instance failed or is now wanted in another state
 * (1), the time ran out (5), the server's answer for the GET. A 404 while
 * waiting for "released" means it is gone, which is what was asked. */
static int wait_for(struct cli *cli, json_t **inst, const char *target, int64_t timeout_s)
{
    cleanup_free char *id = xstrdup(jstr(*inst, "id") ? jstr(*inst, "id") : "?");
    bool tty = isatty(STDERR_FILENO);
    int64_t start = now_ms();
    struct sl_error err = SL_ERROR_INIT;

    for (;;) {
        const char *desired = jstr(*inst, "desired");
        const char *message = jstr(*inst, "state_message");
        bool have_message = message && *message;
        if (state_is(*inst, target))
            break;
        if (state_is(*inst, "failed")) {
            clear_progress(tty);
            fprintf(stderr, "suanli: instance %s failed%s%s: see suanli events %s\n", id,
                    have_message ? ": " : "", have_message ? message : "", id);
            return CLI_EXIT_REFUSED;
        }
        /* someone else (auto-release, low balance, an admin) now wants it in
         * another state: the target states are also the desired states */
        if (desired && strcmp(desired, target) != 0) {
            clear_progress(tty);
            fprintf(stderr,
                    "suanli: instance %s is now to be %s, not %s%s%s: see suanli events %s\n", id,
                    desired, target, have_message ? ": " : "", have_message ? message : "", id);
            return CLI_EXIT_REFUSED;
        }
        int64_t elapsed = now_ms() - start;
        if (elapsed >= timeout_s * SL_MSEC_PER_SEC) {
            clear_progress(tty);
            fprintf(stderr,
                    "suanli: instance %s is still %s after %" PRId64
                    " s, not yet %s; it goes on in the background: follow it with suanli show %s\n",
                    id, jstr(*inst, "state") ? jstr(*inst, "state") : "?", timeout_s, target, id);
            return CLI_EXIT_UNAVAILABLE;
        }
        progress(tty, id, jstr(*inst, "state"), elapsed);
        struct timespec pause = { 0, POLL_INTERVAL_NS };
        while (nanosleep(&pause, &pause) < 0 && errno == EINTR)
            ;
        json_t *next = cli_instance_get(cli, id, &err);
        if (next) {
            json_decref(*inst);
            *inst = next;
            continue;
        }
        if (err.kind == SL_E_NOT_FOUND && strcmp(target, "released") == 0) {
            json_object_set_new(*inst, "state", json_string("released"));
            break;
        }
        /* a blip of the network or a restarting server is waited out */
        if (err.kind != SL_E_UNAVAILABLE) {
            clear_progress(tty);
            return cli_fail(&err);
        }
        sl_error_clear(&err);
    }
    clear_progress(tty);
    return CLI_EXIT_OK;
}

static bool prepaid(json_t *inst)
{
    const char *plan = jstr(inst, "plan");

    return plan && strcmp(plan, "payg") != 0;
}

/* "pay-as-you-go", or "day until 2026-12-01 06:17 UTC, renews
 * automatically". buf holds 128 bytes. */
static char *plan_text(json_t *inst, char *buf)
{
    char until[32];

    if (!prepaid(inst))
        snprintf(buf, 128, "pay-as-you-go");
    else
        snprintf(buf, 128, "%s until %s UTC%s", jstr(inst, "plan"),
                 output_time(jstr(inst, "plan_expires_at"), until),
                 json_is_true(json_object_get(inst, "auto_renew")) ? ", renews automatically"
                                                                   : ", then it stops");
    return buf;
}

/* Seconds from now until an RFC 3339 time (negative when past); false
 * when t is NULL or not a time. */
static bool seconds_until(const char *t, int64_t *seconds)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t at;

    if (!t || sl_time_parse(t, &at, &err) < 0)
        return false;
    *seconds = at - (int64_t)time(NULL);
    return true;
}

/* How long until a stopped pay-as-you-go instance is released ("14d 23h"),
 * or NULL when it is not counting down. buf holds 32 bytes. */
static const char *release_countdown(json_t *inst, char *buf)
{
    int64_t left;

    if (!seconds_until(jstr(inst, "release_at"), &left))
        return NULL;
    return left > 0 ? sl_duration_format(left, buf) : "due now";
}

/* The instance's SSH access: the command and the root password. */
static void print_access(json_t *inst)
{
    json_t *ssh = json_object_get(inst, "ssh");
    char gpus[96], plan[128];
    const struct output_pair pairs[] = {
        { "id", jstr(inst, "id") },
        { "name", jstr(inst, "name") },
        { "state", jstr(inst, "state") },
        { "gpus", gpu_text(inst, gpus, sizeof(gpus)) },
        { "plan", plan_text(inst, plan) },
        { "ssh", jstr(ssh, "command") },
        { "password", jstr(ssh, "password") },
    };

    output_pairs(stdout, pairs, ARRAY_SIZE(pairs));
}

/* The options of the commands that wait for the state they ask for. */
#define WAIT_OPTIONS                                                                               \
    { .name = "no-wait", .help = "return at once with the state the server answered" },            \
    {                                                                                              \
        .name = "timeout", .arg = "SECONDS", .type = CLI_OPT_INT, .min = 1, .max = MAX_TIMEOUT,    \
        .help = "wait at most this long (default 120); the instance goes on after"                 \
    }

static const struct cli_option create_options[] = {
    { .name = "gpu-model",
      .arg = "MODEL",
      .required = true,
      .help = "the GPU model, as suanli market lists them" },
    { .name = "gpus",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 8,
      .help = "how many GPUs (default 1)" },
    { .name = "image",
      .arg = "IMAGE",
      .help = "the image it starts from, as suanli image ls lists them (default debian-12)" },
    { .name = "data-disk",
      .arg = "GIB",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 1 << 20,
      .help = "the data disk's size in GiB (default 50)" },
    { .name = "name",
      .arg = "NAME",
      .help = "a name, one per instance of yours: commands take it where they take the id" },
    { .name = "region", .arg = "REGION", .help = "the region (default: any with the GPUs free)" },
    { .name = "host",
      .arg = "HOST",
      .help = "this host only (its node id or host name, as suanli market lists them)" },
    { .name = "plan",
      .arg = "day|week|month",
      .help = "prepay the GPUs for a day, a week or a month (default: pay-as-you-go)" },
    { .name = "auto-renew",
      .help = "with --plan: renew the plan at its end while the balance allows" },
    WAIT_OPTIONS,
    { 0 },
};

static int run_create(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *model = cli_text(a, "gpu-model", NULL), *image = cli_text(a, "image", "debian-12"),
               *name = cli_text(a, "name", NULL), *region = cli_text(a, "region", NULL),
               *plan = cli_text(a, "plan", NULL), *host = cli_text(a, "host", NULL);
    int64_t gpus = cli_number(a, "gpus", 1), disk = cli_number(a, "data-disk", 50),
            timeout = cli_number(a, "timeout", DEFAULT_TIMEOUT);
    bool wait = !cli_has(a, "no-wait"), auto_renew = cli_has(a, "auto-renew");
    char key[33];
    int status;

    if (plan && !cli_is_plan(plan))
        return cli_usage_error(cli,
                               "--plan takes day, week, month or payg (pay-as-you-go), not "
                               "'%s'",
                               plan);
    if (auto_renew && (!plan || strcmp(plan, "payg") == 0))
        return cli_usage_error(cli, "--auto-renew goes with --plan day, week or month");
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body =
        json_pack("{s:s, s:I, s:s, s:I}", "gpu_model", model, "gpus", (json_int_t)gpus, "image",
                  image, "data_disk_gib", (json_int_t)disk);
    if (name)
        json_object_set_new(body, "name", json_string(name));
    if (region)
        json_object_set_new(body, "region", json_string(region));
    if (host)
        json_object_set_new(body, "host", json_string(host));
    if (plan)
        json_object_set_new(body, "plan", json_string(plan));
    if (auto_renew)
        json_object_set_new(body, "auto_renew", json_true());
    /* a retry of this very request never makes a second instance */
    sl_random_hex(key, 16);
    cleanup_json json_t *inst = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/instances", body, key, &inst, &err) < 0)
        return cli_fail(&err);
    status = wait ? wait_for(cli, &inst, "running", timeout) : CLI_EXIT_OK;
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, inst);
    else if (status == CLI_EXIT_OK)
        print_access(inst);
    return status;
}

static const struct cli_option ls_options[] = {
    { .name = "all", .help = "released instances too" },
    { .name = "state",
      .arg = "STATE",
      .help = "only those in one state: creating, running, stopping, stopped, starting, "
              "releasing, released, failed (or all)" },
    { 0 },
};

static int run_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *state = cli_text(a, "state", NULL);
    bool all = cli_has(a, "all");
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    /* the server leaves released instances out unless asked for them */
    if (all && !state)
        state = "all";
    cleanup_free char *escaped = state ? sl_client_escape(state) : NULL;
    cleanup_free char *path =
        state ? xasprintf("/v1/instances?state=%s", escaped) : xstrdup("/v1/instances");
    cleanup_json json_t *list = sl_client_list(&cli->client, path, 500, &err);
    if (!list)
        return cli_fail(&err);
    json_t *items = json_object_get(list, "items");
    /* released instances are history: shown with --all or --state released */
    for (size_t i = json_array_size(items); !all && !state && i-- > 0;)
        if (state_is(json_array_get(items, i), "released"))
            json_array_remove(items, i);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID",   "NAME",   "STATE",      "GPU", "MODE",
                                           "PLAN", "REGION", "RELEASE IN", "SSH" };
    struct table t;
    size_t i;
    json_t *inst;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(items, i, inst)
    {
        char gpus[96], countdown[32];
        bool up = state_is(inst, "running") || state_is(inst, "starting");
        const char *row[] = {
            jstr(inst, "id"),
            jstr(inst, "name"),
            jstr(inst, "state"),
            gpu_text(inst, gpus, sizeof(gpus)),
            up ? jstr(inst, "mode") : NULL,
            jstr(inst, "plan"),
            jstr(inst, "region"),
            release_countdown(inst, countdown),
            state_is(inst, "released") ? NULL : jstr(json_object_get(inst, "ssh"), "command"),
        };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_show(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *inst = NULL;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    if (!(inst = cli_instance_find(cli, a->argv[0], &err)))
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, inst);
        return CLI_EXIT_OK;
    }
    /* the currency the amounts are in; without it they print bare */
    cleanup_json json_t *balance = NULL;
    if (sl_client_request(&cli->client, "GET", "/v1/balance", NULL, NULL, &balance, &err) < 0)
        sl_error_clear(&err);
    const char *currency = jstr(balance, "currency");
    char plan[128], price[OUTPUT_MONEY_MAX + 16], charged[OUTPUT_MONEY_MAX],
        rate[OUTPUT_MONEY_MAX + 8], stopped[32], release_at[32], countdown[32], stop_at[96],
        idle_stop[96];
    cleanup_free char *release = NULL;
    if (prepaid(inst))
        output_money(jint(inst, "plan_price_micros"), currency, price);
    if (jint(inst, "rate_per_hour_micros") > 0) {
        output_money(jint(inst, "rate_per_hour_micros"), currency, rate);
        strcat(rate, "/h");
    } else {
        snprintf(rate, sizeof(rate), "nothing now");
    }
    if (release_countdown(inst, countdown))
        release = xasprintf("%s UTC (in %s) unless started or put on a plan",
                            output_time(jstr(inst, "release_at"), release_at), countdown);
    json_t *ssh = json_object_get(inst, "ssh");
    const char *message = jstr(inst, "state_message");
    char state[160], gpus[96], indices[128], cpu[32], mem[32], sys[32], data[32], created[32],
        updated[32];
    size_t i, off = 0;
    json_t *g;
    snprintf(state, sizeof(state), "%s%s%s%s%s", jstr(inst, "state") ? jstr(inst, "state") : "?",
             state_is(inst, "running") && jstr(inst, "mode") ? ", mode " : "",
             state_is(inst, "running") && jstr(inst, "mode") ? jstr(inst, "mode") : "",
             message && *message ? ": " : "", message && *message ? message : "");
    gpu_text(inst, gpus, sizeof(gpus));
    indices[0] = '\0';
    json_array_foreach(json_object_get(inst, "gpu_indices"), i, g)
    {
        int n = snprintf(indices + off, sizeof(indices) - off, "%s%" JSON_INTEGER_FORMAT,
                         i ? "," : " (indices ", json_integer_value(g));
        if (n < 0 || (size_t)n >= sizeof(indices) - off)
            break;
        off += (size_t)n;
    }
    if (off > 0 && off + 1 < sizeof(indices))
        strcat(indices, ")");
    cleanup_free char *gpu_line = xasprintf("%s%s", gpus, indices);
    /* no-GPU mode has half a core: the API sends a number, not an integer */
    snprintf(cpu, sizeof(cpu), "%g cores", json_number_value(json_object_get(inst, "cpu_cores")));
    snprintf(sys, sizeof(sys), "%" PRId64 " GiB", jint(inst, "system_disk_gib"));
    snprintf(data, sizeof(data), "%" PRId64 " GiB", jint(inst, "data_disk_gib"));
    /* a clone: its copy from the source ("copying 512 of 5,120 MiB from i-...") */
    json_t *copy = json_object_get(inst, "copy");
    cleanup_free char *copy_line =
        json_is_object(copy)
            ? xasprintf("%s from %s: %" PRId64 " of %" PRId64 " MiB", jstr(copy, "state"),
                        jstr(copy, "source_id"), jint(copy, "bytes_done") >> 20,
                        jint(copy, "bytes_total") >> 20)
            : NULL;
    /* a move: "copying from host n-a to host n-b: 512 of 5,120 MiB" */
    json_t *move = json_object_get(inst, "migration");
    cleanup_free char *move_line =
        json_is_object(move)
            ? xasprintf("%s, from host %s to host %s: %" PRId64 " of %" PRId64 " MiB%s%s",
                        jstr(move, "state"), jstr(move, "from_node"), jstr(move, "to_node"),
                        jint(move, "bytes_done") >> 20, jint(move, "bytes_total") >> 20,
                        *jstr(move, "message") ? ": " : "", jstr(move, "message"))
            : NULL;
    const struct output_pair pairs[] = {
        { "id", jstr(inst, "id") },
        { "name", jstr(inst, "name") },
        { "state", state },
        { "desired", jstr(inst, "desired") },
        { "region", jstr(inst, "region") },
        { "node", jstr(inst, "node_id") },
        { "gpus", gpu_line },
        { "cpu", cpu },
        { "memory", gib(jint(inst, "memory_mib"), mem) },
        { "system disk", sys },
        { "data disk", data },
        { "image", jstr(inst, "image") },
        { "copy", copy_line },
        { "move", move_line },
        { "plan", plan_text(inst, plan) },
        { "plan price", prepaid(inst) ? price : NULL },
        { "charged", output_money(jint(inst, "charged_micros"), currency, charged) },
        { "rate", rate },
        { "stopped",
          jstr(inst, "stopped_at") ? output_time(jstr(inst, "stopped_at"), stopped) : NULL },
        { "auto-release", release },
        { "stop at", cli_stop_at_text(inst, stop_at, sizeof(stop_at)) },
        { "idle stop", cli_idle_stop_text(inst, idle_stop, sizeof(idle_stop)) },
        { "ssh", jstr(ssh, "command") },
        { "password", jstr(ssh, "password") },
        { "created", output_time(jstr(inst, "created_at"), created) },
        { "updated", output_time(jstr(inst, "updated_at"), updated) },
    };
    output_pairs(stdout, pairs, ARRAY_SIZE(pairs));
    cli_print_services(stdout, inst);
    /* what its metrics say (docs/design/metrics.md, "Hints") */
    size_t h;
    json_t *hint;
    json_array_foreach(json_object_get(inst, "hints"), h, hint)
        printf("%shint: %s\n", h ? "" : "\n", jstr(hint, "message"));
    return CLI_EXIT_OK;
}

/* True for an event kind's shape: lowercase letters and '_'. */
static bool event_kind_word(const char *kind)
{
    if (!*kind)
        return false;
    for (const char *p = kind; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || *p == '_'))
            return false;
    return true;
}

static const struct cli_option events_options[] = {
    { .name = "kind",
      .arg = "KIND",
      .help = "only events of one kind: create, stop, plan, plan_ended, balance_stop, "
              "release_warning, auto_release, ..." },
    { 0 },
};

static int run_events(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *kind = cli_text(a, "kind", NULL), *id = NULL;
    cleanup_json json_t *inst = NULL;
    int status;

    if (kind && !event_kind_word(kind))
        return cli_usage_error(cli,
                               "--kind takes an event kind such as stop, plan or balance_low, "
                               "not '%s'",
                               kind);
    if ((status = cli_need_token(cli)))
        return status;
    if (a->argc == 1) {
        if (!(inst = cli_instance_find(cli, a->argv[0], &err)))
            return cli_fail(&err);
        id = jstr(inst, "id");
    }
    cleanup_free char *escaped = kind ? sl_client_escape(kind) : NULL;
    cleanup_free char *path = id     ? cli_instance_path(id, "events")
                              : kind ? xasprintf("/v1/events?kind=%s", escaped)
                                     : xstrdup("/v1/events");
    cleanup_json json_t *list = sl_client_list(&cli->client, path, 500, &err);
    if (!list)
        return cli_fail(&err);
    json_t *items = json_object_get(list, "items"), *ev;
    /* one instance's events come without its id and without a filter */
    for (size_t i = json_array_size(items); id && kind && i-- > 0;) {
        const char *k = jstr(json_array_get(items, i), "kind");
        if (!k || strcmp(k, kind) != 0)
            json_array_remove(items, i);
    }
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = {
        "TIME", "INSTANCE", "KIND", "STATE", "REASON", "MESSAGE"
    };
    static const char *const csv_headers[] = { "seq",   "created_at", "instance_id", "kind",
                                               "state", "reason",     "message" };
    bool csv = cli->output == OUTPUT_CSV;
    struct table t;
    size_t i;
    if (csv)
        table_init(&t, ARRAY_SIZE(csv_headers), csv_headers);
    else
        table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(items, i, ev)
    {
        char seq[32], at[32];
        const char *message = jstr(ev, "message"), *state = jstr(ev, "state");
        const char *instance = id ? id : jstr(ev, "instance_id");
        snprintf(seq, sizeof(seq), "%" PRId64, jint(ev, "seq"));
        /* account-wide events (balance_low) belong to no instance */
        const char *row[] = {
            seq,
            csv ? jstr(ev, "created_at") : output_time(jstr(ev, "created_at"), at),
            instance && *instance ? instance : NULL,
            jstr(ev, "kind"),
            state && *state ? state : NULL,
            jstr(ev, "reason"),
            message && *message ? message : NULL,
        };
        table_add(&t, csv ? row : row + 1);
    }
    if (csv)
        table_print_csv(&t, stdout);
    else
        table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

/* One lifecycle verb: the route it POSTs to and the state it waits for. */
struct lifecycle {
    const char *verb;   /* the route's last segment */
    const char *target; /* the state waited for */
    const char *done;   /* "stopped", for "stopped i-..." */
    bool takes_no_gpu, takes_yes;
};

static const struct lifecycle op_stop = { "stop", "stopped", "stopped", false, false };
static const struct lifecycle op_start = { "start", "running", "started", true, false };
static const struct lifecycle op_restart = { "restart", "running", "restarted", false, false };
static const struct lifecycle op_release = { "release", "released", "released", false, true };

/* Asks on the terminal before release deletes the disks. */
static int confirm_release(const char *id)
{
    char answer[16];

    fprintf(stderr,
            "release %s? Its system and data disks are deleted and cannot be recovered. "
            "[y/N] ",
            id);
    fflush(stderr);
    if (!fgets(answer, sizeof(answer), stdin) || (answer[0] != 'y' && answer[0] != 'Y')) {
        fprintf(stderr, "suanli: %s not released\n", id);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

static int lifecycle(struct cli *cli, const struct cli_args *a, const struct lifecycle *op)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t timeout = cli_number(a, "timeout", DEFAULT_TIMEOUT);
    bool wait = !cli_has(a, "no-wait");
    bool no_gpu = op->takes_no_gpu && cli_has(a, "no-gpu");
    bool ask = op->takes_yes && !cli_has(a, "yes");
    int status;

    /* refused before anything is looked up: there is no one to ask */
    if (ask && !isatty(STDIN_FILENO))
        return cli_usage_error(cli, "release deletes the instance's disks for good: no terminal to "
                                    "ask on, so confirm with --yes");
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *found = cli_instance_find(cli, a->argv[0], &err);
    if (!found)
        return cli_fail(&err);
    cleanup_free char *id = xstrdup(jstr(found, "id"));
    if (ask && (status = confirm_release(id)))
        return status;
    cleanup_free char *path = cli_instance_path(id, op->verb);
    cleanup_json json_t *body =
        op->takes_no_gpu ? json_pack("{s:s}", "mode", no_gpu ? "nogpu" : "gpu") : NULL;
    cleanup_json json_t *inst = NULL;
    /* the 409 gpus_unavailable message names the ways out; print it as it is */
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &inst, &err) < 0)
        return cli_fail(&err);
    if (!inst)
        inst = json_pack("{s:s}", "id", id);
    status = wait ? wait_for(cli, &inst, op->target, timeout) : CLI_EXIT_OK;
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, inst);
    else if (status == CLI_EXIT_OK && !wait)
        printf("%s %s: %s\n", op->verb, id, jstr(inst, "state") ? jstr(inst, "state") : "asked");
    else if (status == CLI_EXIT_OK && strcmp(op->target, "running") == 0)
        printf("%s %s%s: %s\n", op->done, id,
               json_is_string(json_object_get(inst, "mode")) &&
                       strcmp(jstr(inst, "mode"), "nogpu") == 0
                   ? " in no-GPU mode"
                   : "",
               jstr(json_object_get(inst, "ssh"), "command")
                   ? jstr(json_object_get(inst, "ssh"), "command")
                   : "-");
    else if (status == CLI_EXIT_OK)
        printf("%s %s\n", op->done, id);
    return status;
}

static int run_stop(struct cli *cli, const struct cli_args *a)
{
    bool scheduled = cli_has(a, "at") || cli_has(a, "in") || cli_has(a, "cancel");

    if (scheduled && (cli_has(a, "no-wait") || cli_has(a, "timeout")))
        return cli_usage_error(cli, "a scheduled stop (--at, --in, --cancel) waits for nothing: "
                                    "leave out --no-wait and --timeout");
    if (scheduled)
        return cli_stop_schedule(cli, a);
    return lifecycle(cli, a, &op_stop);
}

static int run_start(struct cli *cli, const struct cli_args *a)
{
    return lifecycle(cli, a, &op_start);
}

static int run_restart(struct cli *cli, const struct cli_args *a)
{
    return lifecycle(cli, a, &op_restart);
}

static int run_release(struct cli *cli, const struct cli_args *a)
{
    return lifecycle(cli, a, &op_release);
}

static const struct cli_option stop_options[] = {
    WAIT_OPTIONS,
    { .name = "at",
      .arg = "HH:MM|RFC3339",
      .group = 1,
      .help = "stop it later: the next time the local clock shows HH:MM, or at an RFC 3339 time" },
    { .name = "in",
      .arg = "DURATION",
      .group = 1,
      .help = "stop it later: after a duration such as 90s, 30m, 3h or 2d" },
    { .name = "cancel", .group = 1, .help = "do not stop it later after all" },
    { 0 },
};

static const struct cli_option start_options[] = {
    { .name = "no-gpu", .help = "start in the cheap no-GPU mode (no GPUs, half a core)" },
    WAIT_OPTIONS,
    { 0 },
};

static const struct cli_option wait_options[] = {
    WAIT_OPTIONS,
    { 0 },
};

static const struct cli_option release_options[] = {
    { .name = "yes", .help = "do not ask first (needed without a terminal)" },
    WAIT_OPTIONS,
    { 0 },
};

const struct cli_command cmd_create = {
    .name = "create",
    .aliases = { "instance create" },
    .options = create_options,
    .summary = "rent an instance and wait until it runs (1 GPU, debian-12, 50 GiB data disk, "
               "pay-as-you-go)",
    .run = run_create,
};

const struct cli_command cmd_ls = {
    .name = "ls",
    .aliases = { "instance ls", "instance list", "instances" },
    .options = ls_options,
    .summary = "list your instances with their plan and when stopped ones are released "
               "(--all includes released ones)",
    .run = run_ls,
};

const struct cli_command cmd_show = {
    .name = "show",
    .aliases = { "instance show" },
    .args = "ID|NAME",
    .summary = "an instance's state, GPUs, disks, plan, charges and SSH access",
    .run = run_show,
};

const struct cli_command cmd_events = {
    .name = "events",
    .aliases = { "instance events" },
    .args = "[ID|NAME]",
    .options = events_options,
    .summary = "your events (or one instance's), oldest first: state changes, plans, balance "
               "and release warnings, with their reasons",
    .run = run_events,
    .csv = true,
};

const struct cli_command cmd_stop = {
    .name = "stop",
    .aliases = { "instance stop" },
    .args = "ID|NAME",
    .options = stop_options,
    .summary = "stop an instance: its GPUs go back to the pool, its disks stay (--at, --in: "
               "later, as scheduled; --cancel: not after all)",
    .run = run_stop,
};

const struct cli_command cmd_start = {
    .name = "start",
    .aliases = { "instance start" },
    .args = "ID|NAME",
    .options = start_options,
    .summary = "start a stopped instance (--no-gpu: cheap no-GPU mode)",
    .run = run_start,
};

const struct cli_command cmd_restart = {
    .name = "restart",
    .aliases = { "instance restart" },
    .args = "ID|NAME",
    .options = wait_options,
    .summary = "restart an instance",
    .run = run_restart,
};

const struct cli_command cmd_release = {
    .name = "release",
    .aliases = { "instance release" },
    .args = "ID|NAME",
    .options = release_options,
    .summary = "release an instance: its disks are deleted for good",
    .run = run_release,
};

static const struct cli_option clone_options[] = {
    { .name = "gpu-model",
      .arg = "MODEL",
      .help = "the clone's GPU model (default: the source's)" },
    { .name = "gpus",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 8,
      .help = "the clone's GPUs (default: as many as the source)" },
    { .name = "host",
      .arg = "HOST",
      .help = "this host only (its node id or host name, as suanli market lists them)" },
    { .name = "name", .arg = "NAME", .help = "the clone's name (default: its id)" },
    { .name = "no-wait", .help = "return at once, while the disks are copied" },
    { .name = "timeout",
      .arg = "SECONDS",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = MAX_TIMEOUT,
      .help = "wait at most this long for the copy and the start (default 3600); the copy "
              "goes on after" },
    { 0 },
};

/* A new instance on another host with a stopped instance's disks, copied
 * host to host; the source stays as it is. */
static int run_clone(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *model = cli_text(a, "gpu-model", NULL), *host = cli_text(a, "host", NULL),
               *name = cli_text(a, "name", NULL);
    int64_t timeout = cli_number(a, "timeout", 3600);
    bool wait = !cli_has(a, "no-wait");
    char key[33];
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *found = cli_instance_find(cli, a->argv[0], &err);
    if (!found)
        return cli_fail(&err);
    cleanup_free char *path = cli_instance_path(jstr(found, "id"), "clone");
    cleanup_json json_t *body = json_object();
    if (model)
        json_object_set_new(body, "gpu_model", json_string(model));
    if (cli_has(a, "gpus"))
        json_object_set_new(body, "gpus", json_integer(cli_number(a, "gpus", 1)));
    if (host)
        json_object_set_new(body, "host", json_string(host));
    if (name)
        json_object_set_new(body, "name", json_string(name));
    /* a retry of this very request never makes a second clone */
    sl_random_hex(key, 16);
    cleanup_json json_t *inst = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, key, &inst, &err) < 0)
        return cli_fail(&err);
    status = wait ? wait_for(cli, &inst, "running", timeout) : CLI_EXIT_OK;
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, inst);
    else if (status == CLI_EXIT_OK && !wait)
        printf("cloning %s into %s: follow it with suanli show %s\n", jstr(found, "id"),
               jstr(inst, "id"), jstr(inst, "id"));
    else if (status == CLI_EXIT_OK)
        print_access(inst);
    return status;
}

const struct cli_command cmd_clone = {
    .name = "clone",
    .aliases = { "instance clone" },
    .args = "ID|NAME",
    .options = clone_options,
    .summary = "a new instance (on another host: --host) with a stopped instance's system and "
               "data disks, copied and checked; waits until it runs. The source stays as it is",
    .run = run_clone,
};

static const struct cli_option migrate_options[] = {
    { .name = "host",
      .arg = "HOST",
      .help = "move it to this host (its node id or host name, as suanli market lists them); "
              "default: the host of its region with the most of its GPUs free" },
    { .name = "no-wait", .help = "return at once, while the disks are copied" },
    { .name = "timeout",
      .arg = "SECONDS",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = MAX_TIMEOUT,
      .help = "wait at most this long for the copy (default 3600); it goes on after" },
    { 0 },
};

/* A stopped instance moved to another host: same id, name and (when free
 * there) SSH port; its disks on the first host go once the copy checks. */
static int run_migrate(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *host = cli_text(a, "host", NULL);
    int64_t timeout = cli_number(a, "timeout", 3600);
    bool wait = !cli_has(a, "no-wait");
    char key[33];
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *found = cli_instance_find(cli, a->argv[0], &err);
    if (!found)
        return cli_fail(&err);
    const char *id = jstr(found, "id");
    cleanup_free char *path = cli_instance_path(id, "migrate");
    cleanup_json json_t *body = json_object();
    if (host)
        json_object_set_new(body, "host", json_string(host));
    sl_random_hex(key, 16);
    cleanup_json json_t *inst = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, key, &inst, &err) < 0)
        return cli_fail(&err);
    json_t *move = json_object_get(inst, "migration");
    cleanup_free char *from = xstrdup(jstr(move, "from_node") ? jstr(move, "from_node") : "?");
    if (wait)
        status = wait_for(cli, &inst, "stopped", timeout);
    move = json_object_get(inst, "migration");
    if (status == CLI_EXIT_OK && wait && jstr(move, "state") &&
        strcmp(jstr(move, "state"), "failed") == 0) {
        fprintf(stderr, "suanli: the move of %s failed, it stays on host %s as it was: %s\n", id,
                from, jstr(move, "message") ? jstr(move, "message") : "see suanli events");
        status = CLI_EXIT_REFUSED;
    }
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, inst);
    else if (status == CLI_EXIT_OK && !wait)
        printf("moving %s from host %s to host %s: follow it with suanli show %s\n", id, from,
               jstr(move, "to_node"), id);
    else if (status == CLI_EXIT_OK)
        printf("moved %s from host %s to host %s (stopped; SSH there: %s). Start it with suanli "
               "start %s\n",
               id, from, jstr(move, "to_node"), jstr(json_object_get(inst, "ssh"), "command"), id);
    return status;
}

const struct cli_command cmd_migrate = {
    .name = "migrate",
    .aliases = { "instance migrate" },
    .args = "ID|NAME",
    .options = migrate_options,
    .summary = "move a stopped instance to another host (--host): its disks are copied and "
               "checked, then deleted on the first; same id and name, and stopped there",
    .run = run_migrate,
};
