/* verify: real-name verification, submitted and checked. */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"

#include <stdio.h>

static void print_verification(struct cli *cli, json_t *v)
{
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, v);
        return;
    }
    char submitted[32], decided[32];
    const char *reason = jstr(v, "reason");
    const struct output_pair pairs[] = {
        { "state", jstr(v, "state") },
        { "real name", jstr(v, "real_name") },
        { "id number", jstr(v, "id_number_masked") },
        { "submitted", output_time(jstr(v, "created_at"), submitted) },
        { "decided", output_time(jstr(v, "decided_at"), decided) },
        { "reason", reason && *reason ? reason : NULL },
    };
    output_pairs(stdout, pairs, ARRAY_SIZE(pairs));
}

static const struct cli_option verify_options[] = {
    { .name = "name", .arg = "REAL_NAME", .help = "your name as on your identity card" },
    { .name = "id-number", .arg = "NUMBER", .help = "your identity card's number" },
    { .name = "status", .help = "show where your verification stands instead" },
    { 0 },
};

static int run_verify(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *name = cli_text(a, "name", NULL), *number = cli_text(a, "id-number", NULL);
    bool status_only = cli_has(a, "status");
    int status;

    if (status_only && (name || number))
        return cli_usage_error(cli, "--status takes neither --name nor --id-number");
    if (!status_only && (!name || !number))
        return cli_usage_error(cli, "give --name and --id-number, or --status");
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *v = NULL;
    if (status_only) {
        if (sl_client_request(&cli->client, "GET", "/v1/me/verification", NULL, NULL, &v, &err) < 0)
            return cli_fail(&err);
    } else {
        cleanup_json json_t *body = json_pack("{s:s, s:s}", "real_name", name, "id_number", number);
        if (sl_client_request(&cli->client, "POST", "/v1/me/verification", body, NULL, &v, &err) <
            0)
            return cli_fail(&err);
        if (cli->output != OUTPUT_JSON)
            puts("verification submitted: an operator reviews it (see suanli verify --status)");
    }
    print_verification(cli, v);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_verify = {
    .name = "verify",
    .options = verify_options,
    .summary = "submit real-name verification, or show its state",
    .run = run_verify,
};
