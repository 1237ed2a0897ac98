/* Meters: opening, closing and settling billed intervals (billing.h). */
#include "billing.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "catalog.h"
#include "instances.h"
#include "ledger.h"
#include "store-rows.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR SL_SEC_PER_HOUR
#define DAY  SL_SEC_PER_DAY

/* Meters settled per store transaction in a pass: large enough that the
 * commit's fsync is amortised, small enough that API writers wait at most a
 * few tens of milliseconds behind one. */
#define SETTLE_CHUNK 5000

/* heartbeat: where the meter's evidence of use ends: its host's last
 * report, a file storage meter's last sample of the use (a renter-wide
 * meter has no host), INT64_MAX for saved images (their size changes only
 * through suanlid) */
struct meter {
    int64_t seq, amount, period, started, ended, settled, charged, settlements, heartbeat;
    int64_t quantity;
    char instance_id[SL_ID_MAX], user_id[SL_ID_MAX], node_id[SL_ID_MAX], item[16];
};

#define METER_COLUMNS                                                                              \
    "m.seq, m.amount_micros, m.period_s, m.started_at, COALESCE(m.ended_at, -1),"                  \
    " m.settled_until, m.charged_micros, m.settlements, COALESCE(n.last_heartbeat, 0),"            \
    " m.instance_id, m.user_id, m.node_id, m.item, COALESCE(s.used_at, 0), m.quantity"

/* a renter-wide meter has no host (node_id ''); file storage's evidence is
 * its directory's last sample */
#define METER_FROM                                                                                 \
    " FROM meters m LEFT JOIN nodes n ON n.id = m.node_id LEFT JOIN storage_dirs s"                \
    " ON m.item = 'file_storage' AND s.user_id = m.user_id AND s.region_id = m.region_id"

static void meter_read(struct db_rows *rows, struct meter *m)
{
    m->seq = db_int(rows, 0);
    m->amount = db_int(rows, 1);
    m->period = db_int(rows, 2);
    m->started = db_int(rows, 3);
    m->ended = db_int(rows, 4);
    m->settled = db_int(rows, 5);
    m->charged = db_int(rows, 6);
    m->settlements = db_int(rows, 7);
    m->heartbeat = db_int(rows, 8);
    snprintf(m->instance_id, sizeof(m->instance_id), "%s", db_text(rows, 9));
    snprintf(m->user_id, sizeof(m->user_id), "%s", db_text(rows, 10));
    snprintf(m->node_id, sizeof(m->node_id), "%s", db_text(rows, 11));
    snprintf(m->item, sizeof(m->item), "%s", db_text(rows, 12));
    m->quantity = db_int(rows, 14);
    if (strcmp(m->item, "file_storage") == 0)
        m->heartbeat = db_int(rows, 13);
    else if (strcmp(m->item, "image_storage") == 0)
        m->heartbeat = INT64_MAX;
}

/* Reads the meters a query selects (its columns: METER_COLUMNS). */
static struct meter *meters_load(struct store *st, const char *sql, const struct db_arg *args,
                                 size_t *n, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(st, sql, args, err);
    cleanup_free struct meter *out = NULL;
    size_t cap = 0;
    int rc;

    *n = 0;
    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            out = xrealloc(out, cap * sizeof(*out));
        }
        meter_read(rows, &out[(*n)++]);
    }
    if (rc < 0)
        return NULL;
    return out ? TAKE_PTR(out) : xcalloc(1, sizeof(*out));
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t next_midnight(int64_t t)
{
    return (t / DAY + 1) * DAY;
}

/* Settlements are batched per renter: each settlement of a meter is a
 * `charges` row keyed (meter, sequence), and all of one renter's
 * settlements in a store transaction are one ledger transaction moving
 * their sum from the renter to the platform, keyed by its first
 * settlement. 100,000 meters are then 100,000 rows, not 100,000 ledger
 * transactions of five rows each. The rows are written many to a
 * statement (store-rows.h): the charges in one INSERT, the meters' new
 * positions in one UPDATE ... FROM VALUES (or from arrays, 2048 rows to a
 * statement, on PostgreSQL). */
#define CHARGE_COLUMNS 10
#define MOVE_COLUMNS   5

