/* The settlement pass (billing.h, billing_settle_spends): first every
 * host's mark, which bills the open meters on it; then the meters billed
 * alone (renter-wide ones, and those that ended short of their end).
 * docs/design/billing.md, "Marks and days". */
#include "billing-meters.h"
#include "billing.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/crypto.h"
#include "ledger.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY SL_SEC_PER_DAY

/* Meters billed alone per store transaction in a pass: large enough that
 * the commit's fsync is amortised, small enough that API writers wait at
 * most a few tens of milliseconds behind one. */
#define SETTLE_CHUNK 5000
/* Open meters read at a time, whole hosts (nothing is held meanwhile):
 * memory, not waiting writers, bounds them */
#define READ_CHUNK 25000

/* The most meters whose whole days one pass writes as charges rows: the
 * passes after midnight share the day's rows (one per meter that ran)
 * instead of the first one writing them all: a day's row and its meter's
 * update cost 35-85 us on PostgreSQL on a 2-core machine, 100,000 of them
 * 3.5-8 s (bench/settle.sh); 50 passes write them at 100,000 meters.
 * Until then a day's open piece shows split at midnight. */
#define DAYS_PER_PASS 2000

/* The spends billing_settle_spends gathers: a renter's may come in
 * pieces (their hosts'), merged at the end. */
struct spends {
    struct billing_spend *v;
    size_t n, cap;
};

static int spend_add(struct spends *s, const struct meter *m, struct sl_error *err)
{
    int64_t rate;

    if (!s || m->ended >= 0)
        return 0;
    if (s->n == 0 || strcmp(s->v[s->n - 1].user_id, m->user_id) != 0) {
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 64;
            s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
        }
        snprintf(s->v[s->n].user_id, sizeof(s->v[s->n].user_id), "%s", m->user_id);
        s->v[s->n++].per_hour = 0;
    }
    struct billing_spend *b = &s->v[s->n - 1];
    return sl_money_per_hour(m->amount, m->period, &rate, err) < 0 ||
                   sl_money_add(b->per_hour, rate, &b->per_hour, err) < 0
               ? -1
               : 0;
}

static int by_spender(const void *a, const void *b)
{
    return strcmp(((const struct billing_spend *)a)->user_id,
                  ((const struct billing_spend *)b)->user_id);
}

static int spends_merge(struct spends *s, struct sl_error *err)
{
    size_t out = 0;

    if (s->n == 0)
        return 0;
    qsort(s->v, s->n, sizeof(*s->v), by_spender);
    for (size_t i = 0; i < s->n; i++) {
        if (out > 0 && strcmp(s->v[out - 1].user_id, s->v[i].user_id) == 0) {
            if (sl_money_add(s->v[out - 1].per_hour, s->v[i].per_hour, &s->v[out - 1].per_hour,
                             err) < 0)
                return -1;
        } else {
            s->v[out++] = s->v[i];
        }
    }
    s->n = out;
    return 0;
}

static int by_user(const void *a, const void *b)
{
    const struct meter *x = a, *y = b;
    int c = strcmp(x->user_id, y->user_id);

    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* What a pass learns of the hosts while it reads their open meters,
 * before it writes anything: the reading takes most of a pass and holds
 * no lock; the writing (a mark per host, a ledger transaction per renter,
 * the days' rows) is one short store transaction at the end, so that a
 * renter's amounts of all hosts are one transaction (in chunks of hosts
 * they were one per renter and chunk: 20 times the ledger's rows). */
struct host_move {
    char node_id[SL_ID_MAX];
    int64_t was, gen, to; /* its mark as read (-1: none) and its gen; where it goes */
    bool moved;           /* its mark moved in the write */
};

/* An amount a host's move bills a renter (one per meter with one). */
struct host_owed {
    char user_id[SL_ID_MAX];
    size_t host;
    int64_t owed;
};

struct host_pass {
    struct host_move *hosts;
    size_t n_hosts, cap_hosts;
    struct host_owed *owed;
    size_t n_owed, cap_owed;
    struct meter *days; /* meters whose whole days to write, billed where the move takes them */
    size_t *days_host;
    size_t n_days, cap_days;
    int64_t pass; /* names this pass's marks */
};

static void host_pass_release(struct host_pass *hp)
{
    free(hp->hosts);
    free(hp->owed);
    free(hp->days);
    free(hp->days_host);
}

#define GROW(v, n, cap)                                                                            \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? 2 * (cap) : 256;                                                       \
            (v) = xrealloc((v), (cap) * sizeof(*(v)));                                             \
        }                                                                                          \
    } while (0)

