/* SQLite backend of the store: WAL, a busy timeout, one connection per
 * thread (and the store's one writer), and a cache of prepared statements
 * keyed by the address of the SQL text (callers pass string literals, so
 * the address nearly always identifies the statement; a hit is checked
 * against the text). */
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* Set-associative: a statement's address picks a set of STMT_CACHE_WAYS
 * slots, and a miss replaces the set's least recently used free slot. A
 * placement runs some 40 statements and suanlid knows several hundred: a
 * direct-mapped cache of 128 re-prepared about ten of them per placement,
 * 12% of suanlid's time under bench/sched.py. */
#define STMT_CACHE_SETS 256
#define STMT_CACHE_WAYS 4

struct cached_stmt {
    const char *sql;
    sqlite3_stmt *stmt;
    uint64_t used; /* the connection's clock at the last use */
    bool in_use;
};

struct checkpointer;

struct sqlite_conn {
    sqlite3 *db;
    uint64_t clock;
    struct checkpointer *checkpointer; /* the writer's */
    struct cached_stmt cache[STMT_CACHE_SETS * STMT_CACHE_WAYS];
};

/* The writer's checkpoints run in a thread of their own, on a connection
 * of their own, while the writer goes on (SQLite's automatic checkpoint
 * runs in the commit that crosses its threshold: every chunk of a
 * settlement pass, 0.2 of 1.2 s over 100,000 meters). A checkpoint is
 * PASSIVE, as the automatic one: it copies what no reader still needs and
 * never waits for a lock. When the log outgrows CHECKPOINT_INLINE pages
 * (the thread cannot keep up) the writer checkpoints in its commit again. */
#define CHECKPOINT_PAGES  1000 /* SQLite's default threshold */
#define CHECKPOINT_INLINE 16000

struct checkpointer {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool due, stop;
    sqlite3 *db;
};

static void *checkpointer_main(void *p)
{
    struct checkpointer *k = p;

    pthread_mutex_lock(&k->lock);
    for (;;) {
        while (!k->due && !k->stop)
            pthread_cond_wait(&k->wake, &k->lock);
        if (k->stop)
            break;
        k->due = false;
        pthread_mutex_unlock(&k->lock);
        sqlite3_wal_checkpoint_v2(k->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        pthread_mutex_lock(&k->lock);
    }
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

/* After each commit of the writer, with the log's size in pages. */
static int checkpoint_hook(void *p, sqlite3 *db, const char *name, int pages)
{
    struct checkpointer *k = p;

    if (pages >= CHECKPOINT_INLINE) {
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    } else if (pages >= CHECKPOINT_PAGES) {
        pthread_mutex_lock(&k->lock);
        k->due = true;
        pthread_cond_signal(&k->wake);
        pthread_mutex_unlock(&k->lock);
    }
    return SQLITE_OK;
}

/* Starts the writer's checkpoints on a connection of their own; NULL
 * (SQLite's automatic checkpoints stay) when that is not possible. */
static struct checkpointer *checkpointer_start(sqlite3 *writer, const char *target)
{
    struct checkpointer *k = xzalloc(sizeof(*k));

    if (sqlite3_open_v2(target, &k->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        sqlite3_close(k->db);
        free(k);
        return NULL;
    }
    sqlite3_busy_timeout(k->db, 1000);
    pthread_mutex_init(&k->lock, NULL);
    pthread_cond_init(&k->wake, NULL);
    if (pthread_create(&k->thread, NULL, checkpointer_main, k) != 0) {
        sqlite3_close(k->db);
        free(k);
        return NULL;
    }
    sqlite3_wal_hook(writer, checkpoint_hook, k);
    return k;
}

static void checkpointer_stop(sqlite3 *writer, struct checkpointer *k)
{
    if (!k)
        return;
    sqlite3_wal_hook(writer, NULL, NULL);
    pthread_mutex_lock(&k->lock);
    k->stop = true;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->lock);
    pthread_join(k->thread, NULL);
    sqlite3_close(k->db);
    pthread_mutex_destroy(&k->lock);
    pthread_cond_destroy(&k->wake);
    free(k);
}

struct db_rows {
    const struct store_ops *ops; /* must be first: see store.c */
    struct sqlite_conn *conn;
    sqlite3_stmt *stmt;
    struct cached_stmt *slot; /* NULL when the statement is not cached */
};

extern const char *const sqlite_migrations[];

static int fail_sqlite(struct sl_error *err, sqlite3 *db, int rc, const char *what)
{
    int ext = db ? sqlite3_extended_errcode(db) : rc;
    const char *msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);

    if (ext == SQLITE_CONSTRAINT_UNIQUE || ext == SQLITE_CONSTRAINT_PRIMARYKEY)
        return sl_fail(err, SL_E_CONFLICT, "duplicate", "%s: %s", what, msg);
    if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
        return sl_fail(err, SL_E_UNAVAILABLE, "store_busy",
                       "the database is busy; try again in a moment");
    if ((rc & 0xff) == SQLITE_FULL)
        return sl_fail(err, SL_E_UNAVAILABLE, "store_full", "the database disk is full");
    return sl_fail(err, SL_E_INTERNAL, "store_error", "%s: %s", what, msg);
}

/* Before SQLite initialises: no global memory statistics, whose mutex
 * every allocation would take (connections are per thread already). */
static void sq_configure(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static void *sq_connect(const char *target, bool writer, struct sl_error *err)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sq_configure);
    struct sqlite_conn *c = xzalloc(sizeof(*c));
    char *errmsg = NULL;
    int rc;

    rc = sqlite3_open_v2(target, &c->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        fail_sqlite(err, c->db, rc, "unable to open database");
        sl_error_prefix(err, "'%s'", target);
        sqlite3_close(c->db);
        free(c);
        return NULL;
    }
    sqlite3_busy_timeout(c->db, 10000);
    /* synchronous=FULL: an acknowledged ledger entry survives power loss too.
     * A 64 MiB page cache per connection, and the writer's reads through
     * mmap, keep a settlement pass over 100,000 meters off the read() path.
     * A thread's connection for reads drops its cache whenever the writer
     * has committed, and with mmap SQLite also unmaps the whole file then:
     * an munmap and page faults for every read transaction (12% of
     * suanlid's CPU per placement in bench/sched.py), so it reads with
     * read(). temp_store=MEMORY: statement journals (a statement that
     * writes several rows, a savepoint) stay in memory. With FILE they
     * spilled past 64 KiB to a temporary file: 340,000 page writes and 40
     * files per settlement pass over 100,000 meters. FILE was chosen when
     * every transaction was a savepoint of its batch and a settlement chunk
     * journaled all its pages into one list that SQLite walked from the
     * start (75% of suanlid's CPU); the batch's first transaction now has
     * no savepoint (store.c) and a statement writes 128 rows at most
     * (billing-meter.c), so the lists are short (bench/settle.sh: 2.1 s a
     * pass with FILE, 1.7 s with MEMORY on the same loaded machine). */
    rc = sqlite3_exec(c->db,
                      "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                      " PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;"
                      " PRAGMA cache_size=-65536;",
                      NULL, NULL, &errmsg);
    if (rc == SQLITE_OK && writer)
        rc = sqlite3_exec(c->db, "PRAGMA mmap_size=1073741824;", NULL, NULL, &errmsg);
    if (rc != SQLITE_OK) {
        sl_fail(err, SL_E_INTERNAL, "store_error", "unable to configure database '%s': %s", target,
                errmsg ? errmsg : sqlite3_errstr(rc));
        sqlite3_free(errmsg);
        sqlite3_close(c->db);
        free(c);
        return NULL;
    }
    if (writer)
        c->checkpointer = checkpointer_start(c->db, target);
    return c;
}

