/* Moving meters (billing-meters.h): money to the ledger, whole days to
 * charges rows, many rows to a statement. */
#include "billing-meters.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "billing.h"
#include "ledger.h"
#include "store-rows.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY SL_SEC_PER_DAY

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
    m->own = db_int(rows, 15);
    m->moves = db_int(rows, 16);
    m->mark = db_int(rows, 17);
    m->gen = db_int(rows, 18);
    m->follows = m->ended < 0 && m->node_id[0];
    m->billed = m->follows && m->mark > m->own ? m->mark : m->own;
    if (strcmp(m->item, "file_storage") == 0)
        m->heartbeat = db_int(rows, 13);
    else if (strcmp(m->item, "image_storage") == 0)
        m->heartbeat = INT64_MAX;
}

struct meter *meters_load(struct store *st, const char *sql, const struct db_arg *args, size_t *n,
                          struct sl_error *err)
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

int meter_cost(const struct meter *m, int64_t t, int64_t *out, struct sl_error *err)
{
    return sl_money_prorate(m->amount, t - m->started, m->period, out, err);
}

/* A file storage meter is billed up to its last sample of the use while
 * samples come (so that a fall in use can still be dated back to the
 * sample before it, billing_file_storage_sample), and up to now once none
 * came for BILLING_SAMPLE_LIVE_S: no host mounts the storage, so nothing
 * can change what it holds. */
int64_t meter_billable_until(const struct meter *m, int64_t now)
{
    int64_t to = now < m->heartbeat ? now : m->heartbeat;
    if (strcmp(m->item, "file_storage") == 0 && now - m->heartbeat > BILLING_SAMPLE_LIVE_S)
        to = now;
    return to < m->billed ? m->billed : to;
}

/* The rows: a day's charge (txn_id '': the money moved with the passes
 * that billed the day, docs/design/billing.md), a meter's new positions,
 * a host's new mark (a first one inserted). unsettled only changes when
 * an ended meter's rows reach its end: an update changes no indexed
 * column (PostgreSQL's HOT updates). */
#define CHARGE_COLUMNS        10
#define METER_COLUMNS_WRITTEN 8
#define MARK_COLUMNS          5

static struct store_rows_sql charges_sql = STORE_ROWS_SQL(
    "INSERT INTO charges (txn_id, user_id, instance_id, item, meter_seq, settlement, period_from,"
    " period_to, amount_micros, created_at) VALUES ",
    "", CHARGE_COLUMNS,
    "INSERT INTO charges (txn_id, user_id, instance_id, item, meter_seq, settlement, period_from,"
    " period_to, amount_micros, created_at) SELECT * FROM unnest(?1::text[], ?2::text[],"
    " ?3::text[], ?4::text[], ?5::bigint[], ?6::bigint[], ?7::bigint[], ?8::bigint[],"
    " ?9::bigint[], ?10::bigint[])");
static struct store_rows_sql meters_sql = STORE_ROWS_SQL(
    "UPDATE meters SET billed_until = v.column2, moves = v.column3, settled_until = v.column4,"
    " charged_micros = v.column5, settlements = v.column6, unsettled = CASE WHEN"
    " meters.ended_at IS NOT NULL AND v.column4 < meters.ended_at THEN 1 ELSE 0 END FROM (VALUES ",
    ") AS v WHERE meters.seq = v.column1 AND meters.moves = v.column7"
    " AND meters.settlements = v.column8",
    METER_COLUMNS_WRITTEN,
    "UPDATE meters SET billed_until = v.column2, moves = v.column3, settled_until = v.column4,"
    " charged_micros = v.column5, settlements = v.column6, unsettled = CASE WHEN"
    " meters.ended_at IS NOT NULL AND v.column4 < meters.ended_at THEN 1 ELSE 0 END FROM"
    " unnest(?1::bigint[], ?2::bigint[], ?3::bigint[], ?4::bigint[], ?5::bigint[], ?6::bigint[],"
    " ?7::bigint[], ?8::bigint[]) AS v(column1, column2, column3, column4, column5, column6,"
    " column7, column8) WHERE meters.seq = v.column1 AND meters.moves = v.column7"
    " AND meters.settlements = v.column8");
/* a host's mark moves where it is as read and none of its meters opened or
 * ended since (gen), and names the pass that moved it (the rows changed
 * are found by it); a first mark is made where none is */