/* A host's open meters (ms[0..n), read together): where its mark goes,
 * what that bills each meter, which have whole days to write. */
static int host_read(struct host_pass *hp, struct meter *ms, size_t n, int64_t now,
                     struct spends *spends, struct sl_error *err)
{
    int64_t was = ms[0].mark, to = now < ms[0].heartbeat ? now : ms[0].heartbeat;
    bool days = false;
    size_t h = hp->n_hosts;

    if (to < was)
        to = was;
    for (size_t i = 0; i < n; i++) {
        struct meter *m = &ms[i];
        int64_t billed = to > m->own ? to : m->own, before, after;
        if (spend_add(spends, m, err) < 0)
            return -1;
        if (billed > m->billed) {
            if (meter_cost(m, m->billed, &before, err) < 0 ||
                meter_cost(m, billed, &after, err) < 0)
                return -1;
            GROW(hp->owed, hp->n_owed, hp->cap_owed);
            struct host_owed *o = &hp->owed[hp->n_owed++];
            snprintf(o->user_id, sizeof(o->user_id), "%s", m->user_id);
            o->host = h;
            if (sl_money_sub(after, before, &o->owed, err) < 0)
                return -1;
            m->billed = billed;
        }
        if (hp->n_days < DAYS_PER_PASS && m->billed / DAY * DAY > m->settled) {
            if (hp->n_days == hp->cap_days) {
                hp->cap_days = hp->cap_days ? 2 * hp->cap_days : 256;
                hp->days = xrealloc(hp->days, hp->cap_days * sizeof(*hp->days));
                hp->days_host = xrealloc(hp->days_host, hp->cap_days * sizeof(*hp->days_host));
            }
            hp->days[hp->n_days] = *m;
            hp->days_host[hp->n_days++] = h;
            days = true;
        }
    }
    if (to == was && !days)
        return 0; /* nothing to write */
    GROW(hp->hosts, hp->n_hosts, hp->cap_hosts);
    struct host_move *hm = &hp->hosts[hp->n_hosts++];
    snprintf(hm->node_id, sizeof(hm->node_id), "%s", ms[0].node_id);
    hm->was = was;
    hm->gen = ms[0].gen;
    hm->to = to;
    hm->moved = false;
    return 0;
}

/* The host at which a chunk after `after` ends (its meters all in it):
 * "" when the rest fits. */
