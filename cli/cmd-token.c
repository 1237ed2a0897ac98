/* token create|ls|rm: API tokens for the CLI and scripts. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <stdio.h>

static const struct cli_option token_create_options[] = {
    { .name = "expires-days",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 3650,
      .help = "the token stops working after N days (default: never)" },
    { 0 },
};

static int run_token_create(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t days = cli_number(a, "expires-days", 0);
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s}", "name", a->argv[0]);
    if (days)
        json_object_set_new(body, "expires_in_days", json_integer(days));
    cleanup_json json_t *token = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/tokens", body, NULL, &token, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, token);
        return CLI_EXIT_OK;
    }
    char expires[32];
    printf("created token %s (%s), expires %s\n%s\n", jstr(token, "id"), jstr(token, "name"),
           jstr(token, "expires_at") ? output_time(jstr(token, "expires_at"), expires) : "never",
           jstr(token, "token"));
    fputs("copy it now: it is not shown again\n", stderr);
    return CLI_EXIT_OK;
}

static int run_token_ls(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = sl_client_list(&cli->client, "/v1/tokens", 100, &err);
    if (!list)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, list);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "ID",      "NAME",    "KIND",      "HINT",
                                           "CREATED", "EXPIRES", "LAST USED", "" };
    struct table t;
    size_t i;
    json_t *tok;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(list, "items"), i, tok)
    {
        char created[32], expires[32], used[32];
        const char *row[] = {
            jstr(tok, "id"),
            jstr(tok, "name"),
            jstr(tok, "kind"),
            jstr(tok, "hint"),
            output_time(jstr(tok, "created_at"), created),
            jstr(tok, "expires_at") ? output_time(jstr(tok, "expires_at"), expires) : "never",
            jstr(tok, "last_used_at") ? output_time(jstr(tok, "last_used_at"), used) : "never",
            json_is_true(json_object_get(tok, "current")) ? "(this one)" : "",
        };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    return CLI_EXIT_OK;
}

static int run_token_rm(struct cli *cli, const struct cli_args *a)
{
    return cli_remove_one(cli, a, "/v1/tokens", "token");
}

const struct cli_command cmd_token_create = {
    .name = "token create",
    .args = "NAME",
    .options = token_create_options,
    .summary = "make an API token for scripts (the secret is shown once)",
    .run = run_token_create,
};

const struct cli_command cmd_token_ls = {
    .name = "token ls",
    .aliases = { "token list", "tokens" },
    .summary = "list your tokens and sessions",
    .run = run_token_ls,
};

const struct cli_command cmd_token_rm = {
    .name = "token rm",
    .aliases = { "token remove", "token revoke" },
    .args = "ID",
    .summary = "revoke a token",
    .run = run_token_rm,
};
