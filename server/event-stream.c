/* The console's live updates (event-stream.h). */
#include "event-stream.h"

#include "instance-view.h"
#include "ledger.h"
#include "routes.h"
#include "store.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often the thread looks when no commit woke it. */
#define TICK_MS 500
/* Rows one round reads per stream and kind; a stream behind by more
 * continues in the next round. */
#define ROUND_LIMIT 100
/* A client that reads this far behind is cut off; it resumes from its last
 * id when it reconnects, so nothing is lost. */
#define BUFFER_MAX (1 << 20)

struct event_stream {
    struct event_stream *next;
    struct event_streams *hub;
    int refs; /* the transport's, and the thread's while a round holds it; under lock */
    char user_id[SL_ID_MAX];
    char token_id[SL_ID_MAX];
    /* the thread's alone */
    struct event_cursor cur;
    bool fresh;   /* not yet seen by the thread */
    bool from_id; /* fresh from a Last-Event-ID */
    bool more;    /* a round stopped at ROUND_LIMIT */
    int64_t last_write_ms;
    /* under lock */
    struct sl_buf out;
    size_t off;
    bool waiting; /* parked: wake_fn(wake_ctx) is due when something comes */
    bool ending;  /* read what is left, then the end */
    bool closed;  /* the transport let go */
    void (*wake_fn)(void *ctx);
    bool (*alive_fn)(void *ctx);
    void *wake_ctx;
};

struct event_streams {
    struct server *srv;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct event_stream *list; /* under lock */
    bool changed, added, stopping;
    struct event_cursor seen; /* the thread's: the newest rows looked at */
};

int event_cursor_parse(const char *text, struct event_cursor *c, struct sl_error *err)
{
    int64_t v[3];
    const char *p = text;

    for (int i = 0; i < 3; i++) {
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n > 18 || (i < 2 ? p[n] != '.' : p[n] != '\0'))
            return sl_fail(err, SL_E_INVALID, "invalid_last_event_id",
                           "Last-Event-ID must be an id this stream sent (three numbers joined "
                           "by dots, such as 12.3.40); leave it out to start from now");
        v[i] = strtoll(p, NULL, 10);
        p += n + 1;
    }
    *c = (struct event_cursor){ .event_seq = v[0], .instance_rev = v[1], .ledger_seq = v[2] };
    return 0;
}

static void unref_locked(struct event_stream *st)
{
    if (--st->refs > 0)
        return;
    struct event_stream **pp = &st->hub->list;
    while (*pp && *pp != st)
        pp = &(*pp)->next;
    if (*pp)
        *pp = st->next;
    sl_buf_release(&st->out);
    free(st);
}

/* The user's streams that count against the limit. At the limit, those
 * whose clients have gone are ended first (added to *gone, to be woken
 * once the lock is let go). */
static int64_t count_open(struct event_streams *hub, const char *user_id, int64_t max,
                          struct event_stream **gone, size_t *n_gone)
{
    int64_t open = 0;

    for (struct event_stream *s = hub->list; s; s = s->next)
        open += !s->closed && !s->ending && strcmp(s->user_id, user_id) == 0;
    if (open < max)
        return open;
    open = 0;
    for (struct event_stream *s = hub->list; s; s = s->next) {
        if (s->closed || s->ending || strcmp(s->user_id, user_id) != 0)
            continue;
        if (s->alive_fn(s->wake_ctx)) {
            open++;
            continue;
        }
        s->ending = true;
        if (s->waiting && *n_gone < (size_t)max) {
            s->waiting = false;
            gone[(*n_gone)++] = s;
        }
    }
    return open;
}