static int chunk_end(struct store *st, const char *after, char *last, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT node_id FROM meters WHERE ended_at IS NULL AND node_id > ?1"
                    " ORDER BY node_id LIMIT 1 OFFSET ?2",
                    DB_ARGS(DB_TEXT(after), DB_INT(READ_CHUNK - 1)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    snprintf(last, SL_ID_MAX, "%s", rc ? db_text(rows, 0) : "");
    return 0;
}

/* Reads every host's open meters, a chunk of hosts at a time. */
static int hosts_read(struct store *st, struct host_pass *hp, int64_t now,
                      struct billing_stats *stats, struct spends *spends, struct sl_error *err)
{
    char after[SL_ID_MAX] = "", last[SL_ID_MAX];
    size_t n;

    do {
        if (chunk_end(st, after, last, err) < 0)
            return -1;
        cleanup_free struct meter *ms =
            last[0] ? meters_load(st,
                                  "SELECT " HOST_METER_COLUMNS HOST_METER_FROM
                                  " WHERE m.ended_at IS NULL AND m.node_id > ?1"
                                  " AND m.node_id <= ?2 ORDER BY m.node_id, m.seq",
                                  DB_ARGS(DB_TEXT(after), DB_TEXT(last)), &n, err)
                    : meters_load(st,
                                  "SELECT " HOST_METER_COLUMNS HOST_METER_FROM
                                  " WHERE m.ended_at IS NULL AND m.node_id > ?1"
                                  " ORDER BY m.node_id, m.seq",
                                  DB_ARGS(DB_TEXT(after)), &n, err);
        if (!ms)
            return -1;
        for (size_t i = 0, j; i < n; i = j) {
            for (j = i; j < n && strcmp(ms[j].node_id, ms[i].node_id) == 0; j++)
                ;
            if (host_read(hp, ms + i, j - i, now, spends, err) < 0)
                return -1;
        }
        stats->meters += (int64_t)n;
        if (n)
            snprintf(after, sizeof(after), "%s", ms[n - 1].node_id);
    } while (last[0] && n);
    return 0;
}

static int by_node(const void *a, const void *b)
{
    return strcmp((*(struct host_move *const *)a)->node_id,
                  (*(struct host_move *const *)b)->node_id);
}

/* Marks which hosts' marks this pass moved (the others had a meter open
 * or end since they were read, or another pass moved them: they wait for
 * the next pass). */
static int hosts_moved(struct store *st, struct host_pass *hp, struct sl_error *err)
{
    cleanup_free struct host_move **by = xcalloc(hp->n_hosts + 1, sizeof(*by));
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT node_id FROM billing_marks WHERE pass = ?1", DB_ARGS(DB_INT(hp->pass)), err);
    int rc;

    if (!rows)
        return -1;
    /* in strcmp's order, which need not be the store's collation */
    for (size_t i = 0; i < hp->n_hosts; i++)
        by[i] = &hp->hosts[i];
    qsort(by, hp->n_hosts, sizeof(*by), by_node);
    while ((rc = db_next(rows, err)) == 1) {
        struct host_move key, *k = &key, **hm;
        snprintf(key.node_id, sizeof(key.node_id), "%s", db_text(rows, 0));
        hm = bsearch(&k, by, hp->n_hosts, sizeof(*by), by_node);
        if (hm)
            (*hm)->moved = true;
    }
    return rc < 0 ? -1 : 0;
}

static int by_owed_user(const void *a, const void *b)
{
    const struct host_owed *x = a, *y = b;
    int c = strcmp(x->user_id, y->user_id);

    return c ? c : (x->host > y->host) - (x->host < y->host);
}

/* The marks, then a ledger transaction per renter of what the hosts that
 * moved billed them, keyed by the first such host's move (a host reaches
 * a mark once), then the days' rows of those hosts' meters. */
static int hosts_write(struct store *st, struct host_pass *hp, struct billing_stats *stats,
                       struct sl_error *err)
{
    if (hp->n_hosts == 0)
        return 0;

    cleanup_tx struct store *tx = NULL;
    cleanup_pending struct pending *rows = pending_new(st, hp->n_hosts + hp->n_days);
    struct batch b;

    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    for (size_t i = 0; i < hp->n_hosts; i++) {
        const struct host_move *hm = &hp->hosts[i];
        if (mark_write(st, rows, hm->node_id, hm->was, hm->gen, hm->to, hp->pass, err) < 0)
            return -1;
    }
    if (pending_flush(st, rows, err) < 0 || hosts_moved(st, hp, err) < 0)
        return -1;
    if (hp->n_owed)
        qsort(hp->owed, hp->n_owed, sizeof(*hp->owed), by_owed_user);
    for (size_t i = 0, j; i < hp->n_owed; i = j) {
        batch_begin(&b, rows, hp->owed[i].user_id);
        for (j = i; j < hp->n_owed && strcmp(hp->owed[j].user_id, hp->owed[i].user_id) == 0; j++) {
            const struct host_move *hm = &hp->hosts[hp->owed[j].host];
            if (hm->moved && batch_add(&b, hp->owed[j].owed, err, "settle:@%s:%" PRId64 ":%s",
                                       hm->node_id, hm->to, hp->owed[j].user_id) < 0)
                return -1;
        }
        stats->settlements += b.count > 0;
        batch_end(&b);
    }
    for (size_t i = 0; i < hp->n_days; i++) {
        struct meter *m = &hp->days[i];
        int64_t settlements = m->settlements;
        int closed;
        if (!hp->hosts[hp->days_host[i]].moved)
            continue;
        if ((closed = meter_close_days(st, rows, m, err)) < 0 ||
            (closed && meter_write(st, rows, m, m->moves, settlements, err) < 0))
            return -1;
    }
    if (pending_end(st, rows, err) < 0 || store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

static void (*between_hook)(void *ctx);
static void *between_ctx;

void billing_settle_between(void (*fn)(void *ctx), void *ctx)
{
    between_hook = fn;
    between_ctx = ctx;
}

static int settle_hosts(struct store *st, int64_t now, struct billing_stats *stats,
                        struct spends *spends, struct sl_error *err)
{
    struct host_pass hp = { 0 };
    char token[2 * 8 + 1];

    sl_random_hex(token, 8);
    hp.pass = (int64_t)(strtoull(token, NULL, 16) & INT64_MAX);
    int rc = hosts_read(st, &hp, now, stats, spends, err);
    if (rc == 0 && between_hook)
        between_hook(between_ctx);
    if (rc == 0)
        rc = hosts_write(st, &hp, stats, err);
    host_pass_release(&hp);
    return rc;
}

/* One chunk of meters billed alone, sorted by renter. */
static int settle_own_chunk(struct store *st, struct meter *ms, size_t n, int64_t now,
                            struct billing_stats *stats, struct spends *spends,
                            struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;
    cleanup_pending struct pending *rows = pending_new(st, n);

    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i; j < n && strcmp(ms[j].user_id, ms[i].user_id) == 0; j++)
            if (spend_add(spends, &ms[j], err) < 0)
                return -1;
        int billed = meters_bill_alone(st, rows, ms + i, j - i, now, err);
        if (billed < 0)
            return -1;
        stats->settlements += billed;
    }
    if (pending_end(st, rows, err) < 0)
        return -1;
    stats->meters += (int64_t)n;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

/* Renter-wide open meters, renter by renter; then what ended and is not
 * billed and written to its end yet (its host had not reported that far,
 * or its last day was not written). */
static int settle_own(struct store *st, int64_t now, struct billing_stats *stats,
                      struct spends *spends, struct sl_error *err)
{
    int64_t after_seq = 0;
    char after_user[SL_ID_MAX] = "";
    size_t n;

    do {
        cleanup_free struct meter *ms = meters_load(
            st,
            "SELECT " METER_COLUMNS METER_FROM
            " WHERE m.instance_id = '' AND m.ended_at IS NULL AND (m.user_id, m.seq) > (?1, ?2)"
            " ORDER BY m.user_id, m.seq LIMIT ?3",
            DB_ARGS(DB_TEXT(after_user), DB_INT(after_seq), DB_INT(SETTLE_CHUNK)), &n, err);
        if (!ms)
            return -1;
        if (n) {
            snprintf(after_user, sizeof(after_user), "%s", ms[n - 1].user_id);
            after_seq = ms[n - 1].seq;
        }
        if (settle_own_chunk(st, ms, n, now, stats, spends, err) < 0)
            return -1;
    } while (n == SETTLE_CHUNK);
    after_seq = 0;
    do {
        cleanup_free struct meter *ms = meters_load(
            st,
            "SELECT " METER_COLUMNS METER_FROM " WHERE m.unsettled = 1 AND m.ended_at IS NOT NULL"
            " AND m.settled_until < m.ended_at AND m.seq > ?1"
            " ORDER BY m.seq LIMIT ?2",
            DB_ARGS(DB_INT(after_seq), DB_INT(SETTLE_CHUNK)), &n, err);
        if (!ms)
            return -1;
        if (n)
            after_seq = ms[n - 1].seq;
        qsort(ms, n, sizeof(*ms), by_user);
        if (settle_own_chunk(st, ms, n, now, stats, NULL, err) < 0)
            return -1;
    } while (n == SETTLE_CHUNK);
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
    int64_t now = sl_time_now();

    if (ledger_open_account(st, BILLING_REVENUE_ACCOUNT, NULL, err) < 0 ||
        settle_hosts(st, now, stats, spends, err) < 0 ||
        settle_own(st, now, stats, spends, err) < 0 || (spends && spends_merge(spends, err) < 0)) {
        free(gathered.v);
        return -1;
    }
    if (spends_out) {
        *spends_out = gathered.v ? gathered.v : xcalloc(1, sizeof(**spends_out));
        *n_spends = gathered.n;
    }
    return 0;
}