static void sq_disconnect(void *p)
{
    struct sqlite_conn *c = p;

    checkpointer_stop(c->db, c->checkpointer);
    for (size_t i = 0; i < ARRAY_SIZE(c->cache); i++)
        sqlite3_finalize(c->cache[i].stmt);
    sqlite3_close(c->db);
    free(c);
}

/* The first slot of sql's set. */
static struct cached_stmt *cache_set(struct sqlite_conn *c, const char *sql)
{
    uint64_t h = (uintptr_t)sql;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ULL;
    return &c->cache[(h >> 32) % STMT_CACHE_SETS * STMT_CACHE_WAYS];
}

/* borrow: the texts are read in place, not copied: only where every step
 * of the statement comes before the caller's texts can change and
 * release() clears the bindings (sq_exec; 400,000 copies in a settlement
 * pass over 100,000 meters) */
static int bind_args(sqlite3 *db, sqlite3_stmt *stmt, const struct db_arg *args, bool borrow,
                     struct sl_error *err)
{
    int rc = SQLITE_OK;

    for (int i = 0; args && args[i].type != DB_ARG_END; i++) {
        switch (args[i].type) {
        case DB_ARG_TEXT:
            rc = sqlite3_bind_text(stmt, i + 1, args[i].text, -1,
                                   borrow ? SQLITE_STATIC : SQLITE_TRANSIENT);
            break;
        case DB_ARG_INT:
            rc = sqlite3_bind_int64(stmt, i + 1, args[i].i);
            break;
        case DB_ARG_NULL:
            rc = sqlite3_bind_null(stmt, i + 1);
            break;
        case DB_ARG_END:
            break;
        }
        if (rc != SQLITE_OK) {
            fail_sqlite(err, db, rc, "unable to bind a parameter");
            sl_error_prefix(err, "parameter %d of \"%.60s\"", i + 1, sqlite3_sql(stmt));
            return -1;
        }
    }
    return 0;
}