static struct store_rows_sql marks_new_sql = STORE_ROWS_SQL(
    "INSERT INTO billing_marks (node_id, billed_until, gen, pass) SELECT v.column1, v.column2,"
    " 0, v.column5 FROM (VALUES ",
    ") AS v WHERE NOT EXISTS (SELECT 1 FROM billing_marks b WHERE b.node_id = v.column1)",
    MARK_COLUMNS,
    "INSERT INTO billing_marks (node_id, billed_until, gen, pass) SELECT v.column1, v.column2,"
    " 0, v.column5 FROM unnest(?1::text[], ?2::bigint[], ?3::bigint[], ?4::bigint[],"
    " ?5::bigint[]) AS v(column1, column2, column3, column4, column5) WHERE NOT EXISTS"
    " (SELECT 1 FROM billing_marks b WHERE b.node_id = v.column1)");
static struct store_rows_sql marks_sql = STORE_ROWS_SQL(
    "UPDATE billing_marks SET billed_until = v.column2, pass = v.column5 FROM (VALUES ",
    ") AS v WHERE billing_marks.node_id = v.column1 AND billing_marks.billed_until = v.column3"
    " AND billing_marks.gen = v.column4",
    MARK_COLUMNS,
    "UPDATE billing_marks SET billed_until = v.column2, pass = v.column5 FROM unnest(?1::text[],"
    " ?2::bigint[], ?3::bigint[], ?4::bigint[], ?5::bigint[]) AS v(column1, column2, column3,"
    " column4, column5) WHERE billing_marks.node_id = v.column1"
    " AND billing_marks.billed_until = v.column3 AND billing_marks.gen = v.column4");

/* A renter's ledger transaction, posted with the others at the end. */
struct pending_txn {
    char id[SL_ID_MAX], key[128], memo[64], account[LEDGER_ACCOUNT_MAX];
    int64_t total;
};

/* A list of rows of one statement: args point into texts the rows own
 * (a meter's ids outlive the flush, a mark's node does not). */
struct row_list {
    struct store_rows_sql *sql;
    struct db_arg *args;
    char (*texts)[SL_ID_MAX];
    size_t n, cap;
};

struct pending {
    struct row_list charges, meters, marks_new, marks;
    struct pending_txn *txns;
    size_t n_txns, cap_txns;
    int64_t now;
};

static void list_init(struct row_list *l, struct store_rows_sql *sql, size_t cap)
{
    l->sql = sql;
    l->cap = cap;
    l->args = xcalloc(cap * sql->columns + 1, sizeof(*l->args));
    l->texts = xcalloc(cap, sizeof(*l->texts));
}

/* For about `meters` meters' rows: a stop's few meters take a small
 * buffer, a pass's chunk a statement's worth (more rows are flushed). */
struct pending *pending_new(struct store *st, size_t meters)
{
    struct pending *p = xcalloc(1, sizeof(*p));
    size_t rows = store_rows_per_statement(st, &meters_sql);

    if (meters < 16)
        meters = 16;
    if (meters < rows)
        rows = meters;
    list_init(&p->charges, &charges_sql, rows);
    list_init(&p->meters, &meters_sql, rows);
    list_init(&p->marks_new, &marks_new_sql, rows);
    list_init(&p->marks, &marks_sql, rows);
    p->now = sl_time_now();
    return p;
}

void pending_freep(struct pending **p)
{
    if (*p) {
        struct row_list *lists[] = { &(*p)->charges, &(*p)->meters, &(*p)->marks_new,
                                     &(*p)->marks };
        for (size_t i = 0; i < ARRAY_SIZE(lists); i++) {
            free(lists[i]->args);
            free(lists[i]->texts);
        }
        free((*p)->txns);
    }
    free(*p);
}

/* Writes a list's rows: all of them must change a row where `guarded`. */
static int list_flush(struct store *st, struct row_list *l, bool guarded, struct sl_error *err)
{
    int64_t changed = store_write_rows(st, l->sql, l->args, l->n, err);

    if (changed < 0)
        return -1;
    if (guarded && (size_t)changed != l->n)
        return sl_fail(err, SL_E_UNAVAILABLE, "busy", "%zu of %zu meters or hosts moved: try again",
                       l->n - (size_t)changed, l->n);
    l->n = 0;
    return 0;
}

