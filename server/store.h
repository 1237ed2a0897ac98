/* The store: the only place suanlid reads and writes its database.
 *
 * Callers write portable SQL with numbered parameters (?1, ?2, ...) and never
 * see the backend; a backend is a `struct store_ops` (store-sqlite.c,
 * store-pg.c), chosen by the URI's scheme from a table in store.c.
 * Portable means what SQLite and PostgreSQL both run the same way: pages by
 * an explicit integer column (`seq`), never `rowid`; `INSERT ... ON CONFLICT
 * (...) DO UPDATE / DO NOTHING`, never `INSERT OR REPLACE`; flags are integer
 * columns compared with `= 1`, never used bare as a condition, and
 * conditions are never summed or selected as integers (`CASE WHEN ... THEN 1
 * ELSE 0 END`); `CASE` for the larger of two values, not scalar `MAX(a, b)`;
 * every subquery in FROM has an alias and every selected column is grouped
 * or aggregated; no SQLite functions (`instr`, `json_each`, `printf`).
 * Migrations are the one place for a backend's own dialect. Each thread gets
 * its own connection for reads. Transactions nest: the outermost
 * store_begin() opens a write transaction, inner ones are savepoints, so a
 * handler's transaction can run inside the API layer's (see idempotency.c).
 * Every write transaction runs on one writer connection, one thread at a
 * time, and several threads' transactions may share one commit (group
 * commit, store.c): store_commit() returns once its transaction is durable,
 * and a rollback undoes that transaction alone. */
#ifndef SL_STORE_H
#define SL_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"

enum db_arg_type {
    DB_ARG_END,
    DB_ARG_TEXT,
    DB_ARG_INT,
    DB_ARG_NULL
};

struct db_arg {
    enum db_arg_type type;
    const char *text;
    int64_t i;
};

static inline struct db_arg db_text_arg(const char *s)
{
    return (struct db_arg){ .type = s ? DB_ARG_TEXT : DB_ARG_NULL, .text = s };
}

#define DB_TEXT(s)   db_text_arg(s)
#define DB_INT(v)    ((struct db_arg){ .type = DB_ARG_INT, .i = (v) })
#define DB_NULL      ((struct db_arg){ .type = DB_ARG_NULL })
#define DB_ARGS(...) ((const struct db_arg[]){ __VA_ARGS__, { .type = DB_ARG_END } })
#define DB_NO_ARGS   ((const struct db_arg[]){ { .type = DB_ARG_END } })

struct store;
struct db_rows;
struct store_link_ops;

struct store_ops {
    const char *name;
    /* opens a connection: the store's writer, or a thread's for reads */
    void *(*connect)(const char *target, bool writer, struct sl_error *err);
    void (*disconnect)(void *conn);
    /* runs one statement; returns the number of rows changed */
    int (*exec)(void *conn, const char *sql, const struct db_arg *args, struct sl_error *err);
    /* several statements without parameters (migrations) */
    int (*exec_script)(void *conn, const char *sql, struct sl_error *err);
    struct db_rows *(*query)(void *conn, const char *sql, const struct db_arg *args,
                             struct sl_error *err);
    int (*next)(struct db_rows *rows, struct sl_error *err);
    const char *(*column_text)(struct db_rows *rows, int col);
    int64_t (*column_int)(struct db_rows *rows, int col);
    bool (*column_null)(struct db_rows *rows, int col);
    void (*rows_free)(struct db_rows *rows);
    /* whether conn is inside a transaction (an error may end one) */
    bool (*in_transaction)(void *conn);
    const char *begin_sql; /* the outermost BEGIN */
    /* run right after it, or NULL: makes the writers of every process on
     * the database take turns, so that one's batch never conflicts with
     * another's and identity values are in commit order (docs/design/
     * control-plane.md, "Replicas and the leader") */
    const char *turn_sql;
    /* takes a column of many rows as one array parameter (?1::bigint[]
     * in unnest, store-rows.h) */
    bool arrays;
    const char *const *migrations;     /* NULL-terminated; index + 1 is the version */
    const struct store_link_ops *link; /* NULL: no links (store_link_open) */
};

/* uri: "sqlite:PATH", a plain path (an SQLite file), or a PostgreSQL URI
 * ("postgres://..." or "postgresql://...", libpq's syntax, store-pg.c). A
 * scheme without a backend fails with SL_E_INVALID, code
 * "unsupported_store", and a message that names the scheme. */
struct store *store_open(const char *uri, struct sl_error *err);
void store_close(struct store *st);
const char *store_backend(const struct store *st);
/* Whether st takes a column of rows as one array parameter (store-rows.h). */
bool store_takes_arrays(const struct store *st);

/* Applies missing migrations, each in its own transaction. */
int store_migrate(struct store *st, struct sl_error *err);
/* The schema version in the database, and the newest this binary knows. */
int store_schema_version(struct store *st, int *have, int *want, struct sl_error *err);

