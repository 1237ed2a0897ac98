/* Prepaid plans: a day, a week or a month of an instance's GPUs, paid up
 * front at a discount (billing.plan_*_percent of the hourly price), its GPUs
 * kept while it is stopped. Leaving a plan early refunds what is left of the
 * price after charging the time used at the pay-as-you-go rate of the day
 * it was bought: the discount is for the whole period, never for part of
 * it (docs/design/billing.md). */
#include "billing.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "catalog.h"
#include "instances.h"
#include "ledger.h"
#include "nodes.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int64_t seconds;
} plans[] = {
    { "day", SL_SEC_PER_DAY },
    { "week", 7 * SL_SEC_PER_DAY },
    { "month", 30 * SL_SEC_PER_DAY },
};

int billing_plan_period(const char *plan, int64_t *seconds, struct sl_error *err)
{
    if (strcmp(plan, "payg") == 0) {
        *seconds = 0;
        return 0;
    }
    for (size_t i = 0; i < ARRAY_SIZE(plans); i++)
        if (strcmp(plan, plans[i].name) == 0) {
            *seconds = plans[i].seconds;
            return (int)i + 1;
        }
    return sl_fail(err, SL_E_INVALID, "invalid_field",
                   "plan must be payg, day, week or month (not '%s')", plan);
}

int billing_plan_active(struct store *st, const char *instance_id, bool *active,
                        struct sl_error *err)
{
    int64_t n;

    if (store_get_int(st, "SELECT COUNT(*) FROM instances WHERE id = ?1 AND plan != 'payg'",
                      DB_ARGS(DB_TEXT(instance_id)), &n, err) < 0)
        return -1;
    *active = n > 0;
    return 0;
}

struct plan_row {
    char user_id[SL_ID_MAX], state[16], plan[16], model_id[SL_ID_MAX], region[64];
    int64_t gpus, started, expires, price, auto_renew, seq;
    int64_t hourly; /* the pay-as-you-go rate when bought; 0 before it was kept */
};

static int plan_load(struct store *st, const char *id, struct plan_row *p, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT user_id, state, plan, gpu_model_id, region_id, gpus,"
        " COALESCE(plan_started_at, 0), COALESCE(plan_expires_at, 0), plan_price_micros,"
        " plan_auto_renew, plan_seq, plan_hourly_micros FROM instances WHERE id = ?1",
        DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
    snprintf(p->user_id, sizeof(p->user_id), "%s", db_text(rows, 0));
    snprintf(p->state, sizeof(p->state), "%s", db_text(rows, 1));
    snprintf(p->plan, sizeof(p->plan), "%s", db_text(rows, 2));
    snprintf(p->model_id, sizeof(p->model_id), "%s", db_text(rows, 3));
    snprintf(p->region, sizeof(p->region), "%s", db_text(rows, 4));
    p->gpus = db_int(rows, 5);
    p->started = db_int(rows, 6);
    p->expires = db_int(rows, 7);
    p->price = db_int(rows, 8);
    p->auto_renew = db_int(rows, 9);
    p->seq = db_int(rows, 10);
    p->hourly = db_int(rows, 11);
    return 0;
}

/* The instance's GPU-mode pay-as-you-go rate now. */
static int payg_rate(struct server *srv, const struct plan_row *p, int64_t *rate,
                     struct sl_error *err)
{
    int64_t hourly;

    if (catalog_hourly_price(srv->store, p->model_id, p->region, &hourly, err) < 0)
        return -1;
    return sl_money_mul(hourly, p->gpus, rate, err);
}

/* The up-front price of plan; rate (may be NULL) gets the pay-as-you-go
 * rate it is a discount of. */
static int price_of(struct server *srv, const struct plan_row *p, const char *plan, int64_t *price,
                    int64_t *rate_out, struct sl_error *err)
{
    int64_t period, rate, total;
    int which = billing_plan_period(plan, &period, err);

    if (which < 0)
        return -1;
    if (which == 0)
        return sl_fail(err, SL_E_INTERNAL, NULL, "BUG: pay-as-you-go has no price");
    if (payg_rate(srv, p, &rate, err) < 0 || sl_money_charged(rate, period, &total, err) < 0)
        return -1;
    if (rate_out)
        *rate_out = rate;
    /* percent of the full price, rounded down: the discount never costs */
    return sl_money_percent(total, srv->cfg.plan_percent[which - 1], price, err);
}

