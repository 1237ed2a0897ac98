/* notify ls|add|rm|test|confirm|on|off|log: where suanlid tells you what
 * happened to your money and instances (webhooks and email), which kinds
 * it tells, and what it sent. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

/* "/v1/notify/channels/ID/VERB" with ID escaped. A new string. */
static char *channel_path(const char *id, const char *verb)
{
    char *escaped = curl_easy_escape(NULL, id, 0);
    char *path = xasprintf("/v1/notify/channels/%s%s%s", escaped ? escaped : "", verb ? "/" : "",
                           verb ? verb : "");
    curl_free(escaped);
    return path;
}

static int run_notify_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *channels = sl_client_list(&cli->client, "/v1/notify/channels", 100, &err);
    if (!channels)
        return cli_fail(&err);
    cleanup_json json_t *kinds = NULL;
    if (sl_client_request(&cli->client, "GET", "/v1/notify/kinds", NULL, NULL, &kinds, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        cleanup_json json_t *out =
            json_pack("{s:O, s:O}", "channels", json_object_get(channels, "items"), "kinds",
                      json_object_get(kinds, "items"));
        output_json(stdout, out);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID", "KIND", "TARGET", "CONFIRMED", "ADDED" };
    struct table t;
    size_t i;
    json_t *c;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(channels, "items"), i, c)
    {
        char added[32];
        const char *row[] = { jstr(c, "id"), jstr(c, "kind"), jstr(c, "target"),
                              json_is_true(json_object_get(c, "confirmed")) ? "yes" : "no",
                              output_time(jstr(c, "created_at"), added) };
        table_add(&t, row);
    }
    if (json_array_size(json_object_get(channels, "items")) == 0)
        printf("no channels yet: add one with suanli notify add webhook URL (or email ADDRESS)\n");
    else
        table_print(&t, stdout);
    table_release(&t);
    printf("\n");
    static const char *const kind_headers[] = { "KIND", "SENT", "ABOUT" };
    table_init(&t, ARRAY_SIZE(kind_headers), kind_headers);
    json_array_foreach(json_object_get(kinds, "items"), i, c)
    {
        const char *row[] = { jstr(c, "kind"),
                              json_is_true(json_object_get(c, "enabled")) ? "on" : "off",
                              jstr(c, "title") };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_notify_add(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *kind = a->argv[0], *target = a->argv[1];
    int status;

    if (strcmp(kind, "webhook") != 0 && strcmp(kind, "email") != 0)
        return cli_usage_error(cli, "'%s' is not a channel: webhook URL or email ADDRESS", kind);
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s, s:s}", "kind", kind, "target", target);
    cleanup_json json_t *ch = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/notify/channels", body, NULL, &ch, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, ch);
        return CLI_EXIT_OK;
    }
    printf("added %s channel %s (%s)\n", kind, jstr(ch, "id"), target);
    if (json_object_get(ch, "secret"))
        printf("its signing secret, shown once (verify X-Suanli-Signature with it):\n%s\n",
               jstr(ch, "secret"));
    else
        printf("a code was mailed to %s: enter it with suanli notify confirm %s CODE\n", target,
               jstr(ch, "id"));
    return CLI_EXIT_OK;
}

static int run_notify_rm(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/notify/channels", "channel");
}

static int run_notify_test(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *path = channel_path(a->argv[0], "test");
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "POST", path, NULL, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, out);
    else
        printf("a test message to %s is queued: see suanli notify log\n", a->argv[0]);
    return CLI_EXIT_OK;
}

static int run_notify_confirm(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_free char *path = channel_path(a->argv[0], "confirm");
    cleanup_json json_t *body = json_pack("{s:s}", "code", a->argv[1]);
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, out);
    else
        printf("confirmed %s: notifications go there now\n", a->argv[0]);
    return CLI_EXIT_OK;
}

static int set_kind(struct cli *cli, const struct cli_args *a, bool enabled)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    char *escaped = curl_easy_escape(NULL, a->argv[0], 0);
    cleanup_free char *path = xasprintf("/v1/notify/kinds/%s", escaped ? escaped : "");
    curl_free(escaped);
    cleanup_json json_t *body = json_pack("{s:b}", "enabled", enabled);
    cleanup_json json_t *out = NULL;
    if (sl_client_request(&cli->client, "POST", path, body, NULL, &out, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, out);
    else
        printf("%s notifications are %s\n", a->argv[0], enabled ? "on" : "off");
    return CLI_EXIT_OK;
}

static int run_notify_on(struct cli *cli, const struct cli_args *a)
{
    return set_kind(cli, a, true);
}

static int run_notify_off(struct cli *cli, const struct cli_args *a)
{
    return set_kind(cli, a, false);
}

static int run_notify_log(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/notify/log", 200, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "TIME",  "CHANNEL",  "KIND",      "INSTANCE",
                                           "STATE", "ATTEMPTS", "LAST ERROR" };
    struct table t;
    size_t i;
    json_t *d;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, d)
    {
        char when[32], attempts[24];
        snprintf(attempts, sizeof(attempts), "%lld", (long long)jint(d, "attempts"));
        const char *instance = jstr(d, "instance_id");
        const char *row[] = { output_time(jstr(d, "updated_at"), when),
                              jstr(d, "channel_id"),
                              jstr(d, "kind"),
                              *instance ? instance : "-",
                              jstr(d, "state"),
                              attempts,
                              jstr(d, "last_error") };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_notify_ls = {
    .name = "notify ls",
    .aliases = { "notify list", "notify" },
    .summary = "list your notification channels and which kinds are sent",
    .run = run_notify_ls,
};

const struct cli_command cmd_notify_add = {
    .name = "notify add",
    .args = "webhook|email URL|ADDRESS",
    .summary = "add a webhook (its signing secret is shown once) or an email address (confirmed "
               "with a mailed code)",
    .run = run_notify_add,
};

const struct cli_command cmd_notify_rm = {
    .name = "notify rm",
    .aliases = { "notify remove" },
    .args = "ID",
    .summary = "remove a notification channel",
    .run = run_notify_rm,
};

const struct cli_command cmd_notify_test = {
    .name = "notify test",
    .args = "ID",
    .summary = "send a test message to a channel",
    .run = run_notify_test,
};

const struct cli_command cmd_notify_confirm = {
    .name = "notify confirm",
    .args = "ID CODE",
    .summary = "confirm an email channel with the code mailed to it",
    .run = run_notify_confirm,
};

const struct cli_command cmd_notify_on = {
    .name = "notify on",
    .args = "KIND",
    .summary = "send notifications of KIND again (see suanli notify ls)",
    .run = run_notify_on,
};

const struct cli_command cmd_notify_off = {
    .name = "notify off",
    .args = "KIND",
    .summary = "stop notifications of KIND, on every channel",
    .run = run_notify_off,
};

const struct cli_command cmd_notify_log = {
    .name = "notify log",
    .summary = "what was sent where: sent, retrying, failed, or digested (held back)",
    .run = run_notify_log,
};