/* Prepares sql, from the cache when it is free there. */
static sqlite3_stmt *prepare(struct sqlite_conn *c, const char *sql, struct cached_stmt **slotp,
                             struct sl_error *err)
{
    struct cached_stmt *set = cache_set(c, sql), *victim = NULL;
    sqlite3_stmt *stmt = NULL;
    int rc;

    *slotp = NULL;
    c->clock++;
    for (int w = 0; w < STMT_CACHE_WAYS; w++) {
        struct cached_stmt *slot = &set[w];
        if (slot->in_use)
            continue;
        /* the address alone is not enough: a buffer on the stack holds
         * other texts at the same address */
        if (slot->sql == sql && slot->stmt && strcmp(sqlite3_sql(slot->stmt), sql) == 0) {
            slot->in_use = true;
            slot->used = c->clock;
            *slotp = slot;
            return slot->stmt;
        }
        if (!victim || slot->used < victim->used)
            victim = slot;
    }
    rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL);
    if (rc != SQLITE_OK) {
        fail_sqlite(err, c->db, rc, "unable to prepare a statement");
        return NULL;
    }
    if (victim) {
        sqlite3_finalize(victim->stmt);
        victim->sql = sql;
        victim->stmt = stmt;
        victim->used = c->clock;
        victim->in_use = true;
        *slotp = victim;
    }
    return stmt;
}

static void release(sqlite3_stmt *stmt, struct cached_stmt *slot)
{
    if (slot) {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        slot->in_use = false;
    } else {
        sqlite3_finalize(stmt);
    }
}

static int sq_exec(void *p, const char *sql, const struct db_arg *args, struct sl_error *err)
{
    struct sqlite_conn *c = p;
    struct cached_stmt *slot;
    sqlite3_stmt *stmt = prepare(c, sql, &slot, err);
    int rc;

    if (!stmt)
        return -1;
    if (bind_args(c->db, stmt, args, true, err) < 0) {
        release(stmt, slot);
        return -1;
    }
    do
        rc = sqlite3_step(stmt);
    while (rc == SQLITE_ROW);
    if (rc != SQLITE_DONE) {
        fail_sqlite(err, c->db, rc, "statement failed");
        release(stmt, slot);
        return -1;
    }
    release(stmt, slot);
    return sqlite3_changes(c->db);
}

static int sq_exec_script(void *p, const char *sql, struct sl_error *err)
{
    struct sqlite_conn *c = p;
    char *errmsg = NULL;
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, &errmsg);

    if (rc != SQLITE_OK) {
        sl_fail(err, SL_E_INTERNAL, "store_error", "%s", errmsg ? errmsg : sqlite3_errstr(rc));
        sqlite3_free(errmsg);
        return -1;
    }
    return 0;
}

static struct db_rows *sq_query(void *p, const char *sql, const struct db_arg *args,
                                struct sl_error *err)
{
    struct sqlite_conn *c = p;
    struct cached_stmt *slot;
    sqlite3_stmt *stmt = prepare(c, sql, &slot, err);
    struct db_rows *rows;

    if (!stmt)
        return NULL;
    if (bind_args(c->db, stmt, args, false, err) < 0) {
        release(stmt, slot);
        return NULL;
    }
    rows = xmalloc(sizeof(*rows));
    rows->ops = &store_sqlite_ops;
    rows->conn = c;
    rows->stmt = stmt;
    rows->slot = slot;
    return rows;
}

static int sq_next(struct db_rows *rows, struct sl_error *err)
{
    int rc = sqlite3_step(rows->stmt);

    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE)
        return 0;
    return fail_sqlite(err, rows->conn->db, rc, "query failed");
}

static const char *sq_text(struct db_rows *rows, int col)
{
    const unsigned char *t = sqlite3_column_text(rows->stmt, col);
    return t ? (const char *)t : "";
}

static int64_t sq_int(struct db_rows *rows, int col)
{
    return sqlite3_column_int64(rows->stmt, col);
}

static bool sq_null(struct db_rows *rows, int col)
{
    return sqlite3_column_type(rows->stmt, col) == SQLITE_NULL;
}

static void sq_rows_free(struct db_rows *rows)
{
    release(rows->stmt, rows->slot);
    free(rows);
}

static bool sq_in_transaction(void *p)
{
    struct sqlite_conn *c = p;
    return !sqlite3_get_autocommit(c->db);
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .connect = sq_connect,
    .disconnect = sq_disconnect,
    .exec = sq_exec,
    .exec_script = sq_exec_script,
    .query = sq_query,
    .next = sq_next,
    .column_text = sq_text,
    .column_int = sq_int,
    .column_null = sq_null,
    .rows_free = sq_rows_free,
    .in_transaction = sq_in_transaction,
    /* IMMEDIATE takes the write lock up front: no deadlock upgrading a reader */
    .begin_sql = "BEGIN IMMEDIATE",
    .migrations = sqlite_migrations,
};