static struct store_rows_sql charges_sql = STORE_ROWS_SQL(
    "INSERT INTO charges (txn_id, user_id, instance_id, item, meter_seq, settlement, period_from,"
    " period_to, amount_micros, created_at) VALUES ",
    "", CHARGE_COLUMNS,
    "INSERT INTO charges (txn_id, user_id, instance_id, item, meter_seq, settlement, period_from,"
    " period_to, amount_micros, created_at) SELECT * FROM unnest(?1::text[], ?2::text[],"
    " ?3::text[], ?4::text[], ?5::bigint[], ?6::bigint[], ?7::bigint[], ?8::bigint[],"
    " ?9::bigint[], ?10::bigint[])");
/* unsettled only changes when an ended meter reaches its end: an open
 * meter's update changes no indexed column */
static struct store_rows_sql moves_sql = STORE_ROWS_SQL(
    "UPDATE meters SET settled_until = v.column2, charged_micros = v.column3, settlements ="
    " v.column4, unsettled = CASE WHEN meters.ended_at IS NOT NULL AND v.column2 <"
    " meters.ended_at THEN 1 ELSE 0 END FROM (VALUES ",
    ") AS v WHERE meters.seq = v.column1 AND meters.settlements = v.column5", MOVE_COLUMNS,
    "UPDATE meters SET settled_until = v.column2, charged_micros = v.column3, settlements ="
    " v.column4, unsettled = CASE WHEN meters.ended_at IS NOT NULL AND v.column2 <"
    " meters.ended_at THEN 1 ELSE 0 END FROM unnest(?1::bigint[], ?2::bigint[], ?3::bigint[],"
    " ?4::bigint[], ?5::bigint[]) AS v(column1, column2, column3, column4, column5)"
    " WHERE meters.seq = v.column1 AND meters.settlements = v.column5");

/* A renter's ledger transaction, posted with the others at the end. */
struct pending_txn {
    char id[SL_ID_MAX], key[128], memo[64], account[LEDGER_ACCOUNT_MAX];
    int64_t total;
};

/* What a store transaction's settlements have not written yet, of any
 * number of renters: rows go `rows` to a statement whoever they charge (a
 * renter's hundred meters were three statements of 64, 32 and 4 rows
 * each), the ledger transactions all together at the end (pending_end;
 * about ten statements each before). The rows' texts point into the
 * meters, which outlive the flush, and into txn_ids. */
struct pending {
    size_t rows; /* store_rows_per_statement */
    struct db_arg *charges, *moves;
    char (*txn_ids)[SL_ID_MAX];
    size_t n_charges, n_moves;
    struct pending_txn *txns;
    size_t n_txns, cap_txns;
};

/* For about `meters` meters' rows: a stop's few meters take a small
 * buffer, a pass's chunk a statement's worth (more rows are flushed). */
static struct pending *pending_new(struct store *st, size_t meters)
{
    struct pending *p = xcalloc(1, sizeof(*p));

    p->rows = store_rows_per_statement(st, &charges_sql);
    if (meters < 16)
        meters = 16;
    if (meters < p->rows)
        p->rows = meters;
    p->charges = xcalloc(p->rows * CHARGE_COLUMNS + 1, sizeof(*p->charges));
    p->moves = xcalloc(p->rows * MOVE_COLUMNS + 1, sizeof(*p->moves));
    p->txn_ids = xcalloc(p->rows, sizeof(*p->txn_ids));
    return p;
}

static void pending_freep(struct pending **p)
{
    if (*p) {
        free((*p)->txns);
        free((*p)->charges);
        free((*p)->moves);
        free((*p)->txn_ids);
    }
    free(*p);
}

#define cleanup_pending __attribute__((cleanup(pending_freep)))

/* One renter's settlements in a store transaction: one ledger
 * transaction; its rows go to `rows`. */
struct batch {
    struct pending *rows;
    char user_id[SL_ID_MAX];
    char txn_id[SL_ID_MAX];
    char key[128];
    int64_t total, count, now;
};

