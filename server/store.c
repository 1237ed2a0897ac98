/* Backend-neutral part of the store: per-thread connections for reads, one
 * writer connection with group commit for transactions, nested
 * transactions, migrations. */
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The most transactions one commit takes: a bound on how long the first of
 * them waits, should threads keep arriving. */
#define STORE_BATCH_MAX 64

/* A thread whose transaction is in the open batch, waiting for its commit. */
struct batch_waiter {
    struct batch_waiter *next;
    bool done; /* under flush_lock */
    int rc;
    struct sl_error err;
};

struct store {
    const struct store_ops *ops;
    char *target;
    pthread_key_t key;
    /* Group commit (docs/design/control-plane.md, "Placement speed"). One
     * connection, the writer, runs every write transaction, one thread at
     * a time under write_lock: SQLite would serialise writers anyway, but
     * through its busy handler, which sleeps and retries; a mutex queues
     * them at once and fairly. The writer's SQLite transaction, a batch,
     * stays open from one holder of the lock to the next while another
     * thread waits for the lock; each holder's transaction is a savepoint
     * in it, so a failure rolls back that one alone. The holder that finds
     * no one waiting commits the batch, one fsync for all of it, and wakes
     * the holders before it: their store_commit returns only then, so
     * nothing is acknowledged before it is durable, and a batch whose
     * commit fails fails every transaction in it. The batch's first
     * transaction needs no savepoint (`bare`): no one else's work is in
     * the batch while it holds the writer, so its rollback is the batch's.
     * A savepoint makes SQLite copy every page the transaction changes to
     * a sub-journal first: a settlement chunk of 5,000 meters wrote 70 MB
     * there, 93% of a pass's writes (bench/settle.sh). */
    pthread_mutex_t write_lock;
    void *writer;                 /* under write_lock */
    bool batch_open;              /* the writer is inside BEGIN; under write_lock */
    bool bare;                    /* its holder began it: no savepoint sp0; under write_lock */
    int batch_size;               /* transactions in the batch; under write_lock */
    struct batch_waiter *waiting; /* their threads; under write_lock */
    int lock_waiters;             /* threads waiting for write_lock; atomic */
    pthread_mutex_t flush_lock;
    pthread_cond_t flushed;
    uint64_t commits, transactions; /* atomic */
    /* store_set_commit_hook */
    void (*on_commit)(void *ctx);
    void *on_commit_ctx;
    /* schema_migrations exists: turn_sql (store.h) locks it; atomic */
    bool versioned;
    /* store_set_relay */
    void (*relay)(void *ctx);
    void *relay_ctx;
};

/* A thread's connection: its own for reads outside transactions; inside
 * one (depth > 0) every statement goes to the store's writer. */
struct conn {
    struct store *st;
    void *backend;
    int depth;
    bool noted; /* store_note_change in the open transaction */
};

static int turn_end(struct store *st, bool wait, struct sl_error *err);

/* A local commit noted a change: this process's waiters, then the others. */
static void changed_here(struct store *st)
{
    if (st->on_commit)
        st->on_commit(st->on_commit_ctx);
    if (st->relay)
        st->relay(st->relay_ctx);
}

struct db_rows_header {
    const struct store_ops *ops;
};

/* Savepoint statements by depth, as literals: the SQLite backend caches
 * statements by the address of their text. */
#define SAVEPOINT_LITERALS 8
#define SAVEPOINT_NAMES(verb)                                                                      \
    {                                                                                              \
        verb "sp0", verb "sp1", verb "sp2", verb "sp3", verb "sp4", verb "sp5", verb "sp6",        \
            verb "sp7"                                                                             \
    }
static const char *const savepoint_sql[SAVEPOINT_LITERALS] = SAVEPOINT_NAMES("SAVEPOINT ");
static const char *const release_sql[SAVEPOINT_LITERALS] = SAVEPOINT_NAMES("RELEASE ");
static const char *const rollback_to_sql[SAVEPOINT_LITERALS] = SAVEPOINT_NAMES("ROLLBACK TO ");

static const char *savepoint_stmt(const char *const *literals, const char *verb, int n, char *buf,
                                  size_t size)
{
    if (n < SAVEPOINT_LITERALS)
        return literals[n];
    snprintf(buf, size, "%ssp%d", verb, n);
    return buf;
}

/* Undoes savepoint n on the writer; n 0 of the batch's first
 * transaction, which has none, is the whole batch. */