int pending_flush(struct store *st, struct pending *p, struct sl_error *err)
{
    return list_flush(st, &p->charges, false, err) < 0 ||
                   list_flush(st, &p->meters, true, err) < 0 ||
                   list_flush(st, &p->marks_new, false, err) < 0 ||
                   list_flush(st, &p->marks, false, err) < 0
               ? -1
               : 0;
}

/* The next row of l (flushing p when l is full). */
static struct db_arg *list_row(struct store *st, struct pending *p, struct row_list *l,
                               struct sl_error *err)
{
    if (l->n == l->cap && pending_flush(st, p, err) < 0)
        return NULL;
    return &l->args[l->n++ * l->sql->columns];
}

void batch_begin(struct batch *b, struct pending *rows, const char *user_id)
{
    b->rows = rows;
    snprintf(b->user_id, sizeof(b->user_id), "%s", user_id);
    b->key[0] = '\0';
    b->total = 0;
    b->count = 0;
}

int batch_add(struct batch *b, int64_t amount, struct sl_error *err, const char *key_format, ...)
{
    if (amount <= 0)
        return 0;
    if (!b->key[0]) {
        va_list ap;
        va_start(ap, key_format);
        vsnprintf(b->key, sizeof(b->key), key_format, ap);
        va_end(ap);
    }
    b->count++;
    return sl_money_add(b->total, amount, &b->total, err);
}

void batch_end(struct batch *b)
{
    struct pending *p = b->rows;

    if (b->count == 0)
        return;
    if (p->n_txns == p->cap_txns) {
        p->cap_txns = p->cap_txns ? 2 * p->cap_txns : 16;
        p->txns = xrealloc(p->txns, p->cap_txns * sizeof(*p->txns));
    }
    struct pending_txn *t = &p->txns[p->n_txns++];
    sl_id_new(t->id, "txn-");
    snprintf(t->key, sizeof(t->key), "%s", b->key);
    snprintf(t->memo, sizeof(t->memo), "usage: %" PRId64 " meter%s", b->count,
             b->count == 1 ? "" : "s");
    ledger_user_account(t->account, b->user_id);
    t->total = b->total;
}

int meter_bill_own(struct batch *b, struct meter *m, int64_t to, struct sl_error *err)
{
    int64_t was, now, owed;

    if (m->ended >= 0 && to > m->ended)
        to = m->ended;
    if (to <= m->billed)
        return 0;
    if (meter_cost(m, m->billed, &was, err) < 0 || meter_cost(m, to, &now, err) < 0 ||
        sl_money_sub(now, was, &owed, err) < 0)
        return -1;
    m->billed = m->own = to;
    m->moves++;
    return batch_add(b, owed, err, "settle:%s:%" PRId64 ":%" PRId64,
                     m->instance_id[0] ? m->instance_id : m->user_id, m->seq, m->moves);
}

static int64_t next_midnight(int64_t t)
{
    return (t / DAY + 1) * DAY;
}

int meter_close_days(struct store *st, struct pending *p, struct meter *m, struct sl_error *err)
{
    int64_t to = m->ended >= 0 && m->billed >= m->ended ? m->ended : m->billed / DAY * DAY;
    int64_t u = m->settled, c = m->charged;

    if (to <= m->settled)
        return 0;
    while (u < to) {
        int64_t step = next_midnight(u) < to ? next_midnight(u) : to, cost, owed;
        if (meter_cost(m, step, &cost, err) < 0 || sl_money_sub(cost, c, &owed, err) < 0)
            return -1;
        if (owed > 0) {
            struct db_arg *row = list_row(st, p, &p->charges, err);
            if (!row)
                return -1;
            row[0] = DB_TEXT("");
            row[1] = DB_TEXT(m->user_id);
            row[2] = DB_TEXT(m->instance_id);
            row[3] = DB_TEXT(m->item);
            row[4] = DB_INT(m->seq);
            row[5] = DB_INT(++m->settlements);
            row[6] = DB_INT(u);
            row[7] = DB_INT(step);
            row[8] = DB_INT(owed);
            row[9] = DB_INT(p->now);
        }
        u = step;
        c = cost;
    }
    m->settled = u;
    m->charged = c;
    return 1;
}

int meter_write(struct store *st, struct pending *p, const struct meter *m, int64_t moves,
                int64_t settlements, struct sl_error *err)
{
    struct db_arg *row = list_row(st, p, &p->meters, err);

    if (!row)
        return -1;
    row[0] = DB_INT(m->seq);
    row[1] = DB_INT(m->own);
    row[2] = DB_INT(m->moves);
    row[3] = DB_INT(m->settled);
    row[4] = DB_INT(m->charged);
    row[5] = DB_INT(m->settlements);
    row[6] = DB_INT(moves);
    row[7] = DB_INT(settlements);
    return 0;
}