static void batch_begin(struct batch *b, struct pending *rows, const char *user_id)
{
    b->rows = rows;
    snprintf(b->user_id, sizeof(b->user_id), "%s", user_id);
    sl_id_new(b->txn_id, "txn-");
    b->key[0] = '\0';
    b->total = 0;
    b->count = 0;
    b->now = sl_time_now();
}

/* Writes the pending charges, then the meters' new positions. A meter
 * that moved since it was read (another pass, a close) fails the whole
 * transaction as busy: never charged twice. */
static int pending_flush(struct store *st, struct pending *p, struct sl_error *err)
{
    if (store_write_rows(st, &charges_sql, p->charges, p->n_charges, err) < 0)
        return -1;
    p->n_charges = 0;
    int64_t moved = store_write_rows(st, &moves_sql, p->moves, p->n_moves, err);
    if (moved < 0)
        return -1;
    if ((size_t)moved != p->n_moves)
        return sl_fail(err, SL_E_UNAVAILABLE, "busy", "%zu of %zu meters moved: try again",
                       p->n_moves - (size_t)moved, p->n_moves);
    p->n_moves = 0;
    return 0;
}

/* One settlement: a charges row of the batch's ledger transaction. */
static int charge(struct store *st, struct batch *b, const struct meter *m, int64_t n, int64_t from,
                  int64_t to, int64_t amount, struct sl_error *err)
{
    if (!b->key[0])
        snprintf(b->key, sizeof(b->key), "settle:%s:%" PRId64 ":%" PRId64,
                 m->instance_id[0] ? m->instance_id : m->user_id, m->seq, n);
    if (sl_money_add(b->total, amount, &b->total, err) < 0)
        return -1;
    b->count++;
    struct pending *p = b->rows;
    if (p->n_charges == p->rows && pending_flush(st, p, err) < 0)
        return -1;
    char *txn_id = p->txn_ids[p->n_charges];
    snprintf(txn_id, SL_ID_MAX, "%s", b->txn_id);
    struct db_arg *row = &p->charges[p->n_charges++ * CHARGE_COLUMNS];
    row[0] = DB_TEXT(txn_id);
    row[1] = DB_TEXT(m->user_id);
    row[2] = DB_TEXT(m->instance_id);
    row[3] = DB_TEXT(m->item);
    row[4] = DB_INT(m->seq);
    row[5] = DB_INT(n);
    row[6] = DB_INT(from);
    row[7] = DB_INT(to);
    row[8] = DB_INT(amount);
    row[9] = DB_INT(b->now);
    return 0;
}

/* A meter's new position, written by pending_flush where it still is at
 * `was` settlements. */
static int move(struct store *st, struct batch *b, const struct meter *m, int64_t was,
                struct sl_error *err)
{
    struct pending *p = b->rows;
    if (p->n_moves == p->rows && pending_flush(st, p, err) < 0)
        return -1;
    struct db_arg *row = &p->moves[p->n_moves++ * MOVE_COLUMNS];
    row[0] = DB_INT(m->seq);
    row[1] = DB_INT(m->settled);
    row[2] = DB_INT(m->charged);
    row[3] = DB_INT(m->settlements);
    row[4] = DB_INT(was);
    return 0;
}

/* The ledger transaction of the batch's settlements, if any, pending. */
static void batch_end(struct batch *b)
{
    struct pending *p = b->rows;

    if (b->count == 0)
        return;
    if (p->n_txns == p->cap_txns) {
        p->cap_txns = p->cap_txns ? 2 * p->cap_txns : 16;
        p->txns = xrealloc(p->txns, p->cap_txns * sizeof(*p->txns));
    }
    struct pending_txn *t = &p->txns[p->n_txns++];
    snprintf(t->id, sizeof(t->id), "%s", b->txn_id);
    snprintf(t->key, sizeof(t->key), "%s", b->key);
    snprintf(t->memo, sizeof(t->memo), "usage: %" PRId64 " settlement%s", b->count,
             b->count == 1 ? "" : "s");
    ledger_user_account(t->account, b->user_id);
    t->total = b->total;
}

/* Writes what p holds: the rows, then the ledger transactions. A key
 * posted before fails them all: the meters' positions and the ledger
 * would disagree, which is never papered over. */
