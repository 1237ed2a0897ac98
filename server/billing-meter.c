/* Meters: opening, closing and settling billed intervals (billing.h). */
#include "billing.h"
#include "billing-meters.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "catalog.h"
#include "instances.h"
#include "ledger.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR SL_SEC_PER_HOUR
#define DAY  SL_SEC_PER_DAY

/* Opens a meter starting at now. */
static int open_meter_at(struct store *st, const char *instance_id, const char *item,
                         int64_t quantity, int64_t unit_price, int64_t period, int64_t now,
                         struct sl_error *err)
{
    int64_t amount;

    if (sl_money_mul(unit_price, quantity, &amount, err) < 0)
        return -1;
    /* a pass that read the host's meters before moves its mark no more */
    if (store_exec(st,
                   "INSERT INTO billing_marks (node_id, billed_until, gen) SELECT node_id, 0, 1"
                   " FROM instances WHERE id = ?1 AND node_id != ''"
                   " ON CONFLICT (node_id) DO UPDATE SET gen = billing_marks.gen + 1",
                   DB_ARGS(DB_TEXT(instance_id)), err) < 0)
        return -1;
    return store_exec(st,
                      "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                      " unit_price_micros, amount_micros, period_s, started_at, settled_until,"
                      " billed_until) SELECT id, user_id, node_id, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?7"
                      " FROM instances"
                      " WHERE id = ?1",
                      DB_ARGS(DB_TEXT(instance_id), DB_TEXT(item), DB_INT(quantity),
                              DB_INT(unit_price), DB_INT(amount), DB_INT(period), DB_INT(now)),
                      err) < 0
               ? -1
               : 0;
}

static int open_meter(struct store *st, const char *instance_id, const char *item, int64_t quantity,
                      int64_t unit_price, int64_t period, struct sl_error *err)
{
    return open_meter_at(st, instance_id, item, quantity, unit_price, period, sl_time_now(), err);
}