static void savepoint_rollback(struct store *st, int n)
{
    char sql[48];

    if (n == 0 && st->bare) {
        st->ops->exec(st->writer, "ROLLBACK", DB_NO_ARGS, NULL);
        st->batch_open = false;
        st->batch_size = 0;
        st->bare = false;
        return;
    }
    st->ops->exec(st->writer, savepoint_stmt(rollback_to_sql, "ROLLBACK TO ", n, sql, sizeof(sql)),
                  DB_NO_ARGS, NULL);
    st->ops->exec(st->writer, savepoint_stmt(release_sql, "RELEASE ", n, sql, sizeof(sql)),
                  DB_NO_ARGS, NULL);
}

static void conn_destroy(void *p)
{
    struct conn *c = p;

    if (c->depth > 0) {
        /* a thread that ends inside a transaction: its work goes */
        savepoint_rollback(c->st, 0);
        turn_end(c->st, false, NULL);
    }
    c->st->ops->disconnect(c->backend);
    free(c);
}

static struct conn *conn_get(struct store *st, struct sl_error *err)
{
    struct conn *c = pthread_getspecific(st->key);

    if (c)
        return c;
    void *b = st->ops->connect(st->target, false, err);
    if (!b)
        return NULL;
    c = xzalloc(sizeof(*c));
    c->st = st;
    c->backend = b;
    pthread_setspecific(st->key, c);
    return c;
}

/* The backends by URI scheme, as crun picks its cgroup manager by name. A
 * row without ops is a scheme that is planned but not built: it fails with
 * what to use instead. */
static const struct store_backend {
    const char *scheme;
    const struct store_ops *ops;
} store_backends[] = {
    { "sqlite", &store_sqlite_ops },
    { "postgres", &store_pg_ops },
    { "postgresql", &store_pg_ops },
};

/* "SCHEME:REST" with SCHEME a URI scheme (RFC 3986: a letter, then letters,
 * digits, '+', '-', '.'): the length of SCHEME, else 0 (a plain path). */
static size_t uri_scheme_length(const char *uri)
{
    size_t n = 0;

    if (!isalpha((unsigned char)uri[0]))
        return 0;
    while (isalnum((unsigned char)uri[n]) || uri[n] == '+' || uri[n] == '-' || uri[n] == '.')
        n++;
    return uri[n] == ':' ? n : 0;
}

static const struct store_ops *store_backend_find(const char *uri, const char **target,
                                                  struct sl_error *err)
{
    size_t n = uri_scheme_length(uri);

    *target = uri;
    if (n == 0) /* a plain path is an SQLite file */
        return &store_sqlite_ops;
    for (size_t i = 0; i < ARRAY_SIZE(store_backends); i++) {
        const struct store_backend *b = &store_backends[i];
        if (strlen(b->scheme) != n || strncasecmp(uri, b->scheme, n) != 0)
            continue;
        if (!b->ops) {
            sl_fail(err, SL_E_INVALID, "unsupported_store",
                    "no backend for scheme '%s' in this suanlid yet; use sqlite:PATH", b->scheme);
            return NULL;
        }
        *target = uri + n + 1;
        return b->ops;
    }
    sl_fail(err, SL_E_INVALID, "unsupported_store",
            "no backend for scheme '%.*s'; use sqlite:PATH (or a plain path to an SQLite file)",
            (int)(n > 32 ? 32 : n), uri);
    return NULL;
}

struct store *store_open(const char *uri, struct sl_error *err)
{
    const char *target;
    const struct store_ops *ops = store_backend_find(uri, &target, err);
    struct store *st;

    if (!ops)
        return NULL;
    st = xzalloc(sizeof(*st));
    st->ops = ops;
    st->target = xstrdup(target);
    pthread_mutex_init(&st->write_lock, NULL);
    pthread_mutex_init(&st->flush_lock, NULL);
    pthread_cond_init(&st->flushed, NULL);
    if (pthread_key_create(&st->key, conn_destroy) != 0) {
        free(st->target);
        free(st);
        sl_fail_errno(err, "unable to create a thread key");
        return NULL;
    }
    /* connect now so a bad path fails at start-up, not at first request */
    if (!conn_get(st, err) || !(st->writer = ops->connect(st->target, true, err))) {
        store_close(st);
        return NULL;
    }
    return st;
}

