/* Stops nobody clicks: `suanli stop ID --at 02:00 | --in 3h | --cancel`
 * (scheduled stop) and `suanli idle-stop` (stop after a period without an
 * SSH session, HTTP through a service port or GPU use). server/stops.h has
 * the rules. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/timefmt.h"
#include "../lib/when.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

bool cli_stop_is_schedule(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return false;
        if (strcmp(argv[i], "--cancel") == 0 || strncmp(argv[i], "--at", 4) == 0 ||
            strncmp(argv[i], "--in", 4) == 0)
            return true;
    }
    return false;
}

/* "2026-01-31 02:00 local (in 3h 2m)" for an RFC 3339 time, or NULL. */
static const char *local_time_text(const char *rfc3339, char *buf, size_t size)
{
    int64_t t;
    struct sl_error err = SL_ERROR_INIT;
    char in[32], when[32];

    if (!rfc3339 || sl_rfc3339_parse(rfc3339, &t, &err) < 0)
        return NULL;
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    strftime(when, sizeof(when), "%Y-%m-%d %H:%M %Z", &tm);
    snprintf(buf, size, "%s (in %s)", when, sl_duration_format(t - (int64_t)time(NULL), in));
    return buf;
}

const char *cli_stop_at_text(json_t *inst, char *buf, size_t size)
{
    return local_time_text(jstr(inst, "stop_at"), buf, size);
}

const char *cli_idle_stop_text(json_t *inst, char *buf, size_t size)
{
    int64_t after = jint(inst, "idle_stop_after_seconds");
    const char *source = jstr(inst, "idle_stop_source");
    char d[32];

    if (after <= 0)
        snprintf(buf, size, "off%s",
                 source && strcmp(source, "account") == 0 ? " (the account's default)" : "");
    else
        snprintf(buf, size, "after %s idle%s", sl_duration_format(after, d),
                 source && strcmp(source, "account") == 0 ? " (the account's default)" : "");
    return buf;
}

int cli_stop_schedule(struct cli *cli, int argc, char **argv)
{
    enum {
        OPT_AT = 1,
        OPT_IN,
        OPT_CANCEL
    };
    static const struct option opts[] = {
        { "at", required_argument, NULL, OPT_AT },
        { "in", required_argument, NULL, OPT_IN },
        { "cancel", no_argument, NULL, OPT_CANCEL },
        { 0 },
    };
    struct sl_error err = SL_ERROR_INIT;
    const char *at = NULL, *in = NULL;
    bool cancel = false;
    int c, status;

    while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
        if (c == OPT_AT)
            at = optarg;
        else if (c == OPT_IN)
            in = optarg;
        else if (c == OPT_CANCEL)
            cancel = true;
        else
            return cli_usage_error(cli, "a scheduled stop takes --at TIME, --in DURATION or "
                                        "--cancel (and no other option)");
    }
    if ((at != NULL) + (in != NULL) + cancel != 1)
        return cli_usage_error(cli, "give one of --at TIME, --in DURATION or --cancel");
    if ((status = cli_positionals(cli, argc, argv, 1)))
        return status;
    const char *id = argv[optind];
    cleanup_json json_t *body = NULL;
    if (at) {
        int64_t t;
        if (sl_when_parse(at, (int64_t)time(NULL), &t, &err) < 0)
            return cli_usage_error(cli, "--at: %s", err.message);
        char text[SL_TIME_FORMAT_MAX];
        body = json_pack("{s:s}", "at", sl_time_format(t, text));
    } else if (in) {
        int64_t s;
        if (sl_duration_parse(in, &s, &err) < 0 || s < 1)
            return cli_usage_error(cli,
                                   "--in takes a duration such as 90s, 30m, 3h or 2d; got "
                                   "'%s'",
                                   in);
        body = json_pack("{s:I}", "in_seconds", (json_int_t)s);
    } else {
        body = json_pack("{s:b}", "cancel", 1);
    }
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *e = client_escape(id);
    cleanup_free char *path = xasprintf("/v1/instances/%s/stop", e);
    cleanup_json json_t *inst = NULL;
    if (client_request(&cli->client, "POST", path, body, NULL, &inst, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, inst);
        return CLI_EXIT_OK;
    }
    char when[96];
    if (cancel)
        printf("%s: no scheduled stop\n", id);
    else
        printf("%s stops at %s; cancel with suanli stop %s --cancel\n", id,
               cli_stop_at_text(inst, when, sizeof(when)) ? when : "?", id);
    return CLI_EXIT_OK;
}

