/* plan: move an instance to a prepaid plan (a day, a week, a month of its
 * GPUs, paid up front at a discount) or back to pay-as-you-go, which refunds
 * the price less the time used at the pay-as-you-go rate
 * (docs/design/billing.md). */
#include "cli.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* "/v1/bills/charges?instance=ID&kind=plan_refund" */
static char *refunds_path(const char *id)
{
    cleanup_free char *e = sl_client_escape(id);

    return xasprintf("/v1/bills/charges?instance=%s&kind=plan_refund", e);
}

/* The plan refunds of the instance this month: the highest seq, and the
 * sum of those above after. */
static int refunds(struct cli *cli, const char *id, int64_t after, int64_t *last, int64_t *sum,
                   struct sl_error *err)
{
    cleanup_free char *path = refunds_path(id);
    cleanup_json json_t *list = sl_client_list(&cli->client, path, 500, err);
    json_t *c;
    size_t i;

    if (!list)
        return -1;
    *last = after;
    *sum = 0;
    json_array_foreach(json_object_get(list, "items"), i, c)
    {
        if (jint(c, "seq") <= after)
            continue;
        *sum -= jint(c, "amount_micros"); /* refunds are negative charges */
        if (jint(c, "seq") > *last)
            *last = jint(c, "seq");
    }
    return 0;
}

static bool prepaid(json_t *inst)
{
    const char *plan = jstr(inst, "plan");

    return plan && strcmp(plan, "payg") != 0;
}

/* One line that says where the instance stands now. */
static void print_outcome(json_t *before, json_t *after, int64_t refunded, const char *currency)
{
    const char *id = jstr(after, "id"), *plan = jstr(after, "plan");
    char price[OUTPUT_MONEY_MAX], back[OUTPUT_MONEY_MAX], until[32];
    bool renews = json_is_true(json_object_get(after, "auto_renew"));
    bool bought = prepaid(after) && (!prepaid(before) || strcmp(jstr(before, "plan"), plan) != 0 ||
                                     !json_equal(json_object_get(before, "plan_expires_at"),
                                                 json_object_get(after, "plan_expires_at")));

    if (!prepaid(after))
        printf(prepaid(before) ? "%s: pay-as-you-go from now" : "%s: already pay-as-you-go", id);
    else if (bought)
        printf("%s: %s plan, %s paid up front, until %s UTC", id, plan,
               output_money(jint(after, "plan_price_micros"), currency, price),
               output_time(jstr(after, "plan_expires_at"), until));
    else
        printf("%s: %s plan until %s UTC", id, plan,
               output_time(jstr(after, "plan_expires_at"), until));
    if (prepaid(after))
        printf("; %s", renews ? "renews automatically while the balance allows"
                              : "then the instance stops (--auto-renew renews it)");
    bool left = prepaid(before) && strcmp(jstr(before, "plan"), plan) != 0;
    if (refunded > 0)
        printf("; %s refunded: the %s plan's price less the time used at the pay-as-you-go rate",
               output_money(refunded, currency, back), jstr(before, "plan"));
    else if (left)
        printf("; nothing refunded: the time used at the pay-as-you-go rate costs at least the "
               "%s plan's price",
               jstr(before, "plan"));
    putchar('\n');
}

static const struct cli_option plan_options[] = {
    { .name = "auto-renew",
      .group = 1,
      .help = "renew the plan at its end while the balance allows" },
    { .name = "no-auto-renew", .group = 1, .help = "let the plan end: the instance stops then" },
    { 0 },
};

static int run_plan(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *plan = a->argv[1];
    int renew = cli_has(a, "auto-renew") ? 1 : cli_has(a, "no-auto-renew") ? 0 : -1;
    int status;

    if (!cli_is_plan(plan))
        return cli_usage_error(cli,
                               "the plan is day, week, month or payg (pay-as-you-go), not "
                               "'%s'",
                               plan);
    if (renew >= 0 && strcmp(plan, "payg") == 0)
        return cli_usage_error(cli, "pay-as-you-go does not renew: --auto-renew and "
                                    "--no-auto-renew go with day, week or month");
    if ((status = cli_need_token(cli)))
        return status;
    cleanup_json json_t *before = cli_instance_find(cli, a->argv[0], &err), *after = NULL,
                        *balance = NULL;
    int64_t last = 0, refunded = 0;
    if (!before)
        return cli_fail(&err);
    const char *id = jstr(before, "id");
    cleanup_free char *plan_path = cli_instance_path(id, "plan");
    /* leaving a plan refunds its unused part: find the refund by what is new */
    bool leaving = prepaid(before) && strcmp(jstr(before, "plan"), plan) != 0;
    if (leaving && refunds(cli, id, 0, &last, &refunded, &err) < 0)
        return cli_fail(&err);
    cleanup_json json_t *body = json_pack("{s:s}", "plan", plan);
    if (renew >= 0)
        json_object_set_new(body, "auto_renew", json_boolean(renew));
    /* it spends money: a retry of this very request never buys twice */
    char key[33];
    sl_random_hex(key, 16);
    if (sl_client_request(&cli->client, "POST", plan_path, body, key, &after, &err) < 0)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, after);
        return CLI_EXIT_OK;
    }
    if (leaving && refunds(cli, id, last, &last, &refunded, &err) < 0)
        return cli_fail(&err);
    /* the currency for the amounts; without it they print bare */
    if (sl_client_request(&cli->client, "GET", "/v1/balance", NULL, NULL, &balance, &err) < 0)
        sl_error_clear(&err);
    print_outcome(before, after, refunded, jstr(balance, "currency"));
    return CLI_EXIT_OK;
}

const struct cli_command cmd_plan = {
    .name = "plan",
    .aliases = { "instance plan" },
    .args = "ID|NAME day|week|month|payg",
    .options = plan_options,
    .summary = "prepay an instance's GPUs for a day, week or month (at a discount, GPUs kept "
               "while stopped), or go back to pay-as-you-go (refunds the price less the time used "
               "at the pay-as-you-go rate)",
    .run = run_plan,
};