void store_close(struct store *st)
{
    struct conn *c;

    if (!st)
        return;
    c = pthread_getspecific(st->key);
    if (c) {
        conn_destroy(c);
        pthread_setspecific(st->key, NULL);
    }
    /* connections of other threads close when those threads exit */
    pthread_key_delete(st->key);
    if (st->writer) {
        log_debug("store: %" PRIu64 " transactions in %" PRIu64 " commits", st->transactions,
                  st->commits);
        st->ops->disconnect(st->writer);
    }
    pthread_cond_destroy(&st->flushed);
    pthread_mutex_destroy(&st->flush_lock);
    pthread_mutex_destroy(&st->write_lock);
    free(st->target);
    free(st);
}

const char *store_backend(const struct store *st)
{
    return st->ops->name;
}

bool store_takes_arrays(const struct store *st)
{
    return st->ops->arrays;
}

/* Commits the open batch and wakes its waiting threads with the outcome.
 * Under write_lock. */
static int batch_commit(struct store *st, struct sl_error *err)
{
    struct sl_error e = SL_ERROR_INIT;
    int rc = 0;

    if (!st->batch_open)
        return 0;
    if (!st->ops->in_transaction(st->writer)) {
        /* SQLite rolls a whole transaction back on some errors (a full
         * disk, an I/O error): every savepoint in it is gone */
        rc = sl_fail(&e, SL_E_UNAVAILABLE, "store_error",
                     "the database undid a batch of writes after an error: try again");
    } else if (st->ops->exec(st->writer, "COMMIT", DB_NO_ARGS, &e) < 0) {
        rc = -1;
        st->ops->exec(st->writer, "ROLLBACK", DB_NO_ARGS, NULL);
    }
    st->batch_open = false;
    st->batch_size = 0;
    st->bare = false;
    __atomic_add_fetch(&st->commits, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&st->flush_lock);
    for (struct batch_waiter *w = st->waiting, *next; w; w = next) {
        next = w->next; /* w may be gone once done is seen */
        w->rc = rc;
        if (rc < 0)
            w->err = e;
        w->done = true;
    }
    st->waiting = NULL;
    pthread_cond_broadcast(&st->flushed);
    pthread_mutex_unlock(&st->flush_lock);
    if (rc < 0 && err)
        *err = e;
    return rc;
}

/* Ends the calling thread's turn at the writer, its transaction released
 * or rolled back, and unlocks write_lock: leaves the batch open to the next
 * holder when a thread waits for the lock (and the batch has room), else
 * commits it. With wait, returns once the batch is committed, with its
 * outcome; without, at once (a thread that ends). */
static int turn_end(struct store *st, bool wait, struct sl_error *err)
{
    struct batch_waiter me = { 0 };
    int rc;

    if (st->batch_open && st->batch_size < STORE_BATCH_MAX &&
        __atomic_load_n(&st->lock_waiters, __ATOMIC_SEQ_CST) > 0) {
        if (wait) {
            me.next = st->waiting;
            st->waiting = &me;
        }
        pthread_mutex_unlock(&st->write_lock);
        if (!wait)
            return 0;
        pthread_mutex_lock(&st->flush_lock);
        while (!me.done)
            pthread_cond_wait(&st->flushed, &st->flush_lock);
        pthread_mutex_unlock(&st->flush_lock);
        if (me.rc < 0 && err)
            *err = me.err;
        return me.rc;
    }
    rc = batch_commit(st, err);
    pthread_mutex_unlock(&st->write_lock);
    return rc;
}

/* Takes the writer for the calling thread's outermost transaction: joins
 * the open batch or begins one. */
static int turn_begin(struct store *st, struct sl_error *err)
{
    __atomic_add_fetch(&st->lock_waiters, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&st->write_lock);
    __atomic_sub_fetch(&st->lock_waiters, 1, __ATOMIC_SEQ_CST);
    if (st->batch_open && !st->ops->in_transaction(st->writer))
        batch_commit(st, NULL); /* lost to an error: fails its waiters */
    if (!st->batch_open) {
        if (st->ops->exec(st->writer, st->ops->begin_sql, DB_NO_ARGS, err) < 0) {
            pthread_mutex_unlock(&st->write_lock);
            return -1;
        }
        if (st->ops->turn_sql && __atomic_load_n(&st->versioned, __ATOMIC_SEQ_CST) &&
            st->ops->exec(st->writer, st->ops->turn_sql, DB_NO_ARGS, err) < 0) {
            struct sl_error ignored = SL_ERROR_INIT;
            st->ops->exec(st->writer, "ROLLBACK", DB_NO_ARGS, &ignored);
            pthread_mutex_unlock(&st->write_lock);
            return -1;
        }
        st->batch_open = true;
        st->bare = true;
    } else if (st->ops->exec(st->writer, savepoint_sql[0], DB_NO_ARGS, err) < 0) {
        turn_end(st, false, NULL);
        return -1;
    }
    st->batch_size++;
    __atomic_add_fetch(&st->transactions, 1, __ATOMIC_RELAXED);
    return 0;
}