static int pending_end(struct store *st, struct pending *p, struct sl_error *err)
{
    if (pending_flush(st, p, err) < 0)
        return -1;
    cleanup_free struct ledger_txn *txns = xcalloc(p->n_txns + 1, sizeof(*txns));
    for (size_t i = 0; i < p->n_txns; i++)
        txns[i] = (struct ledger_txn){
            .id = p->txns[i].id,
            .kind = "charge",
            .memo = p->txns[i].memo,
            .idempotency_key = p->txns[i].key,
            .entries = { { p->txns[i].account, -p->txns[i].total },
                         { BILLING_REVENUE_ACCOUNT, p->txns[i].total } },
            .n_entries = 2,
        };
    if (ledger_post_many(st, txns, p->n_txns, err) < 0)
        return -1;
    p->n_txns = 0;
    return 0;
}

/* Charges m up to `to` (never past its end) into batch b, one settlement
 * per UTC day crossed. Runs inside the caller's transaction; the rows are
 * written by pending_flush at the latest. */
static int settle_to(struct store *st, struct batch *b, struct meter *m, int64_t to,
                     struct sl_error *err)
{
    int64_t u = m->settled, c = m->charged, n = m->settlements, was = m->settlements;

    if (m->ended >= 0 && to > m->ended)
        to = m->ended;
    while (u < to) {
        int64_t step = min64(to, next_midnight(u)), charged, owed;
        if (sl_money_prorate(m->amount, step - m->started, m->period, &charged, err) < 0 ||
            sl_money_sub(charged, c, &owed, err) < 0)
            return -1;
        if (owed > 0 && charge(st, b, m, ++n, u, step, owed, err) < 0)
            return -1;
        u = step;
        c = charged;
    }
    if (u == m->settled)
        return 0;
    m->settled = u;
    m->charged = c;
    m->settlements = n;
    return move(st, b, m, was, err);
}

/* Settles meters of one renter (all of ms) as far as limit allows; their
 * rows go to `rows`. */
static int settle_all(struct store *st, struct pending *rows, struct meter *ms, size_t n,
                      int64_t now, int64_t (*limit)(const struct meter *, int64_t),
                      struct sl_error *err)
{
    struct batch b;

    if (n == 0)
        return 0;
    batch_begin(&b, rows, ms[0].user_id);
    for (size_t i = 0; i < n; i++)
        if (settle_to(st, &b, &ms[i], limit(&ms[i], now), err) < 0)
            return -1;
    batch_end(&b);
    return 0;
}

/* Settles m to `to` alone: its rows written at once. */
static int settle_one(struct store *st, struct meter *m, int64_t to, struct sl_error *err)
{
    cleanup_pending struct pending *rows = pending_new(st, 1);
    struct batch b;

    batch_begin(&b, rows, m->user_id);
    if (settle_to(st, &b, m, to, err) < 0)
        return -1;
    batch_end(&b);
    return pending_end(st, rows, err);
}

/* Where a meter can be charged to now: not past its host's last report.
 * A file storage meter is charged up to its last sample of the use while
 * samples come (so that a fall in use can still be dated back to the
 * sample before it, billing_file_storage_sample), and up to now once none
 * came for BILLING_SAMPLE_LIVE_S: no host mounts the storage, so nothing
 * can change what it holds. */
static int64_t billable_until(const struct meter *m, int64_t now)
{
    int64_t to = min64(now, m->heartbeat);
    if (strcmp(m->item, "file_storage") == 0 && now - m->heartbeat > BILLING_SAMPLE_LIVE_S)
        to = now;
    return to < m->settled ? m->settled : to;
}

/* Opens a meter starting at now. */
static int open_meter_at(struct store *st, const char *instance_id, const char *item,
                         int64_t quantity, int64_t unit_price, int64_t period, int64_t now,
                         struct sl_error *err)
{
    int64_t amount;

    if (sl_money_mul(unit_price, quantity, &amount, err) < 0)
        return -1;
    return store_exec(st,
                      "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                      " unit_price_micros, amount_micros, period_s, started_at, settled_until)"
                      " SELECT id, user_id, node_id, ?2, ?3, ?4, ?5, ?6, ?7, ?7 FROM instances"
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

