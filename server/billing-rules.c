/* The billing loop's pass: settle, then the rules that act on money
 * (DESIGN.md section 4): plans end or renew, a balance under an hour of
 * spend is warned about, at zero running instances stop (never released),
 * and instances stopped for billing.release_after are released after
 * warnings 3 days and 1 day before. */
#include "billing.h"
#include "billing-meters.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "instances.h"
#include "ledger.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A user's event, not tied to one instance (instance_id ''). */
static int billing_user_event(struct store *st, const char *user_id, const char *kind,
                              const char *reason, const char *message, struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO events (instance_id, user_id, kind, state, reason, message,"
                      " created_at) VALUES ('', ?1, ?2, '', ?3, ?4, ?5)",
                      DB_ARGS(DB_TEXT(user_id), DB_TEXT(kind), DB_TEXT(reason), DB_TEXT(message),
                              DB_INT(sl_time_now())),
                      err) < 0
               ? -1
               : 0;
}

/* A list of ids a query selects, read before anything is written. */
struct id_list {
    char (*ids)[SL_ID_MAX];
    int64_t *values;
    size_t n;
};

static void id_list_release(struct id_list *l)
{
    free(l->ids);
    free(l->values);
}
#define cleanup_id_list __attribute__((cleanup(id_list_release)))

/* Columns: id, then an optional integer. */
static int id_list_load(struct store *st, struct id_list *l, const char *sql,
                        const struct db_arg *args, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(st, sql, args, err);
    size_t cap = 0;
    int rc;

    memset(l, 0, sizeof(*l));
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        if (l->n == cap) {
            cap = cap ? cap * 2 : 16;
            l->ids = xrealloc(l->ids, cap * sizeof(*l->ids));
            l->values = xrealloc(l->values, cap * sizeof(*l->values));
        }
        snprintf(l->ids[l->n], SL_ID_MAX, "%s", db_text(rows, 0));
        l->values[l->n++] = db_int(rows, 1);
    }
    return rc < 0 ? -1 : 0;
}

int billing_each(struct server *srv, const char *sql, const struct db_arg *args,
                 billing_each_fn *fn, struct billing_stats *stats, struct sl_error *err)
{
    cleanup_id_list struct id_list l;

    if (id_list_load(srv->store, &l, sql, args, err) < 0)
        return -1;
    for (size_t i = 0; i < l.n; i++) {
        cleanup_tx struct store *tx = NULL;
        if (store_begin(srv->store, err) < 0)
            return -1;
        tx = srv->store;
        if (fn(srv, l.ids[i], l.values[i], stats, err) < 0 || store_commit(srv->store, err) < 0)
            return -1;
        tx = NULL;
    }
    return 0;
}

static int stop_for_balance(struct server *srv, const char *id, int64_t balance,
                            struct billing_stats *stats, struct sl_error *err)
{
    char have[SL_MONEY_FORMAT_MAX];
    cleanup_free char *message =
        xasprintf("the balance reached %s: stopped; the disks are kept and keep costing their "
                  "storage. Top up, then start it again",
                  sl_money_format(balance, have));

    if (instance_stop(srv, id, "balance", err) < 0 ||
        instance_event(srv->store, id, "balance_stop", "stopping", "balance", message, err) < 0)
        return -1;
    stats->stopped++;
    return 0;
}

/* At zero, the user's running pay-as-you-go instances stop. */
static int balance_stops(struct server *srv, struct billing_stats *stats, struct sl_error *err)
{
    return billing_each(srv,
                        /* from the accounts at zero (a few): the join the
                         * other way read every instance, 48 ms a pass over
                         * 100,000 */
                        "SELECT i.id, a.balance_micros FROM accounts a"
                        " CROSS JOIN instances i WHERE i.user_id = a.user_id"
                        " AND a.balance_micros <= 0 AND i.plan = 'payg'"
                        " AND i.state IN ('creating', 'starting', 'running')",
                        DB_NO_ARGS, stop_for_balance, stats, err);
}

/* The renter's mark follows their balance and spend: set (with a
 * warning) under an hour of spend, cleared at an hour or more. */
