/* balance and ledger. */
#include "cli.h"

#include "../lib/timefmt.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <stdio.h>

static int run_balance(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *b = NULL;
    int status;

    (void)a;
    if ((status = cli_need_token(cli)))
        return status;
    if (sl_client_request(&cli->client, "GET", "/v1/balance", NULL, NULL, &b, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, b);
        return CLI_EXIT_OK;
    }
    const char *currency = jstr(b, "currency");
    json_t *covers = json_object_get(b, "covers_seconds");
    int64_t per_hour = jint(b, "spend_per_hour_micros");
    char balance[OUTPUT_MONEY_MAX], rate[OUTPUT_MONEY_MAX], spend[64], lasts[96], d[32];
    struct output_pair pairs[4];
    size_t n = 0;

    pairs[n++] = (struct output_pair){ "balance",
                                       output_money(jint(b, "balance_micros"), currency, balance) };
    pairs[n++] = (struct output_pair){ "currency", currency };
    output_money(per_hour, currency, rate);
    if (per_hour > 0)
        snprintf(spend, sizeof(spend), "%s/h", rate);
    else
        snprintf(spend, sizeof(spend), "nothing: no instance is running or billed");
    pairs[n++] = (struct output_pair){ "spending", spend };
    /* covers_seconds is null while nothing is spending */
    if (per_hour > 0 && json_is_integer(covers)) {
        if (json_integer_value(covers) > 0)
            snprintf(lasts, sizeof(lasts), "about %s at %s/h",
                     sl_duration_format(json_integer_value(covers), d), rate);
        else
            snprintf(lasts, sizeof(lasts),
                     "not at all: top up, or running instances are stopped (reason balance)");
        pairs[n++] = (struct output_pair){ "lasts", lasts };
    }
    output_pairs(stdout, pairs, n);
    return CLI_EXIT_OK;
}

static const struct cli_option ledger_options[] = {
    { .name = "limit",
      .arg = "N",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 500,
      .help = "show the N newest entries (default 20)" },
    { .name = "all", .help = "show every entry" },
    { 0 },
};

static int run_ledger(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t limit = cli_number(a, "limit", 20);
    bool all = cli_has(a, "all");
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *page = NULL;
    if (all) {
        page = sl_client_list(&cli->client, "/v1/ledger", 500, &err);
    } else {
        cleanup_free char *path = xasprintf("/v1/ledger?limit=%lld", (long long)limit);
        if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &page, &err) < 0)
            page = NULL;
    }
    if (!page)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, page);
        return CLI_EXIT_OK;
    }
    static const char *const headers[] = { "TIME", "KIND", "AMOUNT", "BALANCE", "MEMO" };
    struct table t;
    size_t i;
    json_t *e;
    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(json_object_get(page, "items"), i, e)
    {
        char when[32], amount[OUTPUT_MONEY_MAX], after[OUTPUT_MONEY_MAX];
        const char *row[] = {
            output_time(jstr(e, "created_at"), when),
            jstr(e, "kind"),
            output_money_signed(jint(e, "amount_micros"), NULL, amount),
            output_money(jint(e, "balance_after_micros"), NULL, after),
            jstr(e, "memo"),
        };
        table_add(&t, row);
    }
    table_print(&t, stdout);
    table_release(&t);
    if (!all && json_is_string(json_object_get(page, "next_cursor")))
        fputs("(older entries not shown: suanli ledger --all)\n", stderr);
    return CLI_EXIT_OK;
}

const struct cli_command cmd_balance = {
    .name = "balance",
    .summary = "show your balance, what you spend per hour and how long the balance lasts",
    .run = run_balance,
};

const struct cli_command cmd_ledger = {
    .name = "ledger",
    .options = ledger_options,
    .summary = "list the money entries of your account, newest first",
    .run = run_ledger,
};