static int charge_row(struct store *st, const char *txn_id, const struct plan_row *p,
                      const char *id, const char *item, int64_t from, int64_t to, int64_t amount,
                      struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO charges (txn_id, user_id, instance_id, item, period_from,"
                      " period_to, amount_micros, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                      " ?7, ?8)",
                      DB_ARGS(DB_TEXT(txn_id), DB_TEXT(p->user_id), DB_TEXT(id), DB_TEXT(item),
                              DB_INT(from), DB_INT(to), DB_INT(amount), DB_INT(sl_time_now())),
                      err) < 0
               ? -1
               : 0;
}

/* Charges plan for [start, start + period) and records it on the instance. */
static int buy(struct server *srv, const char *id, struct plan_row *p, const char *plan,
               int64_t start, int64_t auto_renew, struct sl_error *err)
{
    struct store *st = srv->store;
    char account[LEDGER_ACCOUNT_MAX], key[96], txn_id[SL_ID_MAX], memo[96];
    char need[SL_MONEY_FORMAT_MAX], have[SL_MONEY_FORMAT_MAX], missing[SL_MONEY_FORMAT_MAX];
    int64_t period, price, rate = 0, balance;
    bool existed;

    if (billing_plan_period(plan, &period, err) < 0 ||
        price_of(srv, p, plan, &price, &rate, err) < 0 ||
        ledger_balance(st, ledger_user_account(account, p->user_id), &balance, err) < 0)
        return -1;
    if (balance < price) {
        int64_t short_by;
        if (sl_money_sub(price, balance, &short_by, err) < 0)
            return -1;
        return sl_fail(err, SL_E_CONFLICT, "insufficient_balance",
                       "a %s plan costs %s up front; the balance is %s: top up at least %s or "
                       "stay pay-as-you-go",
                       plan, sl_money_format(price, need), sl_money_format(balance, have),
                       sl_money_format(short_by, missing));
    }
    snprintf(key, sizeof(key), "plan:%s:%" PRId64, id, p->seq + 1);
    snprintf(memo, sizeof(memo), "%s plan %s", plan, id);
    if (ledger_open_account(st, BILLING_REVENUE_ACCOUNT, NULL, err) < 0)
        return -1;
    if (price > 0) {
        struct ledger_txn txn = {
            .kind = "charge",
            .memo = memo,
            .idempotency_key = key,
            .entries = { { account, -price }, { BILLING_REVENUE_ACCOUNT, price } },
            .n_entries = 2,
        };
        if (ledger_post(st, &txn, txn_id, &existed, err) < 0 ||
            charge_row(st, txn_id, p, id, "plan", start, start + period, price, err) < 0)
            return -1;
    }
    if (store_exec(st,
                   "UPDATE instances SET plan = ?2, plan_started_at = ?3, plan_expires_at = ?4,"
                   " plan_price_micros = ?5, plan_auto_renew = ?6, plan_seq = plan_seq + 1,"
                   " plan_hourly_micros = ?7, stopped_at = NULL, release_warnings = 0"
                   " WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(plan), DB_INT(start), DB_INT(start + period),
                           DB_INT(price), DB_INT(auto_renew), DB_INT(rate)),
                   err) < 0)
        return -1;
    char until[SL_TIME_FORMAT_MAX], cost[SL_MONEY_FORMAT_MAX];
    cleanup_free char *message =
        xasprintf("%s plan: %s charged for %s until %s%s", plan, sl_money_format(price, cost),
                  p->gpus == 1 ? "its GPU" : "its GPUs", sl_time_format(start + period, until),
                  auto_renew ? ", renewed automatically while the balance allows" : "");
    p->seq++;
    p->hourly = rate;
    return instance_event(st, id, start < sl_time_now() ? "plan_renewed" : "plan", p->state, "user",
                          message, err);
}

/* What leaving the plan now gives back: the price less the time used
 * (outages excluded: they lengthen the plan) at the pay-as-you-go rate of the
 * day it was bought, never below 0 nor above the price. A plan past its end
 * that the billing loop has not ended yet gives nothing back. */
static int refund_of(struct server *srv, const struct plan_row *p, int64_t now, int64_t *used,
                     int64_t *rate, int64_t *refund, struct sl_error *err)
{
    int64_t period, consumed;

    *refund = 0;
    *used = 0;
    *rate = p->hourly;
    if (billing_plan_period(p->plan, &period, err) < 0)
        return -1;
    int64_t remaining = p->expires - now;
    if (remaining > period)
        remaining = period;
    if (remaining <= 0)
        return 0;
    *used = period - remaining;
    /* a plan bought before the rate was kept: today's rate stands in */
    if (*rate == 0 && p->price > 0 && payg_rate(srv, p, rate, err) < 0)
        return -1;
    if (sl_money_charged(*rate, *used, &consumed, err) < 0)
        return -1;
    return sl_money_unused(p->price, consumed, refund, err);
}