static int warn_balance(struct store *st, const char *user_id, int64_t balance, int64_t spend,
                        int64_t warned, struct billing_stats *stats, struct sl_error *err)
{
    char have[SL_MONEY_FORMAT_MAX], rate[SL_MONEY_FORMAT_MAX];
    int64_t covers = sl_money_covers_seconds(balance, spend);
    bool low = spend > 0 && covers < SL_SEC_PER_HOUR;

    if (low == (warned != 0))
        return 0;
    if (store_exec(st, "UPDATE users SET balance_warned = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(user_id), DB_INT(low)), err) < 0)
        return -1;
    if (!low)
        return 0;
    cleanup_free char *message = xasprintf(
        "the balance %s lasts about %" PRId64 " minutes at %s per hour: top up, or running "
        "instances stop when it reaches zero (their disks are kept)",
        sl_money_format(balance, have), covers / SL_SEC_PER_MIN, sl_money_format(spend, rate));
    stats->warnings++;
    return billing_user_event(st, user_id, "balance_low", "balance", message, err);
}

static int by_spender(const void *a, const void *b)
{
    return strcmp(((const struct billing_spend *)a)->user_id,
                  ((const struct billing_spend *)b)->user_id);
}

/* Users whose balance covers less than an hour of spend get one warning
 * until it covers an hour again. Their spends come from the settlement's
 * read of the meters, their balances and marks from one read (two reads a
 * renter took 0.2 s of a pass over 1,000 on PostgreSQL). */
static int balance_warnings(struct server *srv, struct billing_spend *spends, size_t n_spends,
                            struct billing_stats *stats, struct sl_error *err)
{
    struct store *st = srv->store;
    int rc;

    qsort(spends, n_spends, sizeof(*spends), by_spender);
    /* each row acted on after the read: warn_balance writes */
    cleanup_free struct renter_balance {
        char id[SL_ID_MAX];
        int64_t warned, balance;
    } *users = NULL;
    size_t n = 0, cap = 0;
    {
        cleanup_rows struct db_rows *rows = store_query(
            st,
            "SELECT u.id, u.balance_warned, a.balance_micros FROM users u"
            " LEFT JOIN accounts a ON a.id = 'user:' || u.id WHERE u.balance_warned != 0"
            " OR u.id IN (SELECT user_id FROM meters WHERE ended_at IS NULL)",
            DB_NO_ARGS, err);
        while (rows && (rc = db_next(rows, err)) == 1) {
            if (db_null(rows, 2))
                return sl_fail(err, SL_E_NOT_FOUND, "no_account", "no money account 'user:%s'",
                               db_text(rows, 0));
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                users = xrealloc(users, cap * sizeof(*users));
            }
            snprintf(users[n].id, sizeof(users[n].id), "%s", db_text(rows, 0));
            users[n].warned = db_int(rows, 1);
            users[n++].balance = db_int(rows, 2);
        }
        if (!rows || rc < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        struct billing_spend key, *s;
        snprintf(key.user_id, sizeof(key.user_id), "%s", users[i].id);
        s = bsearch(&key, spends, n_spends, sizeof(*spends), by_spender);
        if (warn_balance(st, users[i].id, users[i].balance, s ? s->per_hour : 0, users[i].warned,
                         stats, err) < 0)
            return -1;
    }
    return 0;
}

static int release_or_warn(struct server *srv, const char *id, int64_t stopped_at,
                           struct billing_stats *stats, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t left = stopped_at + srv->cfg.release_after - sl_time_now(), warned;
    char when[SL_TIME_FORMAT_MAX];

    if (left <= 0) {
        cleanup_free char *message = xasprintf(
            "stopped since %s, longer than the %" PRId64 " days kept: released with its disks",
            sl_time_format(stopped_at, when), srv->cfg.release_after / SL_SEC_PER_DAY);
        if (instance_release(srv, id, "auto_release", err) < 0 ||
            instance_event(st, id, "auto_release", "releasing", "auto_release", message, err) < 0)
            return -1;
        stats->released++;
        return 0;
    }
    if (store_get_int(st, "SELECT release_warnings FROM instances WHERE id = ?1",
                      DB_ARGS(DB_TEXT(id)), &warned, err) < 0)
        return -1;
    int due = left <= SL_SEC_PER_DAY ? 2 : left <= 3 * SL_SEC_PER_DAY ? 1 : 0;
    if (due <= warned)
        return 0;
    cleanup_free char *message = xasprintf(
        "stopped instances are released after %" PRId64 " days: this one will be released at %s "
        "with its disks unless it is started (or given a plan) before",
        srv->cfg.release_after / SL_SEC_PER_DAY,
        sl_time_format(stopped_at + srv->cfg.release_after, when));
    stats->warnings++;
    return store_exec(st, "UPDATE instances SET release_warnings = ?2 WHERE id = ?1",
                      DB_ARGS(DB_TEXT(id), DB_INT(due)), err) < 0 ||
                   instance_event(st, id, "release_warning", "stopped", "auto_release", message,
                                  err) < 0
               ? -1
               : 0;
}

static int auto_release(struct server *srv, struct billing_stats *stats, struct sl_error *err)
{
    int64_t now = sl_time_now();

    return billing_each(srv,
                        "SELECT id, stopped_at FROM instances WHERE state = 'stopped'"
                        " AND plan = 'payg' AND stopped_at IS NOT NULL AND stopped_at <= ?1"
                        " AND (stopped_at <= ?2 OR release_warnings < 2)",
                        DB_ARGS(DB_INT(now - srv->cfg.release_after + 3 * SL_SEC_PER_DAY),
                                DB_INT(now - srv->cfg.release_after)),
                        release_or_warn, stats, err);
}

int billing_run(struct server *srv, struct billing_stats *stats, struct sl_error *err)
{
    int64_t t0 = sl_time_mono_us();

    cleanup_free struct billing_spend *spends = NULL;
    size_t n_spends;

    memset(stats, 0, sizeof(*stats));
    if (billing_settle_spends(srv, stats, &spends, &n_spends, err) < 0 ||
        billing_plans_expire(srv, stats, err) < 0 ||
        balance_warnings(srv, spends, n_spends, stats, err) < 0 ||
        balance_stops(srv, stats, err) < 0 || auto_release(srv, stats, err) < 0)
        return -1;
    stats->elapsed_us = sl_time_mono_us() - t0;
    return 0;
}

/* Meters whose charged amount is not the floor formula (lib/money) at their
 * settled position; one whose formula does not compute counts too. */
static int count_bad_charged(struct store *st, int64_t *out, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT amount_micros, settled_until - started_at, period_s, charged_micros FROM meters",
        DB_NO_ARGS, err);
    int64_t bad = 0, want;
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        struct sl_error e = SL_ERROR_INIT;
        if (sl_money_prorate(db_int(rows, 0), db_int(rows, 1), db_int(rows, 2), &want, &e) < 0 ||
            want != db_int(rows, 3))
            bad++;
    }
    if (rc < 0)
        return -1;
    *out = bad;
    return 0;
}