int store_begin(struct store *st, struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    char sql[32];

    if (!c)
        return -1;
    if (c->depth == 0) {
        if (turn_begin(st, err) < 0)
            return -1;
    } else if (st->ops->exec(
                   st->writer,
                   savepoint_stmt(savepoint_sql, "SAVEPOINT ", c->depth, sql, sizeof(sql)),
                   DB_NO_ARGS, err) < 0) {
        return -1;
    }
    c->depth++;
    return 0;
}

int store_commit(struct store *st, struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    char sql[32];

    if (!c)
        return -1;
    if (c->depth <= 0)
        return sl_fail(err, SL_E_INTERNAL, NULL, "BUG: commit without a transaction");
    if (c->depth == 1 && st->bare)
        st->bare = false; /* the batch's first: nothing to release */
    else if (st->ops->exec(st->writer,
                           savepoint_stmt(release_sql, "RELEASE ", c->depth - 1, sql, sizeof(sql)),
                           DB_NO_ARGS, err) < 0) {
        store_rollback(st);
        return -1;
    }
    if (--c->depth > 0)
        return 0;
    bool noted = c->noted;
    c->noted = false;
    if (turn_end(st, true, err) < 0)
        return -1;
    if (noted)
        changed_here(st);
    return 0;
}

void store_set_commit_hook(struct store *st, void (*fn)(void *ctx), void *ctx)
{
    st->on_commit = fn;
    st->on_commit_ctx = ctx;
}

void store_set_relay(struct store *st, void (*fn)(void *ctx), void *ctx)
{
    st->relay = fn;
    st->relay_ctx = ctx;
}

void store_changed_elsewhere(struct store *st)
{
    if (st->on_commit)
        st->on_commit(st->on_commit_ctx);
}

void store_note_change(struct store *st)
{
    struct conn *c = pthread_getspecific(st->key);

    if (c && c->depth > 0)
        c->noted = true;
    else
        changed_here(st);
}

struct store_link {
    const struct store_link_ops *ops;
    void *conn;
};

struct store_link *store_link_open(struct store *st, int timeout_ms, struct sl_error *err)
{
    if (!st->ops->link) {
        sl_fail(err, SL_E_UNSUPPORTED, "no_links",
                "the %s store has no links: one process owns its database", st->ops->name);
        return NULL;
    }
    void *conn = st->ops->link->open(st->target, timeout_ms, err);
    if (!conn)
        return NULL;
    struct store_link *l = xzalloc(sizeof(*l));
    l->ops = st->ops->link;
    l->conn = conn;
    return l;
}

void store_link_close(struct store_link *l)
{
    if (!l)
        return;
    l->ops->close(l->conn);
    free(l);
}

int store_link_lock(struct store_link *l, int64_t key, struct sl_error *err)
{
    return l->ops->lock(l->conn, key, err);
}

int store_link_ping(struct store_link *l, struct sl_error *err)
{
    return l->ops->ping(l->conn, err);
}

int store_link_listen(struct store_link *l, const char *channel, struct sl_error *err)
{
    return l->ops->listen(l->conn, channel, err);
}

int store_link_notify(struct store_link *l, const char *channel, struct sl_error *err)
{
    return l->ops->notify(l->conn, channel, err);
}

int store_link_wait(struct store_link *l, int wake_fd, int ms, struct sl_error *err)
{
    return l->ops->wait(l->conn, wake_fd, ms, err);
}

void store_rollback(struct store *st)
{
    struct conn *c = pthread_getspecific(st->key);

    if (!c || c->depth <= 0)
        return;
    savepoint_rollback(st, --c->depth);
    if (c->depth > 0)
        return;
    c->noted = false;
    /* what it refused it may have judged by others' writes in the batch:
     * its answer waits for their commit too */
    turn_end(st, true, NULL);
}