struct event_stream *event_stream_open(struct event_streams *hub, const char *user_id,
                                       const char *token_id, const struct event_cursor *from,
                                       void (*resume)(void *ctx), bool (*alive)(void *ctx),
                                       void *ctx, struct sl_error *err)
{
    int64_t max = hub->srv->cfg.events_max_streams_per_user, open;
    cleanup_free struct event_stream **gone = xcalloc((size_t)max, sizeof(*gone));
    size_t n_gone = 0;

    pthread_mutex_lock(&hub->lock);
    if (hub->stopping) {
        pthread_mutex_unlock(&hub->lock);
        sl_fail(err, SL_E_UNAVAILABLE, "stopping", "the server is stopping: reconnect shortly");
        return NULL;
    }
    open = count_open(hub, user_id, max, gone, &n_gone);
    pthread_mutex_unlock(&hub->lock);
    /* parked, and un-parked by this thread only: their connections stand */
    for (size_t i = 0; i < n_gone; i++)
        gone[i]->wake_fn(gone[i]->wake_ctx);
    pthread_mutex_lock(&hub->lock);
    if (hub->stopping) {
        pthread_mutex_unlock(&hub->lock);
        sl_fail(err, SL_E_UNAVAILABLE, "stopping", "the server is stopping: reconnect shortly");
        return NULL;
    }
    /* counted again: others may have opened meanwhile */
    open = 0;
    for (struct event_stream *s = hub->list; s; s = s->next)
        open += !s->closed && !s->ending && strcmp(s->user_id, user_id) == 0;
    if (open >= max) {
        pthread_mutex_unlock(&hub->lock);
        sl_fail(err, SL_E_RATE_LIMITED, "too_many_streams",
                "you have %" PRId64 " event streams open, the most one user may "
                "(events.max_streams_per_user): close another console tab or stream and retry",
                open);
        return NULL;
    }
    struct event_stream *st = xzalloc(sizeof(*st));
    st->hub = hub;
    st->refs = 1; /* in the list until the last reference goes */
    snprintf(st->user_id, sizeof(st->user_id), "%s", user_id);
    snprintf(st->token_id, sizeof(st->token_id), "%s", token_id);
    st->fresh = true;
    st->from_id = from != NULL;
    if (from)
        st->cur = *from;
    st->last_write_ms = sl_time_mono_ms();
    sl_buf_init(&st->out);
    st->wake_fn = resume;
    st->alive_fn = alive;
    st->wake_ctx = ctx;
    st->next = hub->list;
    hub->list = st;
    hub->added = true;
    pthread_cond_signal(&hub->cond);
    pthread_mutex_unlock(&hub->lock);
    return st;
}

ssize_t event_stream_read(struct event_stream *st, char *buf, size_t max)
{
    struct event_streams *hub = st->hub;
    ssize_t n = 0;

    pthread_mutex_lock(&hub->lock);
    size_t left = st->out.len - st->off;
    if (left > 0) {
        n = (ssize_t)(left < max ? left : max);
        memcpy(buf, st->out.data + st->off, (size_t)n);
        st->off += (size_t)n;
        if (st->off == st->out.len) {
            st->out.len = 0;
            st->off = 0;
        }
    } else if (st->ending) {
        n = -1;
    }
    pthread_mutex_unlock(&hub->lock);
    return n;
}

bool event_stream_park(struct event_stream *st)
{
    struct event_streams *hub = st->hub;
    bool ready;

    pthread_mutex_lock(&hub->lock);
    ready = st->out.len > st->off || st->ending;
    st->waiting = !ready;
    pthread_mutex_unlock(&hub->lock);
    return ready;
}

void event_stream_close(struct event_stream *st)
{
    struct event_streams *hub = st->hub;

    pthread_mutex_lock(&hub->lock);
    st->closed = true;
    st->waiting = false;
    unref_locked(st);
    pthread_mutex_unlock(&hub->lock);
}

void event_streams_wake(void *p)
{
    struct event_streams *hub = p;

    pthread_mutex_lock(&hub->lock);
    hub->changed = true;
    pthread_cond_signal(&hub->cond);
    pthread_mutex_unlock(&hub->lock);
}