int store_begin(struct store *st, struct sl_error *err);
int store_commit(struct store *st, struct sl_error *err);
void store_rollback(struct store *st);
/* fn(ctx) runs after the outermost commit of a transaction in which
 * store_note_change was called, outside the write lock, on the committing
 * thread (at once when no transaction is open; never after a rollback).
 * One hook per store; set it before other threads use the store. */
void store_set_commit_hook(struct store *st, void (*fn)(void *ctx), void *ctx);
void store_note_change(struct store *st);

/* Write transactions begun and batch commits made since the store opened:
 * transactions per commit is what group commit saves. */
void store_stats(struct store *st, uint64_t *transactions, uint64_t *commits);

/* Depth of open transactions on this thread's connection. */
int store_tx_depth(struct store *st);

/* Returns rows changed (>= 0) or -1. A unique-key violation fails with kind
 * SL_E_CONFLICT and code "duplicate"; a busy store with SL_E_UNAVAILABLE.
 * Outside a transaction the statement is a transaction of its own. */
int store_exec(struct store *st, const char *sql, const struct db_arg *args, struct sl_error *err);

/* Returns rows to step with db_next() (1 row, 0 done, -1 error); free with
 * db_rows_free (or cleanup_rows). Rows read inside a transaction must be
 * freed before its outermost commit or rollback: the writer's next holder
 * is another thread. Outside one, the rows are of committed state. */
struct db_rows *store_query(struct store *st, const char *sql, const struct db_arg *args,
                            struct sl_error *err);
int db_next(struct db_rows *rows, struct sl_error *err);
const char *db_text(struct db_rows *rows, int col); /* "" for NULL; valid until next step */
int64_t db_int(struct db_rows *rows, int col);
bool db_null(struct db_rows *rows, int col);
void db_rows_free(struct db_rows *rows);

static inline void db_cleanup_rowsp(struct db_rows **r)
{
    if (*r)
        db_rows_free(*r);
}
#define cleanup_rows __attribute__((cleanup(db_cleanup_rowsp)))

/* One integer from the first row, first column: 1 found, 0 no row, -1 error. */
int store_get_int(struct store *st, const char *sql, const struct db_arg *args, int64_t *out,
                  struct sl_error *err);

/* Ends a transaction that a scope opened unless it was committed: use
 * `cleanup_tx struct store *tx = st;` right after store_begin() and
 * `tx = NULL` after store_commit(). */
static inline void store_cleanup_txp(struct store **st)
{
    if (*st)
        store_rollback(*st);
}
#define cleanup_tx __attribute__((cleanup(store_cleanup_txp)))

/* A link: one connection to the database of its own, outside the store's,
 * for what several suanlid processes on one database share (docs/design/
 * control-plane.md, "Replicas and the leader"): a session lock that one of
 * them holds at a time, and notices of changes between them. PostgreSQL
 * has links; SQLite none (one process owns its file): store_link_open fails
 * with SL_E_UNSUPPORTED, code "no_links". One thread uses a link. Each call
 * waits for the database at most the link's timeout_ms; a link that failed
 * once (-1) is broken: close it and open another. */
struct store_link;
struct store_link *store_link_open(struct store *st, int timeout_ms, struct sl_error *err);
void store_link_close(struct store_link *l);
/* Takes the session lock `key` if no other session holds it: 1 taken, 0
 * held by another, -1 failed. The lock lasts until the link closes, or its
 * connection dies. */
int store_link_lock(struct store_link *l, int64_t key, struct sl_error *err);
/* A round trip (SELECT 1): 0 the database answered, -1 failed. */
int store_link_ping(struct store_link *l, struct sl_error *err);
/* Subscribes to channel; notify sends a notice on it (after its commit,
 * to every subscribed link but this one). */
int store_link_listen(struct store_link *l, const char *channel, struct sl_error *err);
int store_link_notify(struct store_link *l, const char *channel, struct sl_error *err);
/* Waits up to ms for a notice from another session or for wake_fd (-1:
 * none) to be readable: 1 a notice came, 0 none did, -1 the link failed. */
int store_link_wait(struct store_link *l, int wake_fd, int ms, struct sl_error *err);

/* A change committed elsewhere (another process, heard through a link):
 * runs the commit hook as a local commit would. */
void store_changed_elsewhere(struct store *st);
/* fn(ctx) runs after the commit hook for every local commit that noted a
 * change (not for store_changed_elsewhere): it tells the other processes. */
void store_set_relay(struct store *st, void (*fn)(void *ctx), void *ctx);

struct store_link_ops {
    void *(*open)(const char *target, int timeout_ms, struct sl_error *err);
    void (*close)(void *link);
    int (*lock)(void *link, int64_t key, struct sl_error *err);
    int (*ping)(void *link, struct sl_error *err);
    int (*listen)(void *link, const char *channel, struct sl_error *err);
    int (*notify)(void *link, const char *channel, struct sl_error *err);
    int (*wait)(void *link, int wake_fd, int ms, struct sl_error *err);
};

extern const struct store_ops store_sqlite_ops;
extern const struct store_ops store_pg_ops;
extern const struct store_link_ops store_pg_link_ops;

#endif
