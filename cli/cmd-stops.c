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

int cli_stop_schedule(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *at = cli_text(a, "at", NULL), *in = cli_text(a, "in", NULL);
    bool cancel = cli_has(a, "cancel");
    int status;

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
    cleanup_json json_t *found = cli_instance_find(cli, a->argv[0], &err);
    if (!found)
        return cli_fail(&err);
    const char *id = jstr(found, "id");
    cleanup_free char *path = cli_instance_path(id, "stop");
    cleanup_json json_t *inst = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &inst, &err) < 0)
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

static const struct cli_option idle_stop_options[] = {
    { .name = "after",
      .arg = "DURATION",
      .group = 1,
      .help = "stop the instance after this long idle: 10s to 30d, such as 30m or 2h" },
    { .name = "off",
      .group = 1,
      .help = "never stop the instance for idling, whatever the default" },
    { .name = "inherit", .group = 1, .help = "follow the account's default again" },
    { .name = "default",
      .arg = "DURATION|off",
      .group = 1,
      .help = "set the default of all your instances without their own setting" },
    { 0 },
};

static int run_idle_stop(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *after = cli_text(a, "after", NULL), *def = cli_text(a, "default", NULL);
    bool off = cli_has(a, "off"), inherit = cli_has(a, "inherit");
    int n = (after != NULL) + off + inherit + (def != NULL);
    int status;

    cleanup_json json_t *out = NULL;
    int64_t seconds = 0;
    if (def || n == 0) {
        /* the account's default: set it, or show it */
        if (a->argc > 0)
            return cli_usage_error(
                cli, "%s",
                def ? "--default is for all your instances: leave out the instance"
                    : "give what to do with the instance: --after DURATION, --off or --inherit");
        if (def && parse_period(cli, "--default", def, &seconds) < 0)
            return CLI_EXIT_USAGE;
        if ((status = cli_need_token(cli)))
            return status;
        cleanup_json json_t *body =
            def ? json_pack("{s:I}", "after_seconds", (json_int_t)seconds) : NULL;
        if (sl_client_request(&cli->client, def ? "POST" : "GET", "/v1/me/idle-stop", body, NULL,
                              &out, &err) < 0)
            return cli_fail(&err);
        return print_default(cli, out);
    }
    if (a->argc == 0)
        return cli_usage_error(cli, "missing argument ID|NAME: the instance to stop when idle");
    if (after && parse_period(cli, "--after", after, &seconds) < 0)
        return CLI_EXIT_USAGE;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *found = cli_instance_find(cli, a->argv[0], &err);
    if (!found)
        return cli_fail(&err);
    const char *id = jstr(found, "id");
    cleanup_json json_t *body = inherit ? json_pack("{s:b}", "inherit", 1)
                                        : json_pack("{s:I}", "after_seconds", (json_int_t)seconds);
    cleanup_free char *path = cli_instance_path(id, "idle-stop");
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &out, &err) < 0)
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
    .args = "[ID|NAME]",
    .options = idle_stop_options,
    .summary = "stop an instance after a period with no SSH session, no HTTP through its service "
               "ports and no GPU use (--default: for all your instances; no arguments: show it)",
    .run = run_idle_stop,
};