/* The newest event, instance revision and ledger entry of all users. */
static int newest(struct store *store, struct event_cursor *c, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(store,
                    "SELECT (SELECT COALESCE(MAX(seq), 0) FROM events),"
                    " (SELECT COALESCE(MAX(rev), 0) FROM instance_revisions),"
                    " (SELECT COALESCE(MAX(seq), 0) FROM ledger_entries)",
                    DB_NO_ARGS, err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_INTERNAL, NULL, "no row from the newest-change query");
    *c = (struct event_cursor){ db_int(rows, 0), db_int(rows, 1), db_int(rows, 2) };
    return 0;
}

/* Adds to users (a set: {user id: true}) the users of rows after `after`. */
static int users_since(struct store *store, const char *sql, int64_t after, json_t *users,
                       struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(store, sql, DB_ARGS(DB_INT(after)), err);
    int rc;

    while (rows && (rc = db_next(rows, err)) == 1)
        json_object_set_new(users, db_text(rows, 0), json_true());
    return rows && rc == 0 ? 0 : -1;
}

/* {user id: true} of the users something happened to since hub->seen. */
static json_t *changed_users(struct event_streams *hub, struct sl_error *err)
{
    struct store *store = hub->srv->store;
    cleanup_json json_t *users = json_object();

    if (users_since(store, "SELECT DISTINCT user_id FROM events WHERE seq > ?1",
                    hub->seen.event_seq, users, err) < 0 ||
        users_since(store, "SELECT DISTINCT user_id FROM instance_revisions WHERE rev > ?1",
                    hub->seen.instance_rev, users, err) < 0 ||
        users_since(store,
                    "SELECT DISTINCT a.user_id FROM ledger_entries e"
                    " JOIN accounts a ON a.id = e.account_id"
                    " WHERE e.seq > ?1 AND a.user_id IS NOT NULL",
                    hub->seen.ledger_seq, users, err) < 0)
        return NULL;
    return TAKE_PTR(users);
}

/* The user's newest event, instance revision and ledger entry: where a
 * stream without a Last-Event-ID starts. */
static int newest_of(struct store *store, const char *user_id, struct event_cursor *c,
                     struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX];
    cleanup_rows struct db_rows *rows =
        store_query(store,
                    "SELECT (SELECT COALESCE(MAX(seq), 0) FROM events WHERE user_id = ?1),"
                    " (SELECT COALESCE(MAX(rev), 0) FROM instance_revisions WHERE user_id = ?1),"
                    " (SELECT COALESCE(MAX(seq), 0) FROM ledger_entries WHERE account_id = ?2)",
                    DB_ARGS(DB_TEXT(user_id), DB_TEXT(ledger_user_account(account, user_id))), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_INTERNAL, NULL, "no row from the user's newest-change query");
    *c = (struct event_cursor){ db_int(rows, 0), db_int(rows, 1), db_int(rows, 2) };
    return 0;
}

/* Whether the stream's credential still stands (not revoked, not expired):
 * 1, 0, or -1 on a store error. */
static int token_valid(struct store *store, const char *token_id, struct sl_error *err)
{
    int64_t one;

    return store_get_int(store,
                         "SELECT 1 FROM tokens WHERE id = ?1"
                         " AND (expires_at IS NULL OR expires_at > ?2)",
                         DB_ARGS(DB_TEXT(token_id), DB_INT(sl_time_now())), &one, err);
}

static void add_message(struct sl_buf *out, const char *type, const struct event_cursor *id,
                        json_t *data)
{
    char *text = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII);

    sl_buf_addf(out, "event: %s\nid: %" PRId64 ".%" PRId64 ".%" PRId64 "\ndata: %s\n\n", type,
                id->event_seq, id->instance_rev, id->ledger_seq, text ? text : "null");
    free(text);
}