    if (store_exec(st,
                   "UPDATE meters SET ended_at = CASE WHEN ?2 > started_at THEN ?2"
                   " ELSE started_at END WHERE instance_id = ?1 AND ended_at IS NULL"
                   " AND (?3 = 1 OR (?3 = 0 AND item != 'data_disk')"
                   " OR (?3 = 2 AND item = 'data_disk'))",
                   DB_ARGS(DB_TEXT(instance_id), DB_INT(now), DB_INT(which)), err) < 0)
        return -1;
    /* settle what just ended, as far as the host has reported */
    cleanup_free struct meter *ms = meters_load(
        st,
        "SELECT " METER_COLUMNS METER_FROM " WHERE m.instance_id = ?1 AND m.ended_at IS NOT NULL"
        " AND m.settled_until < m.ended_at",
        DB_ARGS(DB_TEXT(instance_id)), &n, err);
    if (!ms)
        return -1;
    cleanup_pending struct pending *rows = pending_new(st, n);
    if (settle_all(st, rows, ms, n, now, billable_until, err) < 0)
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
        if (store_exec(st, "UPDATE meters SET ended_at = ?2 WHERE seq = ?1",
                       DB_ARGS(DB_INT(m->seq), DB_INT(cut)), err) < 0)
            return -1;
        m->ended = cut;
        if (settle_one(st, m, cut, err) < 0)
            return -1;
        if (was_open &&
            store_exec(st,
                       "INSERT INTO meters (instance_id, user_id, node_id, item, quantity,"
                       " unit_price_micros, amount_micros, period_s, started_at, settled_until)"
                       " SELECT instance_id, user_id, node_id, item, quantity, unit_price_micros,"
                       " amount_micros, period_s, ?2, ?2 FROM meters WHERE seq = ?1",
                       DB_ARGS(DB_INT(m->seq), DB_INT(now)), err) < 0)
            return -1;
    }
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

static int by_user(const void *a, const void *b)
{
    const struct meter *x = a, *y = b;
    int c = strcmp(x->user_id, y->user_id);

    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* Settles one chunk of meters, sorted by renter: one ledger transaction
 * per renter, one store transaction for the chunk. No instance's revision
 * is bumped: an event stream sends the instances a ledger transaction
 * charged with the balance it moved (event-stream.c, add_charged). */
/* The spends billing_settle_spends gathers. */
struct spends {
    struct billing_spend *v;
    size_t n, cap;
};

/* Adds the open meters of one renter (ms[0..n), sorted by renter: a
 * renter split between two chunks is added to). */
static int spends_add(struct spends *s, const struct meter *ms, size_t n, struct sl_error *err)
{
    int64_t rate;

    if (!s || n == 0)
        return 0;
    if (s->n == 0 || strcmp(s->v[s->n - 1].user_id, ms[0].user_id) != 0) {
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 64;
            s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
        }
        snprintf(s->v[s->n].user_id, sizeof(s->v[s->n].user_id), "%s", ms[0].user_id);
        s->v[s->n++].per_hour = 0;
    }
    struct billing_spend *b = &s->v[s->n - 1];
    for (size_t i = 0; i < n; i++)
        if (ms[i].ended < 0 && (sl_money_per_hour(ms[i].amount, ms[i].period, &rate, err) < 0 ||
                                sl_money_add(b->per_hour, rate, &b->per_hour, err) < 0))
            return -1;
    return 0;
}