int mark_write(struct store *st, struct pending *p, const char *node_id, int64_t was, int64_t gen,
               int64_t to, int64_t pass, struct sl_error *err)
{
    struct row_list *l = was < 0 ? &p->marks_new : &p->marks;
    struct db_arg *row = list_row(st, p, l, err);

    if (!row)
        return -1;
    char *text = l->texts[l->n - 1];
    snprintf(text, SL_ID_MAX, "%s", node_id);
    row[0] = DB_TEXT(text);
    row[1] = DB_INT(to);
    row[2] = DB_INT(was);
    row[3] = DB_INT(gen);
    row[4] = DB_INT(pass);
    return 0;
}

int mark_touch(struct store *st, const char *node_id, struct sl_error *err)
{
    if (!node_id[0])
        return 0;
    return store_exec(st,
                      "INSERT INTO billing_marks (node_id, billed_until, gen) VALUES (?1, 0, 1)"
                      " ON CONFLICT (node_id) DO UPDATE SET gen = billing_marks.gen + 1",
                      DB_ARGS(DB_TEXT(node_id)), err) < 0
               ? -1
               : 0;
}

/* Writes what p holds: the rows, then the ledger transactions. A key
 * posted before fails them all: the positions and the ledger would
 * disagree, which is never papered over. */
int pending_end(struct store *st, struct pending *p, struct sl_error *err)
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

int meter_end(struct store *st, struct meter *m, int64_t at, struct sl_error *err)
{
    if (at < m->started)
        at = m->started;
    if (at < m->billed)
        at = m->billed;
    /* where it was read: not moved alone since, nor (following) its host's
     * mark; else a pass could bill again what it takes over */
    int changed = store_exec(st,
                             "UPDATE meters SET ended_at = ?2, billed_until = ?3, moves = moves + 1"
                             " WHERE seq = ?1 AND moves = ?4"
                             " AND (?5 = 0 OR COALESCE((SELECT k.billed_until FROM billing_marks k"
                             " WHERE k.node_id = meters.node_id), -1) = ?6)",
                             DB_ARGS(DB_INT(m->seq), DB_INT(at), DB_INT(m->billed),
                                     DB_INT(m->moves), DB_INT(m->follows), DB_INT(m->mark)),
                             err);
    if (changed < 0)
        return -1;
    if (changed == 0)
        return sl_fail(err, SL_E_UNAVAILABLE, "busy", "meter %" PRId64 " moved: try again", m->seq);
    m->ended = at;
    m->own = m->billed;
    m->moves++;
    /* a pass that read it open moves its host's mark no more */
    if (m->follows && mark_touch(st, m->node_id, err) < 0)
        return -1;
    m->follows = false;
    return 0;
}

int meters_bill_alone(struct store *st, struct pending *rows, struct meter *ms, size_t n,
                      int64_t now, struct sl_error *err)
{
    struct batch b;

    if (n == 0)
        return 0;
    batch_begin(&b, rows, ms[0].user_id);
    for (size_t i = 0; i < n; i++) {
        struct meter *m = &ms[i];
        int64_t moves = m->moves, settlements = m->settlements;
        int closed;
        if (meter_bill_own(&b, m, meter_billable_until(m, now), err) < 0 ||
            (closed = meter_close_days(st, rows, m, err)) < 0 ||
            ((m->moves != moves || closed) &&
             meter_write(st, rows, m, moves, settlements, err) < 0))
            return -1;
    }
    batch_end(&b);
    return b.count > 0;
}

int meter_settle_one(struct store *st, struct meter *m, int64_t to, struct sl_error *err)
{
    cleanup_pending struct pending *rows = pending_new(st, 1);
    int64_t moves = m->moves, settlements = m->settlements;
    struct batch b;
    int closed;

    batch_begin(&b, rows, m->user_id);
    if (meter_bill_own(&b, m, to, err) < 0 || (closed = meter_close_days(st, rows, m, err)) < 0)
        return -1;
    if ((m->moves != moves || closed) && meter_write(st, rows, m, moves, settlements, err) < 0)
        return -1;
    batch_end(&b);
    return pending_end(st, rows, err);
}