static int add_events(struct server *srv, struct event_stream *st, struct sl_buf *out,
                      struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT seq, instance_id, kind, state, reason, message, created_at FROM events"
        " WHERE user_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        DB_ARGS(DB_TEXT(st->user_id), DB_INT(st->cur.event_seq), DB_INT(ROUND_LIMIT)), err);
    int rc, n = 0;

    while (rows && (rc = db_next(rows, err)) == 1) {
        cleanup_json json_t *j = api_event_json(rows, NULL);
        st->cur.event_seq = db_int(rows, 0);
        add_message(out, "event", &st->cur, j);
        n++;
    }
    if (!rows || rc < 0)
        return -1;
    st->more |= n == ROUND_LIMIT;
    return 0;
}

int event_instance_changes(struct store *store, const char *user_id, int64_t after, int limit,
                           struct instance_change **out, size_t *n, struct sl_error *err)
{
    /* the limit-th row's revision bounds the round, so that every row of
     * that revision comes along: past the limit when several share it */
    cleanup_rows struct db_rows *rows = store_query(
        store,
        "SELECT instance_id, rev FROM instance_revisions WHERE user_id = ?1 AND rev > ?2"
        " AND rev <= COALESCE((SELECT rev FROM instance_revisions WHERE user_id = ?1"
        " AND rev > ?2 ORDER BY rev LIMIT 1 OFFSET ?3), ?4)"
        " ORDER BY rev, instance_id",
        DB_ARGS(DB_TEXT(user_id), DB_INT(after), DB_INT(limit - 1), DB_INT(INT64_MAX)), err);
    size_t cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    while (rows && (rc = db_next(rows, err)) == 1) {
        if (*n == cap) {
            cap = cap ? 2 * cap : (size_t)limit;
            *out = xrealloc(*out, cap * sizeof(**out));
        }
        struct instance_change *c = &(*out)[(*n)++];
        snprintf(c->id, sizeof(c->id), "%s", db_text(rows, 0));
        c->rev = db_int(rows, 1);
    }
    if (rows && rc == 0)
        return 0;
    free(*out);
    *out = NULL;
    *n = 0;
    return -1;
}

static int add_instances(struct server *srv, struct event_stream *st, struct sl_buf *out,
                         struct sl_error *err)
{
    cleanup_free struct instance_change *changes = NULL;
    size_t n;

    if (event_instance_changes(srv->store, st->user_id, st->cur.instance_rev, ROUND_LIMIT, &changes,
                               &n, err) < 0)
        return -1;
    st->more |= n >= ROUND_LIMIT;
    for (size_t i = 0; i < n; i++) {
        /* the owner's view, exactly as GET /v1/instances/{id} gives it */
        cleanup_json json_t *j = instance_json(srv, changes[i].id, st->user_id, err);
        if (!j && err->kind != SL_E_NOT_FOUND)
            return -1;
        sl_error_clear(err);
        /* several instances may share a revision (one statement bumped
         * them): the id moves past it with the last of them, which the
         * round always holds */
        int64_t rev = changes[i].rev;
        st->cur.instance_rev = i + 1 < n && changes[i + 1].rev == rev ? rev - 1 : rev;
        if (j)
            add_message(out, "instance", &st->cur, j);
    }
    return 0;
}

/* The instances charged by the renter's ledger entries after `after`:
 * those a plan's charges name, and after a usage transaction (settle:...,
 * which names no rows: billing-settle.c) those whose meters are open or
 * not billed to their end. A settlement bumps no revision (revisions for
 * 100,000 meters cost a pass 0.6 s), so their new charged_micros comes
 * with the balance that paid it. */