int billing_open_compute(struct server *srv, const char *instance_id, struct sl_error *err)
{
    struct store *st = srv->store;
    char model[SL_ID_MAX], region[64];
    int64_t open, gpus, price;
    bool covered, nogpu;
    int rc;

    if (billing_plan_active(st, instance_id, &covered, err) < 0)
        return -1;
    if (covered)
        return 0;
    if (store_get_int(st,
                      "SELECT COUNT(*) FROM meters WHERE instance_id = ?1 AND ended_at IS NULL"
                      " AND item != 'data_disk'",
                      DB_ARGS(DB_TEXT(instance_id)), &open, err) < 0)
        return -1;
    if (open)
        return 0;
    {
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT mode, gpu_model_id, gpus, region_id FROM instances WHERE id = ?1",
            DB_ARGS(DB_TEXT(instance_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance", "no instance '%s'",
                           instance_id);
        nogpu = strcmp(db_text(rows, 0), "nogpu") == 0;
        snprintf(model, sizeof(model), "%s", db_text(rows, 1));
        gpus = nogpu ? 1 : db_int(rows, 2);
        snprintf(region, sizeof(region), "%s", db_text(rows, 3));
    }
    if (catalog_hourly_price(st, nogpu ? NULL : model, region, &price, err) < 0)
        return -1;
    return open_meter(st, instance_id, nogpu ? "nogpu" : "gpu", gpus, price, HOUR, err);
}

/* The data disk's meter, starting at now (when it is larger than the free
 * size). */
static int open_storage_at(struct server *srv, const char *instance_id, int64_t now,
                           struct sl_error *err)
{
    struct store *st = srv->store;
    char region[64];
    int64_t gib, price, free_gib = 0;
    int rc;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st, "SELECT data_disk_gib, region_id FROM instances WHERE id = ?1",
                        DB_ARGS(DB_TEXT(instance_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance", "no instance '%s'",
                           instance_id);
        gib = db_int(rows, 0);
        snprintf(region, sizeof(region), "%s", db_text(rows, 1));
    }
    rc = catalog_price_at(st, CATALOG_DATA_DISK, region, now, &price, &free_gib, err);
    if (rc < 0)
        return -1;
    if (rc == 0 || gib <= free_gib || price == 0)
        return 0; /* nothing to bill */
    return open_meter_at(st, instance_id, "data_disk", gib - free_gib, price, DAY, now, err);
}

int billing_open_storage(struct server *srv, const char *instance_id, struct sl_error *err)
{
    return open_storage_at(srv, instance_id, sl_time_now(), err);
}

/* Ends the instance's open meters that `which` selects (0: all but the
 * data disk's, 1: all, 2: only the data disk's) at now and settles them. */
static int close_meters(struct server *srv, const char *instance_id, int which, int64_t now,
                        struct sl_error *err)
{
    struct store *st = srv->store;
    size_t n;

    /* the open ones end now, billed as far as their host's mark */
    {
        cleanup_free struct meter *open = meters_load(
            st,
            "SELECT " METER_COLUMNS METER_FROM " WHERE m.instance_id = ?1 AND m.ended_at IS NULL"
            " AND (?2 = 1 OR (?2 = 0 AND m.item != 'data_disk')"
            " OR (?2 = 2 AND m.item = 'data_disk'))",
            DB_ARGS(DB_TEXT(instance_id), DB_INT(which)), &n, err);
        if (!open)
            return -1;
        for (size_t i = 0; i < n; i++)
            if (meter_end(st, &open[i], now, err) < 0)
                return -1;
    }
    /* bill what ended, as far as the host has reported */
    cleanup_free struct meter *ms = meters_load(
        st,
        "SELECT " METER_COLUMNS METER_FROM " WHERE m.instance_id = ?1 AND m.ended_at IS NOT NULL"
        " AND m.settled_until < m.ended_at",
        DB_ARGS(DB_TEXT(instance_id)), &n, err);
    if (!ms)
        return -1;
    cleanup_pending struct pending *rows = pending_new(st, n);
    if (meters_bill_alone(st, rows, ms, n, now, err) < 0)
        return -1;
    return pending_end(st, rows, err);
}

int billing_close(struct server *srv, const char *instance_id, bool storage, struct sl_error *err)
{
    return close_meters(srv, instance_id, storage ? 1 : 0, sl_time_now(), err);
}

int billing_resize_storage(struct server *srv, const char *instance_id, struct sl_error *err)
{
    /* one instant: the old meter ends at the second the new one starts */
    int64_t now = sl_time_now();
    if (close_meters(srv, instance_id, 2, now, err) < 0)
        return -1;
    return open_storage_at(srv, instance_id, now, err);
}

int billing_host_reported(struct server *srv, const char *node_id, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t now = sl_time_now(), last;
    size_t n;
    int rc;

    rc = store_get_int(st,
                       "SELECT last_heartbeat FROM nodes WHERE id = ?1 AND last_heartbeat"
                       " IS NOT NULL",
                       DB_ARGS(DB_TEXT(node_id)), &last, err);
    if (rc <= 0 || now - last <= srv->cfg.node_offline_after)
        return rc < 0 ? -1 : 0;
    /* every meter that ran during the silence: settle to the last report,
     * end it there, and start the open ones again now */
    cleanup_free struct meter *ms =
        meters_load(st,
                    "SELECT " METER_COLUMNS METER_FROM
                    " WHERE m.node_id = ?1 AND (m.ended_at IS NULL OR m.ended_at > ?2)",
                    DB_ARGS(DB_TEXT(node_id), DB_INT(last)), &n, err);
    if (!ms)
        return -1;
    for (size_t i = 0; i < n; i++) {
        struct meter *m = &ms[i];
        int64_t cut = m->started > last ? m->started : last;
        bool was_open = m->ended < 0;
        if (meter_end(st, m, cut, err) < 0 || meter_settle_one(st, m, cut, err) < 0)
            return -1;
        if (was_open &&
            store_exec(st,
                       "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                       " unit_price_micros, amount_micros, period_s, started_at, settled_until,"
                       " billed_until) SELECT instance_id, user_id, node_id, item, quantity,"
                       " unit_price_micros, amount_micros, period_s, ?2, ?2, ?2 FROM meters"
                       " WHERE seq = ?1",
                       DB_ARGS(DB_INT(m->seq), DB_INT(now)), err) < 0)
            return -1;
    }
    if (n > 0 && mark_touch(st, node_id, err) < 0)
        return -1;
    /* prepaid time the renter could not use is given back */
    if (store_exec(st,
                   "UPDATE instances SET plan_expires_at = plan_expires_at + ?3"
                   " WHERE node_id = ?1 AND plan != 'payg' AND plan_expires_at > ?2",
                   DB_ARGS(DB_TEXT(node_id), DB_INT(last), DB_INT(now - last)), err) < 0)
        return -1;
    char from[SL_TIME_FORMAT_MAX], to[SL_TIME_FORMAT_MAX];
    cleanup_free char *message =
        xasprintf("the host did not report from %s to %s: that time is not billed",
                  sl_time_format(last, from), sl_time_format(now, to));
    if (store_exec(st,
                   "INSERT INTO events (instance_id, user_id, kind, state, reason, message,"
                   " created_at) SELECT id, user_id, 'host_back', state, 'host_lost', ?2, ?3"
                   " FROM instances WHERE node_id = ?1 AND state != 'released'",
                   DB_ARGS(DB_TEXT(node_id), DB_TEXT(message), DB_INT(now)), err) < 0)
        return -1;
    log_info("billing: host %s back after %" PRId64 " s silent: %zu meters cut", node_id,
             now - last, n);
    return 0;
}

/* The rates per hour of the meters sql lists (amount_micros, period_s for
 * the id ?1), summed: the arithmetic is lib/money's, not SQL's. */
static int sum_per_hour(struct store *st, const char *sql, const char *id, int64_t *out,
                        struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(st, sql, DB_ARGS(DB_TEXT(id)), err);
    int64_t total = 0, rate;
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1)
        if (sl_money_per_hour(db_int(rows, 0), db_int(rows, 1), &rate, err) < 0 ||
            sl_money_add(total, rate, &total, err) < 0)
            return -1;
    if (rc < 0)
        return -1;
    *out = total;
    return 0;
}

