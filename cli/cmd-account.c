/* register, login, logout, whoami. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void print_user(struct cli *cli, json_t *user)
{
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, user);
        return;
    }
    char created[32];
    const struct output_pair pairs[] = {
        { "id", jstr(user, "id") },
        { "email", jstr(user, "email") },
        { "name", jstr(user, "name") },
        { "role", jstr(user, "role") },
        { "verification", jstr(user, "verification") },
        { "can start instances",
          json_is_true(json_object_get(user, "can_start_instances")) ? "yes" : "no" },
        { "created", output_time(jstr(user, "created_at"), created) },
        { "server", cli->server },
    };
    output_pairs(stdout, pairs, ARRAY_SIZE(pairs));
}

#define EMAIL_OPTION                                                                               \
    {                                                                                              \
        .name = "email", .arg = "EMAIL", .required = true, .help = "the account's email address"   \
    }
#define PASSWORD_STDIN_OPTION                                                                      \
    {                                                                                              \
        .name = "password-stdin",                                                                  \
        .help = "read the password from one line of stdin (else SUANLI_PASSWORD, else a prompt)"   \
    }

static const struct cli_option register_options[] = {
    EMAIL_OPTION,
    { .name = "name", .arg = "NAME", .help = "your name (default: none)" },
    PASSWORD_STDIN_OPTION,
    { 0 },
};

static const struct cli_option login_options[] = {
    EMAIL_OPTION,
    PASSWORD_STDIN_OPTION,
    { 0 },
};

static int run_register(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *email = cli_text(a, "email", NULL), *name = cli_text(a, "name", "");

    cleanup_free char *password = cli_read_password(cli_has(a, "password-stdin"), true, &err);
    if (!password) {
        cli_fail(&err);
        return CLI_EXIT_USAGE;
    }
    cleanup_json json_t *body =
        json_pack("{s:s, s:s, s:s}", "email", email, "password", password, "name", name);
    cleanup_json json_t *user = NULL;
    cli->client.token = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/users", body, NULL, &user, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, user);
    else
        printf("registered %s (%s) on %s: now run suanli login --email %s\n", jstr(user, "email"),
               jstr(user, "id"), cli->server, jstr(user, "email"));
    return CLI_EXIT_OK;
}

/* A best-effort step of login failed: said, and login goes on. A token the
 * server no longer knows is already what the step wanted. */
static void note_failed(const struct sl_error *err, const char *what)
{
    if (err->kind != SL_E_UNAUTHENTICATED)
        fprintf(stderr, "suanli: %s: %s (carrying on)\n", what, err->message);
}

/* Best effort: revoke the token a previous login stored for this server, so
 * logging in again does not pile up tokens. */
static void revoke_previous(struct cli *cli)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *out = NULL;

    if (!cli->config.token || !cli->config.server || strcmp(cli->config.server, cli->server))
        return;
    cli->client.token = cli->config.token;
    if (sl_client_request(&cli->client, "DELETE", "/v1/sessions/current", NULL, NULL, &out, &err) <
        0)
        note_failed(&err, "revoke the previous token");
}

static int run_login(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *email = cli_text(a, "email", NULL);
    char host[HOST_NAME_MAX + 1] = "unknown host";

    cleanup_free char *password = cli_read_password(cli_has(a, "password-stdin"), false, &err);
    if (!password) {
        cli_fail(&err);
        return CLI_EXIT_USAGE;
    }

    cleanup_json json_t *login_body = json_pack("{s:s, s:s}", "email", email, "password", password);
    cleanup_json json_t *session = NULL;
    cli->client.token = NULL;
    if (sl_client_request(&cli->client, "POST", "/v1/sessions", login_body, NULL, &session, &err) <
        0)
        return cli_fail(&err);
    cleanup_free char *session_token =
        xstrdup(jstr(session, "token") ? jstr(session, "token") : "");

    /* trade the short session for a long-lived API token, then end the session */
    gethostname(host, sizeof(host) - 1);
    cleanup_free char *token_name = xasprintf("cli on %s", host);
    cleanup_json json_t *token_body = json_pack("{s:s}", "name", token_name);
    cleanup_json json_t *token = NULL, *logout = NULL;
    struct sl_error logout_err = SL_ERROR_INIT;
    cli->client.token = session_token;
    int rc = sl_client_request(&cli->client, "POST", "/v1/tokens", token_body, NULL, &token, &err);
    if (sl_client_request(&cli->client, "DELETE", "/v1/sessions/current", NULL, NULL, &logout,
                          &logout_err) < 0 &&
        rc == 0)
        note_failed(&logout_err, "end the login session");
    if (rc < 0)
        return cli_fail(&err);
    const char *secret = jstr(token, "token");
    if (!secret)
        return fprintf(stderr, "suanli: the server sent no token\n"), CLI_EXIT_UNAVAILABLE;

    revoke_previous(cli);
    free(cli->config.server);
    free(cli->config.token);
    cli->config.server = xstrdup(cli->server);
    cli->config.token = xstrdup(secret);
    if (cli_config_save(&cli->config, cli->config_path, &err) < 0)
        return cli_fail(&err);

    json_t *user = json_object_get(session, "user");
    if (cli->output == OUTPUT_JSON) {
        cleanup_json json_t *out =
            json_pack("{s:O, s:s, s:s, s:s}", "user", user, "token_id", jstr(token, "id"), "server",
                      cli->server, "config", cli->config_path);
        output_json(stdout, out);
    } else {
        printf("logged in as %s on %s (token %s saved in %s)\n", jstr(user, "email"), cli->server,
               jstr(token, "id"), cli->config_path);
    }
    return CLI_EXIT_OK;
}

static int run_logout(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *out = NULL;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    int rc =
        sl_client_request(&cli->client, "DELETE", "/v1/sessions/current", NULL, NULL, &out, &err);
    if (rc < 0 && err.kind != SL_E_UNAUTHENTICATED)
        return cli_fail(&err);
    if (cli->config.token && strcmp(cli->config.token, cli->token) == 0) {
        struct sl_error save_err = SL_ERROR_INIT;
        free(cli->config.token);
        cli->config.token = NULL;
        if (cli_config_save(&cli->config, cli->config_path, &save_err) < 0)
            return cli_fail(&save_err);
    }
    if (cli->output == OUTPUT_JSON)
        output_json(stdout, NULL);
    else if (rc < 0)
        printf("logged out of %s (the server no longer knew the token)\n", cli->server);
    else
        printf("logged out of %s: the token is revoked\n", cli->server);
    return CLI_EXIT_OK;
}

static int run_whoami(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *user = NULL;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    if (sl_client_request(&cli->client, "GET", "/v1/me", NULL, NULL, &user, &err) < 0)
        return cli_fail(&err);
    print_user(cli, user);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_register = {
    .name = "register",
    .options = register_options,
    .summary = "create an account (password from stdin, SUANLI_PASSWORD or a prompt)",
    .run = run_register,
};

const struct cli_command cmd_login = {
    .name = "login",
    .options = login_options,
    .summary = "log in and save an API token in ~/.config/suanli/config",
    .run = run_login,
};

const struct cli_command cmd_logout = {
    .name = "logout",
    .summary = "revoke the saved token and forget it",
    .run = run_logout,
};

const struct cli_command cmd_whoami = {
    .name = "whoami",
    .aliases = { "me" },
    .summary = "show the account you are logged in as",
    .run = run_whoami,
};