/* A renter's usage: what their meters are billed (the formula at each
 * one's billed position) and what their usage ledger transactions
 * (settle:...) moved. */
struct usage {
    char user_id[SL_ID_MAX];
    int64_t billed, moved;
};

static int by_usage_user(const void *a, const void *b)
{
    return strcmp(((const struct usage *)a)->user_id, ((const struct usage *)b)->user_id);
}

static struct usage *usage_of(struct usage **v, size_t *n, size_t *cap, const char *user_id)
{
    if (*n > 0 && strcmp((*v)[*n - 1].user_id, user_id) == 0)
        return &(*v)[*n - 1];
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *v = xrealloc(*v, *cap * sizeof(**v));
    }
    struct usage *u = &(*v)[(*n)++];
    snprintf(u->user_id, sizeof(u->user_id), "%s", user_id);
    u->billed = u->moved = 0;
    return u;
}

/* Renters whose meters are not billed what their usage transactions
 * moved; the totals of both. */
static int check_usage(struct store *st, struct billing_check *out, struct sl_error *err)
{
    cleanup_free struct usage *v = NULL;
    size_t n = 0, cap = 0;
    int64_t cost;
    int rc;

    /* streamed, a renter's meters together: every meter ever is read */
    {
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT m.user_id, " METER_BILLED_COST METER_BILLED_FROM " ORDER BY m.user_id",
            DB_NO_ARGS, err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            struct usage *u = usage_of(&v, &n, &cap, db_text(rows, 0));
            struct sl_error e = SL_ERROR_INIT;
            if (sl_money_prorate(db_int(rows, 1), db_int(rows, 2), db_int(rows, 3), &cost, &e) <
                    0 ||
                sl_money_add(u->billed, cost, &u->billed, &e) < 0)
                out->bad_positions++;
        }
        if (rc < 0)
            return -1;
    }
    /* in strcmp's order, which need not be the store's collation */
    size_t billed_renters = n;
    if (n)
        qsort(v, n, sizeof(*v), by_usage_user);
    {
        cleanup_rows struct db_rows *rows = store_query(
            st,
            "SELECT substr(e.account_id, 6), SUM(-e.amount_micros) FROM ledger_entries e"
            " JOIN ledger_txns t ON t.id = e.txn_id WHERE t.idempotency_key LIKE 'settle:%'"
            " AND e.account_id LIKE 'user:%' GROUP BY e.account_id ORDER BY 1",
            DB_NO_ARGS, err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            struct usage key, *u;
            snprintf(key.user_id, sizeof(key.user_id), "%s", db_text(rows, 0));
            u = billed_renters ? bsearch(&key, v, billed_renters, sizeof(*v), by_usage_user) : NULL;
            if (!u)
                u = usage_of(&v, &n, &cap, key.user_id);
            u->moved = db_int(rows, 1);
        }
        if (rc < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        out->bad_renters += v[i].billed != v[i].moved;
        if (sl_money_add(out->charges_total, v[i].billed, &out->charges_total, err) < 0 ||
            sl_money_add(out->ledger_charges, v[i].moved, &out->ledger_charges, err) < 0)
            return -1;
    }
    return 0;
}