static int add_charged(struct server *srv, struct event_stream *st, const char *account,
                       int64_t after, struct sl_buf *out, struct sl_error *err)
{
    cleanup_free char(*ids)[SL_ID_MAX] = NULL;
    size_t n = 0, cap = 0;
    int rc;

    {
        cleanup_rows struct db_rows *rows =
            store_query(srv->store,
                        "SELECT c.instance_id FROM ledger_entries e"
                        " JOIN charges c ON c.txn_id = e.txn_id"
                        " WHERE e.account_id = ?1 AND e.seq > ?2 AND c.instance_id != ''"
                        " UNION SELECT m.instance_id FROM meters m"
                        " WHERE m.instance_id != '' AND EXISTS (SELECT 1 FROM ledger_entries e"
                        " JOIN ledger_txns t ON t.id = e.txn_id WHERE e.account_id = ?1"
                        " AND e.seq > ?2 AND t.idempotency_key LIKE 'settle:%')"
                        " AND ((m.user_id = ?3 AND m.ended_at IS NULL)"
                        " OR (m.unsettled = 1 AND m.user_id = ?3))",
                        DB_ARGS(DB_TEXT(account), DB_INT(after), DB_TEXT(st->user_id)), err);
        while (rows && (rc = db_next(rows, err)) == 1) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                ids = xrealloc(ids, cap * SL_ID_MAX);
            }
            snprintf(ids[n++], SL_ID_MAX, "%s", db_text(rows, 0));
        }
        if (!rows || rc < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++) {
        cleanup_json json_t *j = instance_json(srv, ids[i], st->user_id, err);
        if (!j && err->kind != SL_E_NOT_FOUND)
            return -1;
        sl_error_clear(err);
        if (j)
            add_message(out, "instance", &st->cur, j);
    }
    return 0;
}

static int add_balance(struct server *srv, struct event_stream *st, struct sl_buf *out,
                       struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX];
    int64_t seq, balance;
    int rc;

    ledger_user_account(account, st->user_id);
    {
        cleanup_rows struct db_rows *rows =
            store_query(srv->store,
                        "SELECT seq, balance_after_micros FROM ledger_entries"
                        " WHERE account_id = ?1 AND seq > ?2 ORDER BY seq DESC LIMIT 1",
                        DB_ARGS(DB_TEXT(account), DB_INT(st->cur.ledger_seq)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            return 0;
        seq = db_int(rows, 0);
        balance = db_int(rows, 1);
    }
    /* the instances first, at the old ledger id: a reconnect from any of
     * them sends them again, never loses one */
    if (add_charged(srv, st, account, st->cur.ledger_seq, out, err) < 0)
        return -1;
    cleanup_json json_t *j = json_pack("{s:I}", "balance_micros", (json_int_t)balance);
    st->cur.ledger_seq = seq;
    add_message(out, "balance", &st->cur, j);
    return 0;
}

/* A stream opened without Last-Event-ID begins with the state now: each
 * instance not released and the balance (a client that read its lists
 * before opening the stream misses nothing in between; one that did not
 * needs no lists). At the user's newest ids: what changes meanwhile comes
 * again after, never not at all. */
static int add_snapshot(struct server *srv, struct event_stream *st, struct sl_buf *out,
                        struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX];
    int64_t limit = srv->cfg.page_size_max, balance, n = 0;
    cleanup_free char(*ids)[SL_ID_MAX] = xcalloc((size_t)limit, SL_ID_MAX);
    int rc;

    {
        cleanup_rows struct db_rows *rows =
            store_query(srv->store,
                        "SELECT id FROM instances WHERE user_id = ?1 AND state != 'released'"
                        " ORDER BY seq LIMIT ?2",
                        DB_ARGS(DB_TEXT(st->user_id), DB_INT(limit)), err);
        while (rows && (rc = db_next(rows, err)) == 1)
            snprintf(ids[n++], SL_ID_MAX, "%s", db_text(rows, 0));
        if (!rows || rc < 0)
            return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        cleanup_json json_t *j = instance_json(srv, ids[i], st->user_id, err);
        if (!j && err->kind != SL_E_NOT_FOUND)
            return -1;
        sl_error_clear(err);
        if (j)
            add_message(out, "instance", &st->cur, j);
    }
    if (ledger_balance(srv->store, ledger_user_account(account, st->user_id), &balance, err) < 0)
        return -1;
    cleanup_json json_t *j = json_pack("{s:I}", "balance_micros", (json_int_t)balance);
    add_message(out, "balance", &st->cur, j);
    return 0;
}