static int settle_chunk(struct store *st, struct meter *ms, size_t n, int64_t now,
                        struct billing_stats *stats, struct spends *spends, struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;
    cleanup_pending struct pending *rows = pending_new(st, n);

    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    for (size_t i = 0, j; i < n; i = j) {
        int64_t before = 0, after = 0;
        for (j = i; j < n && strcmp(ms[j].user_id, ms[i].user_id) == 0; j++)
            before += ms[j].settlements;
        if (settle_all(st, rows, ms + i, j - i, now, billable_until, err) < 0 ||
            spends_add(spends, ms + i, j - i, err) < 0)
            return -1;
        for (size_t k = i; k < j; k++)
            after += ms[k].settlements;
        stats->settlements += after - before;
    }
    if (pending_end(st, rows, err) < 0)
        return -1;
    stats->meters += (int64_t)n;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

int billing_settle(struct server *srv, struct billing_stats *stats, struct sl_error *err)
{
    return billing_settle_spends(srv, stats, NULL, NULL, err);
}

int billing_settle_spends(struct server *srv, struct billing_stats *stats,
                          struct billing_spend **spends_out, size_t *n_spends, struct sl_error *err)
{
    struct store *st = srv->store;
    struct spends gathered = { 0 }, *spends = spends_out ? &gathered : NULL;
    int64_t now = sl_time_now(), after_seq = 0;
    char after_user[SL_ID_MAX] = "";
    size_t n;

    if (ledger_open_account(st, BILLING_REVENUE_ACCOUNT, NULL, err) < 0)
        return -1;
    /* open meters renter by renter (the index's order), so that a renter's
     * meters land in one ledger transaction and their charges close together */
    do {
        cleanup_free struct meter *ms = meters_load(
            st,
            "SELECT " METER_COLUMNS METER_FROM
            " WHERE m.ended_at IS NULL AND (m.user_id, m.seq) > (?1, ?2)"
            " ORDER BY m.user_id, m.seq LIMIT ?3",
            DB_ARGS(DB_TEXT(after_user), DB_INT(after_seq), DB_INT(SETTLE_CHUNK)), &n, err);
        if (!ms || settle_chunk(st, ms, n, now, stats, spends, err) < 0) {
            free(gathered.v);
            return -1;
        }
        if (n) {
            snprintf(after_user, sizeof(after_user), "%s", ms[n - 1].user_id);
            after_seq = ms[n - 1].seq;
        }
    } while (n == SETTLE_CHUNK);
    /* then what ended and is not settled to its end yet (its host had not
     * reported that far) */
    after_seq = 0;
    do {
        cleanup_free struct meter *ms = meters_load(
            st,
            "SELECT " METER_COLUMNS METER_FROM
            " WHERE m.unsettled = 1 AND m.ended_at IS NOT NULL AND m.settled_until < m.ended_at"
            " AND m.seq > ?1"
            " ORDER BY m.seq LIMIT ?2",
            DB_ARGS(DB_INT(after_seq), DB_INT(SETTLE_CHUNK)), &n, err);
        if (!ms) {
            free(gathered.v);
            return -1;
        }
        if (n)
            after_seq = ms[n - 1].seq;
        qsort(ms, n, sizeof(*ms), by_user);
        if (settle_chunk(st, ms, n, now, stats, NULL, err) < 0) {
            free(gathered.v);
            return -1;
        }
    } while (n == SETTLE_CHUNK);
    if (spends_out) {
        *spends_out = gathered.v ? gathered.v : xcalloc(1, sizeof(**spends_out));
        *n_spends = gathered.n;
    }
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
    int64_t metered, unmetered;

    /* the meters' charges plus plans and refunds (charges without a meter) */
    if (store_get_int(st,
                      "SELECT COALESCE(SUM(charged_micros), 0) FROM meters WHERE instance_id = ?1",
                      DB_ARGS(DB_TEXT(instance_id)), &metered, err) < 0 ||
        store_get_int(st,
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
        /* never end before what is charged already, nor before the start */
        if (end < m->settled)
            end = m->settled;
        at = end;
        if (store_exec(st, "UPDATE meters SET ended_at = ?2 WHERE seq = ?1",
                       DB_ARGS(DB_INT(m->seq), DB_INT(end)), err) < 0)
            return -1;
        m->ended = end;
        if (settle_one(st, m, end, err) < 0)
            return -1;
    }
    if (quantity <= 0 || unit_price <= 0)
        return 0;
    int64_t amount;
    if (sl_money_mul(unit_price, quantity, &amount, err) < 0)
        return -1;
    return store_exec(st,
                      "INSERT INTO meters (user_id, region_id, item, quantity, unit_price_micros,"
                      " amount_micros, period_s, started_at, settled_until)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
                      DB_ARGS(DB_TEXT(user_id), DB_TEXT(region), DB_TEXT(item), DB_INT(quantity),
                              DB_INT(unit_price), DB_INT(amount), DB_INT(period), DB_INT(at)),
                      err) < 0
               ? -1
               : 0;
}