/* Prints the account's default idle period. */
static int print_default(struct cli *cli, json_t *j)
{
    char d[32];

    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, j);
        return CLI_EXIT_OK;
    }
    if (jint(j, "after_seconds") > 0)
        printf("idle stop by default: after %s idle\n",
               sl_duration_format(jint(j, "after_seconds"), d));
    else
        printf("idle stop by default: off\n");
    return CLI_EXIT_OK;
}

/* Parses "30m", "2h" or "off" (0) within what suanlid allows. */
static int parse_period(struct cli *cli, const char *what, const char *text, int64_t *out)
{
    struct sl_error err = SL_ERROR_INIT;

    if (strcmp(text, "off") == 0) {
        *out = 0;
        return 0;
    }
    if (sl_duration_parse(text, out, &err) < 0 || *out < 1) {
        cli_usage_error(cli, "%s takes a duration such as 30m, 2h or 1d (or off); got '%s'", what,
                        text);
        return -1;
    }
    return 0;
}

static int run_idle_stop(struct cli *cli, int argc, char **argv)
{
    enum {
        OPT_AFTER = 1,
        OPT_OFF,
        OPT_INHERIT,
        OPT_DEFAULT
    };
    static const struct option opts[] = {
        { "after", required_argument, NULL, OPT_AFTER },
        { "off", no_argument, NULL, OPT_OFF },
        { "inherit", no_argument, NULL, OPT_INHERIT },
        { "default", required_argument, NULL, OPT_DEFAULT },
        { 0 },
    };
    struct sl_error err = SL_ERROR_INIT;
    const char *after = NULL, *def = NULL;
    bool off = false, inherit = false;
    int c, status;

    while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
        if (c == OPT_AFTER)
            after = optarg;
        else if (c == OPT_OFF)
            off = true;
        else if (c == OPT_INHERIT)
            inherit = true;
        else if (c == OPT_DEFAULT)
            def = optarg;
        else
            return cli_usage_error(cli, "bad option");
    }
    int n = (after != NULL) + off + inherit + (def != NULL);
    if (n > 1)
        return cli_usage_error(cli, "give one of --after DURATION, --off, --inherit or --default "
                                    "DURATION");
    cleanup_json json_t *out = NULL;
    int64_t seconds = 0;
    if (def || n == 0) {
        /* the account's default: set it, or show it */
        if ((status = cli_positionals(cli, argc, argv, 0)))
            return status;
        if (def && parse_period(cli, "--default", def, &seconds) < 0)
            return CLI_EXIT_USAGE;
        if ((status = cli_need_token(cli)))
            return status;
        cleanup_json json_t *body =
            def ? json_pack("{s:I}", "after_seconds", (json_int_t)seconds) : NULL;
        if (client_request(&cli->client, def ? "POST" : "GET", "/v1/me/idle-stop", body, NULL, &out,
                           &err) < 0)
            return cli_fail(&err);
        return print_default(cli, out);
    }
    if ((status = cli_positionals(cli, argc, argv, 1)))
        return status;
    const char *id = argv[optind];
    if (after && parse_period(cli, "--after", after, &seconds) < 0)
        return CLI_EXIT_USAGE;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = inherit ? json_pack("{s:b}", "inherit", 1)
                                        : json_pack("{s:I}", "after_seconds", (json_int_t)seconds);
    cleanup_free char *e = client_escape(id);
    cleanup_free char *path = xasprintf("/v1/instances/%s/idle-stop", e);
    if (client_request(&cli->client, "POST", path, body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, out);
        return CLI_EXIT_OK;
    }
    char text[96];
    printf("%s: idle stop %s\n", id, cli_idle_stop_text(out, text, sizeof(text)));
    return CLI_EXIT_OK;
}

const struct cli_command cmd_idle_stop = {
    .name = "idle-stop",
    .aliases = { "instance idle-stop" },
    .usage = "[ID --after DURATION | ID --off | ID --inherit | --default DURATION|off]",
    .summary = "stop an instance after a period with no SSH session, no HTTP through its service "
               "ports and no GPU use (--default: for all your instances; no arguments: show it)",
    .run = run_idle_stop,
};