/* What is due to one stream this round, into out. */
static void stream_round(struct event_streams *hub, struct event_stream *st,
                         const struct event_cursor *now, json_t *users, struct sl_buf *out)
{
    struct sl_error err = SL_ERROR_INIT;
    bool look = st->more || (users && json_object_get(users, st->user_id));

    if (st->fresh) {
        if (!st->from_id) {
            if (newest_of(hub->srv->store, st->user_id, &st->cur, &err) < 0) {
                log_warn("event stream of '%s': %s", st->user_id, err.message);
                return; /* fresh still: the next round tries again */
            }
        } else {
            /* an id from another database, or the future: nothing to replay */
            if (st->cur.event_seq > now->event_seq)
                st->cur.event_seq = now->event_seq;
            if (st->cur.instance_rev > now->instance_rev)
                st->cur.instance_rev = now->instance_rev;
            if (st->cur.ledger_seq > now->ledger_seq)
                st->cur.ledger_seq = now->ledger_seq;
            look = true;
        }
        st->fresh = false;
        sl_buf_addf(out, "retry: 3000\nid: %" PRId64 ".%" PRId64 ".%" PRId64 "\n\n",
                    st->cur.event_seq, st->cur.instance_rev, st->cur.ledger_seq);
        if (!st->from_id && add_snapshot(hub->srv, st, out, &err) < 0) {
            /* the stream goes on; the next change of each brings it */
            log_warn("event stream of '%s': %s", st->user_id, err.message);
            sl_error_clear(&err);
        }
    }
    if (!look)
        return;
    st->more = false;
    if (add_events(hub->srv, st, out, &err) < 0 || add_instances(hub->srv, st, out, &err) < 0 ||
        add_balance(hub->srv, st, out, &err) < 0) {
        /* what was written stands; the rest comes in a later round */
        log_warn("event stream of '%s': %s", st->user_id, err.message);
        st->more = true;
    }
}

static void round_all(struct event_streams *hub, struct event_stream **streams, size_t n)
{
    struct sl_error err = SL_ERROR_INIT;
    struct event_cursor now;
    cleanup_json json_t *users = NULL;
    int64_t ms = sl_time_mono_ms();
    bool ok = newest(hub->srv->store, &now, &err) == 0;

    if (!ok) {
        log_warn("event streams: %s", err.message);
    } else if (n == 0) {
        hub->seen = now; /* no one to tell */
    } else if (memcmp(&now, &hub->seen, sizeof(now)) != 0) {
        /* read after the newest: a row committed meanwhile is in both */
        users = changed_users(hub, &err);
        if (!users) {
            log_warn("event streams: %s", err.message);
            ok = false;
        } else {
            hub->seen = now;
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct event_stream *st = streams[i];
        cleanup_buf struct sl_buf out = SL_BUF_INIT;
        if (ok)
            stream_round(hub, st, &now, users, &out);
        if (out.len == 0 && ms - st->last_write_ms >= EVENT_STREAM_KEEPALIVE_S * SL_MSEC_PER_SEC)
            sl_buf_adds(&out, ": keep-alive\n\n");
        if (out.len == 0)
            continue;
        st->last_write_ms = ms;
        /* a revoked session or token (logout, suanli token rm) or an expired
         * one hears nothing more: the stream ends */
        int valid = token_valid(hub->srv->store, st->token_id, &err);
        if (valid < 0) {
            log_warn("event stream of '%s': %s", st->user_id, err.message);
            sl_error_clear(&err);
            continue;
        }
        void (*wake)(void *) = NULL;
        void *ctx = NULL;
        pthread_mutex_lock(&hub->lock);
        if (!st->closed && !st->ending) {
            if (!valid) {
                st->ending = true;
            } else if (st->out.len - st->off + out.len > BUFFER_MAX) {
                log_info("event stream of '%s': the client reads too slowly, ending it",
                         st->user_id);
                st->ending = true;
            } else {
                sl_buf_add(&st->out, out.data, out.len);
            }
            if (st->waiting) {
                st->waiting = false;
                wake = st->wake_fn;
                ctx = st->wake_ctx;
            }
        }
        pthread_mutex_unlock(&hub->lock);
        /* still parked, and only this thread un-parks it: safe unlocked */
        if (wake)
            wake(ctx);
    }
}

static void wait_tick(struct event_streams *hub)
{
    struct timespec until;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += TICK_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!hub->changed && !hub->added && !hub->stopping &&
           pthread_cond_timedwait(&hub->cond, &hub->lock, &until) == 0)
        ;
}