int billing_spend_per_hour(struct store *st, const char *user_id, int64_t *spend,
                           struct sl_error *err)
{
    return sum_per_hour(st,
                        "SELECT amount_micros, period_s FROM meters"
                        " WHERE user_id = ?1 AND ended_at IS NULL",
                        user_id, spend, err);
}

int billing_instance_charged(struct store *st, const char *instance_id, int64_t *charged,
                             int64_t *rate_per_hour, struct sl_error *err)
{
    int64_t metered = 0, unmetered, cost;
    int rc;

    /* what the meters are billed (their host's mark for the open ones)
     * plus plans and refunds (charges without a meter); the instance view
     * asks this of every instance it shows */
    {
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT " METER_BILLED_COST METER_BILLED_FROM " WHERE m.instance_id = ?1",
            DB_ARGS(DB_TEXT(instance_id)), err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1)
            if (sl_money_prorate(db_int(rows, 0), db_int(rows, 1), db_int(rows, 2), &cost, err) <
                    0 ||
                sl_money_add(metered, cost, &metered, err) < 0)
                return -1;
        if (rc < 0)
            return -1;
    }
    if (store_get_int(st,
                      "SELECT COALESCE(SUM(amount_micros), 0) FROM charges"
                      " WHERE instance_id = ?1 AND meter_seq IS NULL",
                      DB_ARGS(DB_TEXT(instance_id)), &unmetered, err) < 0 ||
        sl_money_add(metered, unmetered, charged, err) < 0)
        return -1;
    return sum_per_hour(st,
                        "SELECT amount_micros, period_s FROM meters"
                        " WHERE instance_id = ?1 AND ended_at IS NULL",
                        instance_id, rate_per_hour, err);
}

int billing_renter_meter_set(struct store *st, const char *user_id, const char *item,
                             const char *region, int64_t quantity, int64_t unit_price,
                             int64_t period, int64_t at, int64_t at_if_lower, struct sl_error *err)
{
    size_t n;
    cleanup_free struct meter *ms =
        meters_load(st,
                    "SELECT " METER_COLUMNS METER_FROM " WHERE m.user_id = ?1 AND m.item = ?2"
                    " AND m.region_id = ?3 AND m.instance_id = '' AND m.ended_at IS NULL",
                    DB_ARGS(DB_TEXT(user_id), DB_TEXT(item), DB_TEXT(region)), &n, err);

    if (!ms)
        return -1;
    if (n > 0) {
        struct meter *m = &ms[0];
        if (m->quantity == quantity)
            return 0; /* same use: the meter (and its rates) go on */
        int64_t end = quantity < m->quantity ? at_if_lower : at;
        /* never end before what is billed already (nor before the start:
         * meter_end) */
        if (end < m->billed)
            end = m->billed;
        if (meter_end(st, m, end, err) < 0 || meter_settle_one(st, m, m->ended, err) < 0)
            return -1;
        at = m->ended;
    }
    if (quantity <= 0 || unit_price <= 0)
        return 0;
    int64_t amount;
    if (sl_money_mul(unit_price, quantity, &amount, err) < 0)
        return -1;
    return store_exec(st,
                      "INSERT INTO meters (user_id, region_id, item, quantity, unit_price_micros,"
                      " amount_micros, period_s, started_at, settled_until, billed_until)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?8)",
                      DB_ARGS(DB_TEXT(user_id), DB_TEXT(region), DB_TEXT(item), DB_INT(quantity),
                              DB_INT(unit_price), DB_INT(amount), DB_INT(period), DB_INT(at)),
                      err) < 0
               ? -1
               : 0;
}
