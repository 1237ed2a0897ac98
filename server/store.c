/* Backend-neutral part of the store: per-thread connections, nested
 * transactions, migrations. */
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

struct store {
    const struct store_ops *ops;
    char *target;
    pthread_key_t key;
    /* One writer at a time in this process. SQLite would serialise writers
     * anyway, but through its busy handler, which sleeps and retries: under
     * load that turns a 1 ms queue into 100 ms tails. A mutex queues them
     * at once and fairly. */
    pthread_mutex_t write_lock;
    /* store_set_commit_hook */
    void (*on_commit)(void *ctx);
    void *on_commit_ctx;
};

struct conn {
    struct store *st;
    void *backend;
    int depth;
    bool noted; /* store_note_change in the open transaction */
};

struct db_rows_header {
    const struct store_ops *ops;
};

static void conn_destroy(void *p)
{
    struct conn *c = p;

    if (c->depth > 0) {
        c->st->ops->exec(c->backend, "ROLLBACK", DB_NO_ARGS, NULL);
        pthread_mutex_unlock(&c->st->write_lock);
    }
    c->st->ops->disconnect(c->backend);
    free(c);
}

static struct conn *conn_get(struct store *st, struct sl_error *err)
{
    struct conn *c = pthread_getspecific(st->key);

    if (c)
        return c;
    void *b = st->ops->connect(st->target, err);
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
    { "postgres", NULL },
    { "postgresql", NULL },
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
    if (pthread_key_create(&st->key, conn_destroy) != 0) {
        free(st->target);
        free(st);
        sl_fail_errno(err, "unable to create a thread key");
        return NULL;
    }
    /* connect once now so a bad path fails at start-up, not at first request */
    if (!conn_get(st, err)) {
        pthread_key_delete(st->key);
        free(st->target);
        free(st);
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
    free(st->target);
    free(st);
}

const char *store_backend(const struct store *st)
{
    return st->ops->name;
}

int store_begin(struct store *st, struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    char sql[32];

    if (!c)
        return -1;
    if (c->depth == 0) {
        pthread_mutex_lock(&st->write_lock);
        if (st->ops->exec(c->backend, st->ops->begin_sql, DB_NO_ARGS, err) < 0) {
            pthread_mutex_unlock(&st->write_lock);
            return -1;
        }
    } else {
        snprintf(sql, sizeof(sql), "SAVEPOINT sp%d", c->depth);
        if (st->ops->exec(c->backend, sql, DB_NO_ARGS, err) < 0)
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
    if (c->depth == 1)
        snprintf(sql, sizeof(sql), "COMMIT");
    else
        snprintf(sql, sizeof(sql), "RELEASE sp%d", c->depth - 1);
    if (st->ops->exec(c->backend, sql, DB_NO_ARGS, err) < 0) {
        store_rollback(st);
        return -1;
    }
    if (--c->depth == 0) {
        pthread_mutex_unlock(&st->write_lock);
        if (c->noted) {
            c->noted = false;
            if (st->on_commit)
                st->on_commit(st->on_commit_ctx);
        }
    }
    return 0;
}

void store_set_commit_hook(struct store *st, void (*fn)(void *ctx), void *ctx)
{
    st->on_commit = fn;
    st->on_commit_ctx = ctx;
}

void store_note_change(struct store *st)
{
    struct conn *c = pthread_getspecific(st->key);

    if (c && c->depth > 0)
        c->noted = true;
    else if (st->on_commit)
        st->on_commit(st->on_commit_ctx);
}

void store_rollback(struct store *st)
{
    struct conn *c = pthread_getspecific(st->key);
    char sql[48];

    if (!c || c->depth <= 0)
        return;
    if (c->depth == 1) {
        st->ops->exec(c->backend, "ROLLBACK", DB_NO_ARGS, NULL);
        pthread_mutex_unlock(&st->write_lock);
        c->noted = false;
    } else {
        snprintf(sql, sizeof(sql), "ROLLBACK TO sp%d", c->depth - 1);
        st->ops->exec(c->backend, sql, DB_NO_ARGS, NULL);
        snprintf(sql, sizeof(sql), "RELEASE sp%d", c->depth - 1);
        st->ops->exec(c->backend, sql, DB_NO_ARGS, NULL);
    }
    c->depth--;
}

int store_tx_depth(struct store *st)
{
    struct conn *c = pthread_getspecific(st->key);
    return c ? c->depth : 0;
}

int store_exec(struct store *st, const char *sql, const struct db_arg *args, struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    return c ? st->ops->exec(c->backend, sql, args, err) : -1;
}

struct db_rows *store_query(struct store *st, const char *sql, const struct db_arg *args,
                            struct sl_error *err)
{
    struct conn *c = conn_get(st, err);
    return c ? st->ops->query(c->backend, sql, args, err) : NULL;
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
        if (st->ops->exec_script(c->backend, st->ops->migrations[v - 1], err) < 0 ||
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
