/* token create|ls|rm: API tokens for the CLI and scripts. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <stdio.h>

static int run_token_create(struct cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {
        { "expires-days", required_argument, NULL, 'e' },
        { 0 },
    };
    struct sl_error err = SL_ERROR_INIT;
    int64_t days = 0;
    int c, status;

    while ((c = cli_getopt(cli, argc, argv, opts)) != -1) {
        if (c != 'e')
            return cli_usage_error(cli, "bad option");
        if (cli_parse_int(cli, "--expires-days", optarg, 1, 3650, &days) < 0)
            return CLI_EXIT_USAGE;
    }
    if ((status = cli_positionals(cli, argc, argv, 1)) || (status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *body = json_pack("{s:s}", "name", argv[optind]);
    if (days)
        json_object_set_new(body, "expires_in_days", json_integer(days));
    cleanup_json json_t *token = NULL;
    if (client_request(&cli->client, "POST", "/v1/tokens", body, NULL, &token, &err) < 0)
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

static int run_token_ls(struct cli *cli, int argc, char **argv)
{
    struct sl_error err = SL_ERROR_INIT;
    int status;

    if ((status = cli_no_args(cli, argc, argv)) || (status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *list = client_list(&cli->client, "/v1/tokens", 100, &err);
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

static int run_token_rm(struct cli *cli, int argc, char **argv)
{
    return cli_remove_one(cli, argc, argv, "/v1/tokens", "token");
}

const struct cli_command cmd_token_create = {
    .name = "token create",
    .usage = "NAME [--expires-days N]",
    .summary = "make an API token for scripts (the secret is shown once)",
    .run = run_token_create,
};

const struct cli_command cmd_token_ls = {
    .name = "token ls",
    .aliases = { "token list", "tokens" },
    .usage = "",
    .summary = "list your tokens and sessions",
    .run = run_token_ls,
};

const struct cli_command cmd_token_rm = {
    .name = "token rm",
    .aliases = { "token remove", "token revoke" },
    .usage = "ID",
    .summary = "revoke a token",
    .run = run_token_rm,
};