static void *streams_thread(void *p)
{
    struct event_streams *hub = p;
    struct event_stream **held = NULL;
    size_t cap = 0;

    pthread_mutex_lock(&hub->lock);
    while (!hub->stopping) {
        size_t n = 0;
        hub->changed = hub->added = false;
        for (struct event_stream *s = hub->list; s; s = s->next) {
            if (s->closed || s->ending)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                held = xrealloc(held, cap * sizeof(*held));
            }
            s->refs++;
            held[n++] = s;
        }
        pthread_mutex_unlock(&hub->lock);
        round_all(hub, held, n);
        pthread_mutex_lock(&hub->lock);
        for (size_t i = 0; i < n; i++)
            unref_locked(held[i]);
        wait_tick(hub);
    }
    /* stopping: every stream ends once read; parked ones are woken to see it */
    size_t n = 0;
    for (struct event_stream *s = hub->list; s; s = s->next) {
        s->ending = true;
        if (!s->waiting)
            continue;
        s->waiting = false;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            held = xrealloc(held, cap * sizeof(*held));
        }
        held[n++] = s;
    }
    pthread_mutex_unlock(&hub->lock);
    for (size_t i = 0; i < n; i++)
        held[i]->wake_fn(held[i]->wake_ctx);
    free(held);
    return NULL;
}

struct event_streams *event_streams_start(struct server *srv, struct sl_error *err)
{
    struct event_streams *hub = xzalloc(sizeof(*hub));
    pthread_condattr_t attr;

    hub->srv = srv;
    if (newest(srv->store, &hub->seen, err) < 0) {
        free(hub);
        return NULL;
    }
    pthread_mutex_init(&hub->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&hub->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&hub->thread, NULL, streams_thread, hub) != 0) {
        sl_fail(err, SL_E_INTERNAL, "thread", "unable to start the event streams' thread");
        pthread_cond_destroy(&hub->cond);
        pthread_mutex_destroy(&hub->lock);
        free(hub);
        return NULL;
    }
    return hub;
}

void event_streams_stop(struct event_streams *hub)
{
    if (!hub)
        return;
    pthread_mutex_lock(&hub->lock);
    hub->stopping = true;
    pthread_cond_signal(&hub->cond);
    pthread_mutex_unlock(&hub->lock);
    pthread_join(hub->thread, NULL);
}

void event_streams_free(struct event_streams *hub)
{
    if (!hub)
        return;
    /* the transport closed every stream; one it did not is left, not freed
     * under it */
    if (hub->list) {
        log_warn("event streams: a stream is still open at exit; its memory is left");
    } else {
        pthread_cond_destroy(&hub->cond);
        pthread_mutex_destroy(&hub->lock);
        free(hub);
    }
}

int api_events_stream(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *last = api_header(req, "Last-Event-ID");

    if (!req->may_stream)
        return sl_fail(err, SL_E_UNAVAILABLE, "streams_unavailable",
                       "this server cannot stream now (it is stopping): retry shortly");
    if (last && *last) {
        if (event_cursor_parse(last, &res->stream.from, err) < 0)
            return -1;
        res->stream.resume = true;
    }
    res->stream.requested = true;
    snprintf(res->stream.user_id, sizeof(res->stream.user_id), "%s", req->caller.user_id);
    snprintf(res->stream.token_id, sizeof(res->stream.token_id), "%s", req->caller.token_id);
    return 0;
}