int billing_plan_end(struct server *srv, const char *id, const char *reason, struct sl_error *err)
{
    struct store *st = srv->store;
    struct plan_row p;
    int64_t now = sl_time_now(), refund, used, rate, kept_amount;
    char account[LEDGER_ACCOUNT_MAX], key[96], txn_id[SL_ID_MAX], memo[96];
    bool existed;

    if (plan_load(st, id, &p, err) < 0)
        return -1;
    if (strcmp(p.plan, "payg") == 0)
        return 0;
    if (refund_of(srv, &p, now, &used, &rate, &refund, err) < 0 ||
        sl_money_sub(p.price, refund, &kept_amount, err) < 0)
        return -1;
    if (refund > 0) {
        snprintf(key, sizeof(key), "plan_refund:%s:%" PRId64, id, p.seq);
        snprintf(memo, sizeof(memo), "unused %s plan %s", p.plan, id);
        struct ledger_txn txn = {
            .kind = "refund",
            .memo = memo,
            .idempotency_key = key,
            .entries = { { ledger_user_account(account, p.user_id), refund },
                         { BILLING_REVENUE_ACCOUNT, -refund } },
            .n_entries = 2,
        };
        if (ledger_post(st, &txn, txn_id, &existed, err) < 0 ||
            charge_row(st, txn_id, &p, id, "plan_refund", now, p.expires, -refund, err) < 0)
            return -1;
    }
    if (store_exec(st,
                   "UPDATE instances SET plan = 'payg', plan_expires_at = NULL,"
                   " plan_auto_renew = 0 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id)), err) < 0)
        return -1;
    char paid[SL_MONEY_FORMAT_MAX], back[SL_MONEY_FORMAT_MAX], hourly[SL_MONEY_FORMAT_MAX],
        kept[SL_MONEY_FORMAT_MAX], took[SL_DURATION_FORMAT_MAX];
    cleanup_free char *message = NULL;
    if (refund > 0)
        message = xasprintf("%s plan ended after %s: %s for that time at the pay-as-you-go rate "
                            "(%s/h), %s of the %s paid refunded; pay-as-you-go from now",
                            p.plan, sl_duration_format(used, took),
                            sl_money_format(kept_amount, kept), sl_money_format(rate, hourly),
                            sl_money_format(refund, back), sl_money_format(p.price, paid));
    else if (used > 0)
        message = xasprintf("%s plan ended after %s: that time at the pay-as-you-go rate (%s/h) "
                            "costs at least the %s paid, so nothing is refunded; pay-as-you-go "
                            "from now",
                            p.plan, sl_duration_format(used, took), sl_money_format(rate, hourly),
                            sl_money_format(p.price, paid));
    else
        message = xasprintf("%s plan ended; pay-as-you-go from now", p.plan);
    return instance_event(st, id, "plan_ended", p.state, reason, message, err);
}

/* After a plan ends: a running instance is metered again, a stopped one
 * gives its GPUs back and its stop clock starts. */
static int back_to_payg(struct server *srv, const char *id, const struct plan_row *p,
                        struct sl_error *err)
{
    if (strcmp(p->state, "running") == 0)
        return billing_open_compute(srv, id, err);
    if (strcmp(p->state, "stopped") == 0)
        return store_exec(srv->store,
                          "UPDATE instances SET stopped_at = ?2, release_warnings = 0"
                          " WHERE id = ?1",
                          DB_ARGS(DB_TEXT(id), DB_INT(sl_time_now())), err) < 0 ||
                       instance_free_gpus(srv->store, id, err) < 0
                   ? -1
                   : 0;
    return 0;
}

int billing_plan_set(struct server *srv, const char *id, const char *plan, int auto_renew,
                     struct sl_error *err)
{
    struct store *st = srv->store;
    struct plan_row p;
    int64_t period;

    if (billing_plan_period(plan, &period, err) < 0 || plan_load(st, id, &p, err) < 0)
        return -1;
    if (strcmp(p.state, "released") == 0 || strcmp(p.state, "releasing") == 0)
        return sl_fail(err, SL_E_CONFLICT, "invalid_state",
                       "instance '%s' is %s: it has no plan to change", id, p.state);
    if (strcmp(plan, p.plan) == 0) {
        if (period == 0 || auto_renew < 0 || auto_renew == p.auto_renew)
            return 0;
        if (store_exec(st, "UPDATE instances SET plan_auto_renew = ?2 WHERE id = ?1",
                       DB_ARGS(DB_TEXT(id), DB_INT(auto_renew)), err) < 0)
            return -1;
        return instance_event(st, id, "plan", p.state, "user",
                              auto_renew ? "the plan renews automatically while the balance "
                                           "allows"
                                         : "the plan will not renew: the instance stops when "
                                           "it ends",
                              err);
    }
    if (period == 0)
        return billing_plan_end(srv, id, "user", err) < 0 ? -1 : back_to_payg(srv, id, &p, err);
    /* to a plan: end what is metered or prepaid now, keep the GPUs, buy */
    if (strcmp(p.plan, "payg") != 0) {
        if (billing_plan_end(srv, id, "user", err) < 0 || plan_load(st, id, &p, err) < 0)
            return -1;
    } else if (billing_close(srv, id, false, err) < 0) {
        return -1;
    }
    if (instance_hold_gpus(st, id, err) < 0)
        return -1;
    return buy(srv, id, &p, plan, sl_time_now(), auto_renew > 0, err);
}

/* At its end a plan renews when asked and paid for, else the instance
 * stops (reason plan_expired) and is pay-as-you-go again. */
static int plan_expire_one(struct server *srv, const char *id, int64_t unused,
                           struct billing_stats *stats, struct sl_error *err)
{
    struct store *st = srv->store;
    struct plan_row p;
    int64_t now = sl_time_now();

    (void)unused;
    bool draining;
    if (plan_load(st, id, &p, err) < 0 || nodes_instance_host_draining(st, id, &draining, err) < 0)
        return -1;
    /* a drained host is being emptied: a plan there runs out (nodes.h) */
    if (draining && strcmp(p.plan, "payg") != 0 && p.expires <= now && p.auto_renew &&
        instance_event(st, id, "plan_not_renewed", p.state, "host_drain",
                       "the host is being drained for maintenance: the plan is not renewed there",
                       err) < 0)
        return -1;
    while (strcmp(p.plan, "payg") != 0 && p.expires <= now && p.auto_renew && !draining) {
        struct sl_error why = SL_ERROR_INIT;
        char plan[16];
        snprintf(plan, sizeof(plan), "%s", p.plan);
        if (store_begin(st, err) < 0)
            return -1;
        if (buy(srv, id, &p, plan, p.expires, 1, &why) < 0) {
            store_rollback(st);
            if (why.kind != SL_E_CONFLICT) {
                *err = why;
                return -1;
            }
            if (instance_event(st, id, "plan_not_renewed", p.state, "balance", why.message, err) <
                0)
                return -1;
            break;
        }
        if (store_commit(st, err) < 0 || plan_load(st, id, &p, err) < 0)
            return -1;
        stats->renewed++;
    }
    if (strcmp(p.plan, "payg") != 0 && p.expires <= now) {
        /* the stop counts from the plan's end: nothing is billed in between */
        if (store_exec(st,
                       "UPDATE instances SET plan = 'payg', plan_expires_at = NULL,"
                       " plan_auto_renew = 0 WHERE id = ?1",
                       DB_ARGS(DB_TEXT(id)), err) < 0 ||
            instance_event(st, id, "plan_ended", p.state, "plan_expired",
                           "the plan ended; pay-as-you-go from now", err) < 0)
            return -1;
        stats->expired++;
        if (strcmp(p.state, "stopped") == 0) {
            if (store_exec(st,
                           "UPDATE instances SET stopped_at = ?2, release_warnings = 0"
                           " WHERE id = ?1",
                           DB_ARGS(DB_TEXT(id), DB_INT(p.expires)), err) < 0 ||
                instance_free_gpus(st, id, err) < 0)
                return -1;
        } else if (strcmp(p.state, "failed") != 0) {
            if (instance_stop(srv, id, "plan_expired", err) < 0)
                return -1;
            stats->stopped++;
        }
    }
    return 0;
}

int billing_plans_expire(struct server *srv, struct billing_stats *stats, struct sl_error *err)
{
    int64_t now = sl_time_now();

    /* not while the host is silent: that time is given back when it reports
     * again */
    return billing_each(srv,
                        "SELECT i.id, 0 FROM instances i JOIN nodes n ON n.id = i.node_id"
                        " WHERE i.plan != 'payg' AND i.plan_expires_at <= ?1"
                        " AND n.last_heartbeat >= ?2 ORDER BY i.plan_expires_at",
                        DB_ARGS(DB_INT(now), DB_INT(now - srv->cfg.node_offline_after)),
                        plan_expire_one, stats, err);
}