void store_stats(struct store *st, uint64_t *transactions, uint64_t *commits)
{
    *transactions = __atomic_load_n(&st->transactions, __ATOMIC_RELAXED);
    *commits = __atomic_load_n(&st->commits, __ATOMIC_RELAXED);
}

int store_tx_depth(struct store *st)
{
    struct conn *c = pthread_getspecific(st->key);
    return c ? c->depth : 0;
}

/* A PRAGMA outside a transaction (SQLite refuses some inside one, such as
 * synchronous): on the writer, between batches. */
static int exec_between_batches(struct store *st, const char *sql, const struct db_arg *args,
                                struct sl_error *err)
{
    pthread_mutex_lock(&st->write_lock);
    int rc = batch_commit(st, err);
    if (rc == 0)
        rc = st->ops->exec(st->writer, sql, args, err);
    pthread_mutex_unlock(&st->write_lock);
    return rc;
}

int store_exec(struct store *st, const char *sql, const struct db_arg *args, struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    int changed;

    if (!c)
        return -1;
    if (c->depth > 0)
        return st->ops->exec(st->writer, sql, args, err);
    if (strncasecmp(sql, "PRAGMA ", 7) == 0)
        return exec_between_batches(st, sql, args, err);
    /* a statement on its own is a transaction of its own, through the
     * writer like any other (not SQLite's busy handler) */
    if (store_begin(st, err) < 0)
        return -1;
    changed = st->ops->exec(st->writer, sql, args, err);
    if (changed < 0) {
        store_rollback(st);
        return -1;
    }
    return store_commit(st, err) < 0 ? -1 : changed;
}

struct db_rows *store_query(struct store *st, const char *sql, const struct db_arg *args,
                            struct sl_error *err)
{
    struct conn *c = conn_get(st, err);

    if (!c)
        return NULL;
    return st->ops->query(c->depth > 0 ? st->writer : c->backend, sql, args, err);
}

/* Every backend's rows start with a pointer to their ops. */
#define OPS(rows) (((struct db_rows_header *)(rows))->ops)

int db_next(struct db_rows *rows, struct sl_error *err)
{
    return OPS(rows)->next(rows, err);
}

const char *db_text(struct db_rows *rows, int col)
{
    return OPS(rows)->column_text(rows, col);
}

int64_t db_int(struct db_rows *rows, int col)
{
    return OPS(rows)->column_int(rows, col);
}

bool db_null(struct db_rows *rows, int col)
{
    return OPS(rows)->column_null(rows, col);
}

void db_rows_free(struct db_rows *rows)
{
    OPS(rows)->rows_free(rows);
}

int store_get_int(struct store *st, const char *sql, const struct db_arg *args, int64_t *out,
                  struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(st, sql, args, err);
    int rc;

    if (!rows)
        return -1;
    rc = db_next(rows, err);
    if (rc == 1)
        *out = db_int(rows, 0);
    return rc;
}

int store_schema_version(struct store *st, int *have, int *want, struct sl_error *err)
{
    int64_t v = 0;

    for (*want = 0; st->ops->migrations[*want]; (*want)++)
        ;
    if (store_exec(st,
                   "CREATE TABLE IF NOT EXISTS schema_migrations ("
                   " version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
                   DB_NO_ARGS, err) < 0)
        return -1;
    __atomic_store_n(&st->versioned, true, __ATOMIC_SEQ_CST);
    if (store_get_int(st, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations", DB_NO_ARGS, &v,
                      err) < 0)
        return -1;
    *have = (int)v;
    return 0;
}

int store_migrate(struct store *st, struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    int have, want;

    if (!c || store_schema_version(st, &have, &want, err) < 0)
        return -1;
    if (have > want)
        return sl_fail(err, SL_E_INTERNAL, "schema_too_new",
                       "the database has schema version %d but this suanlid knows only %d: "
                       "run a newer suanlid",
                       have, want);
    for (int v = have + 1; v <= want; v++) {
        cleanup_tx struct store *tx = NULL;
        if (store_begin(st, err) < 0)
            return -1;
        tx = st;
        if (st->ops->exec_script(st->writer, st->ops->migrations[v - 1], err) < 0 ||
            store_exec(st, "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
                       DB_ARGS(DB_INT(v), DB_INT(sl_time_now())), err) < 0) {
            sl_error_prefix(err, "migration %d", v);
            return -1;
        }
        if (store_commit(st, err) < 0)
            return -1;
        tx = NULL;
        log_info("store: applied migration %d", v);
    }
    return 0;
}