int billing_check(struct store *st, struct billing_check *out, struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;

    memset(out, 0, sizeof(*out));
    /* one snapshot, whatever settles meanwhile */
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    if (store_get_int(st, "SELECT COUNT(*) FROM meters", DB_NO_ARGS, &out->meters, err) < 0 ||
        count_bad_charged(st, &out->bad_charged, err) < 0 ||
        store_get_int(st,
                      "SELECT COUNT(*) FROM meters m LEFT JOIN (SELECT meter_seq,"
                      " SUM(amount_micros) AS total FROM charges WHERE meter_seq IS NOT NULL"
                      " GROUP BY meter_seq) c ON c.meter_seq = m.seq"
                      " WHERE m.charged_micros != COALESCE(c.total, 0)",
                      DB_NO_ARGS, &out->bad_sums, err) < 0 ||
        /* started <= settled <= billed <= end */
        store_get_int(st,
                      "SELECT COUNT(*) FROM meters m LEFT JOIN billing_marks k"
                      " ON k.node_id = m.node_id WHERE m.settled_until < m.started_at"
                      " OR " METER_BILLED " < m.settled_until"
                      " OR (m.ended_at IS NOT NULL AND (m.billed_until > m.ended_at"
                      " OR m.ended_at < m.started_at))",
                      DB_NO_ARGS, &out->bad_positions, err) < 0 ||
        store_get_int(st,
                      "SELECT COUNT(*) FROM charges c JOIN instances i ON i.id = c.instance_id"
                      " WHERE i.released_at IS NOT NULL AND c.period_to > i.released_at"
                      " AND c.meter_seq IS NOT NULL",
                      DB_NO_ARGS, &out->after_release, err) < 0 ||
        /* settlements of a meter are numbered 1..settlements, once each */
        store_get_int(st,
                      "SELECT COUNT(*) FROM meters m LEFT JOIN (SELECT meter_seq, COUNT(*) AS n,"
                      " MIN(settlement) AS lo, MAX(settlement) AS hi FROM charges"
                      " WHERE meter_seq IS NOT NULL GROUP BY meter_seq) c ON c.meter_seq = m.seq"
                      " WHERE COALESCE(c.n, 0) != m.settlements"
                      " OR (c.n > 0 AND (c.lo != 1 OR c.hi != c.n))",
                      DB_NO_ARGS, &out->bad_keys, err) < 0 ||
        check_usage(st, out, err) < 0)
        return -1;
    /* a transaction that names its charges (plans and refunds; usage
     * before marks and days) moves exactly their sum; the days' rows name
     * none (''): the passes that billed them moved their money */
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT COALESCE(SUM(CASE WHEN x.metered THEN 0 ELSE x.total END), 0),"
        " COALESCE(SUM(CASE WHEN x.metered THEN 0 ELSE -e.amount_micros END), 0),"
        " COALESCE(SUM(CASE WHEN e.amount_micros IS NULL OR -e.amount_micros != x.total"
        " THEN 1 ELSE 0 END), 0) FROM"
        " (SELECT txn_id, user_id, SUM(amount_micros) AS total,"
        " MAX(CASE WHEN meter_seq IS NULL THEN 0 ELSE 1 END) = 1 AS metered FROM charges"
        " WHERE txn_id != '' GROUP BY txn_id, user_id) x"
        " LEFT JOIN ledger_entries e ON e.txn_id = x.txn_id AND e.account_id = 'user:' || "
        "x.user_id",
        DB_NO_ARGS, err);
    int rc;
    int64_t plans, plans_moved;
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    plans = db_int(rows, 0);
    plans_moved = db_int(rows, 1);
    out->bad_txns = db_int(rows, 2);
    if (sl_money_add(out->charges_total, plans, &out->charges_total, err) < 0 ||
        sl_money_add(out->ledger_charges, plans_moved, &out->ledger_charges, err) < 0)
        return -1;
    return 0;
}
