/* server/store.c, store-sqlite*.c and store-pg*.c: migrations, nested
 * transactions, errors, per-thread connections and the statement cache.
 * `make unit` runs these tests on SQLite and again on PostgreSQL
 * (SUANLI_UNIT_STORE=postgres under scripts/pg-test.sh, harness.c). */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/timefmt.h"
#include "../../lib/xalloc.h"
#include "../../server/store.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int64_t count(struct store *st, const char *sql)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t n = -1;

    if (store_get_int(st, sql, DB_NO_ARGS, &n, &err) != 1)
        test_fail(__FILE__, __LINE__, "%s: %s", sql, err.message);
    return n;
}

static void make_table(struct store *st)
{
    struct sl_error err = SL_ERROR_INIT;

    if (store_exec(st, "CREATE TABLE t (k TEXT PRIMARY KEY, v BIGINT)", DB_NO_ARGS, &err) < 0)
        test_fail(__FILE__, __LINE__, "create table: %s", err.message);
}

static int put(struct store *st, const char *k, int64_t v, struct sl_error *err)
{
    return store_exec(st, "INSERT INTO t (k, v) VALUES (?1, ?2)", DB_ARGS(DB_TEXT(k), DB_INT(v)),
                      err);
}

static int64_t rows_in_t(struct store *st)
{
    return count(st, "SELECT COUNT(*) FROM t");
}

TEST(migrations_match_schema_table)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    int have = -1, want = -1, n = 0;

    const struct store_ops *ops = test_store_is_pg() ? &store_pg_ops : &store_sqlite_ops;
    for (n = 0; ops->migrations[n]; n++)
        ;
    CHECK(n >= 1);
    CHECK_EQ_INT(store_schema_version(st, &have, &want, &err), 0);
    CHECK_EQ_INT(want, n);
    CHECK_EQ_INT(have, want);
    /* versions are 1..want, each once */
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM schema_migrations"), want);
    CHECK_EQ_INT(count(st, "SELECT MIN(version) FROM schema_migrations"), 1);
    CHECK_EQ_INT(count(st, "SELECT MAX(version) FROM schema_migrations"), want);
    CHECK_EQ_INT(count(st, "SELECT COUNT(DISTINCT version) FROM schema_migrations"), want);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM schema_migrations WHERE applied_at <= 0"), 0);
    CHECK_EQ_INT(store_tx_depth(st), 0);

    /* again: a no-op */
    int64_t applied = count(st, "SELECT SUM(applied_at) FROM schema_migrations");
    CHECK_EQ_INT(store_migrate(st, &err), 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM schema_migrations"), want);
    CHECK_EQ_INT(count(st, "SELECT SUM(applied_at) FROM schema_migrations"), applied);
    CHECK_EQ_INT(store_schema_version(st, &have, &want, &err), 0);
    CHECK_EQ_INT(have, want);

    /* and after reopening the database */
    test_store_close(st);
    st = store_open(test_store_uri(), &err);
    if (!CHECK(st))
        return;
    CHECK_EQ_INT(store_migrate(st, &err), 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM schema_migrations"), want);
    CHECK_STR(store_backend(st), ops->name);
    store_close(st);
}

TEST(schema_too_new_refused)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    int have, want;

    CHECK_EQ_INT(store_schema_version(st, &have, &want, &err), 0);
    CHECK(store_exec(st, "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, 1)",
                     DB_ARGS(DB_INT(want + 1)), &err) == 1);
    CHECK(store_migrate(st, &err) < 0);
    CHECK_STR(err.code, "schema_too_new");
}

TEST(open_errors)
{
    struct sl_error err = SL_ERROR_INIT;
    char *uri = xasprintf("sqlite:%s/no/such/dir/t.db", test_tmpdir());

    CHECK(store_open(uri, &err) == NULL);
    CHECK(err.message[0] != '\0');
    free(uri);
    sl_error_clear(&err);
    /* a PostgreSQL server that is not there: unavailable, not unsupported */
    cleanup_free char *nowhere =
        xasprintf("postgres:///x?host=%s&connect_timeout=5", test_tmpdir());
    CHECK(store_open(nowhere, &err) == NULL);
    CHECK_EQ_INT(err.kind, SL_E_UNAVAILABLE);
    CHECK_STR(err.code, "store_unavailable");
    CHECK_CONTAINS(err.message, "unable to connect to PostgreSQL");
    sl_error_clear(&err);
    nowhere[0] = 'P'; /* the scheme, case aside */
    CHECK(store_open(nowhere, &err) == NULL);
    CHECK_STR(err.code, "store_unavailable");
    sl_error_clear(&err);
    CHECK(store_open("mysql://localhost/x", &err) == NULL);
    CHECK_STR(err.code, "unsupported_store");
    CHECK_CONTAINS(err.message, "no backend for scheme 'mysql'");
    sl_error_clear(&err);
    /* nothing but a colon: no scheme, a path the file system refuses */
    CHECK(store_open(":/no/such/dir/t.db", &err) == NULL);
    CHECK(strstr(err.message, "scheme") == NULL);
}

/* The table picks the backend by scheme, case aside; a plain path is an
 * SQLite file. */
TEST(backend_by_scheme)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *uris[] = { "sqlite:%s/a.db", "SQLite:%s/b.db", "%s/c.db" };

    for (size_t i = 0; i < ARRAY_SIZE(uris); i++) {
        char *uri = xasprintf(uris[i], test_tmpdir());
        struct store *st = store_open(uri, &err);
        free(uri);
        if (!CHECK(st))
            continue;
        CHECK_STR(store_backend(st), "sqlite");
        store_close(st);
    }
    /* the path after the scheme is the file: no "sqlite:" directory */
    CHECK(access(test_path("a.db"), F_OK) == 0);
    CHECK(access(test_path("b.db"), F_OK) == 0);
    CHECK(access(test_path("c.db"), F_OK) == 0);
    /* both PostgreSQL schemes, when a server is at hand */
    const char *pg = getenv("SUANLI_TEST_PG");
    if (!pg || strncmp(pg, "postgresql://", 13) != 0)
        return;
    char *short_uri = xasprintf("postgres%s", pg + strlen("postgresql"));
    const char *pg_uris[] = { pg, short_uri };
    for (size_t i = 0; i < ARRAY_SIZE(pg_uris); i++) {
        struct store *st = store_open(pg_uris[i], &err);
        if (!CHECK(st))
            continue;
        CHECK_STR(store_backend(st), "postgres");
        store_close(st);
    }
    free(short_uri);
}

/* A PRAGMA SQLite refuses inside a transaction (synchronous) runs between
 * batches, not in one: the fuzzer and the billing simulation turn fsync off
 * with it. */
TEST(pragma_outside_a_transaction)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    make_table(st);
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "a", 1, &err), 1);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    CHECK(store_exec(st, "PRAGMA synchronous = OFF", DB_NO_ARGS, &err) >= 0);
    CHECK_EQ_INT(store_exec(st, "PRAGMA synchronous = FULL", DB_NO_ARGS, &err) >= 0, 1);
    CHECK_EQ_INT(rows_in_t(st), 1);
}

TEST(nested_transactions)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    make_table(st);
    /* outer rollback undoes inner savepoints that were released */
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "a", 1, &err), 1);
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(store_tx_depth(st), 2);
    CHECK_EQ_INT(put(st, "b", 2, &err), 1);
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "c", 3, &err), 1);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    CHECK_EQ_INT(store_tx_depth(st), 1);
    CHECK_EQ_INT(rows_in_t(st), 3);
    store_rollback(st);
    CHECK_EQ_INT(store_tx_depth(st), 0);
    CHECK_EQ_INT(rows_in_t(st), 0);

    /* inner rollback keeps the outer work */
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "a", 1, &err), 1);
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "b", 2, &err), 1);
    store_rollback(st);
    CHECK_EQ_INT(store_tx_depth(st), 1);
    CHECK_EQ_INT(rows_in_t(st), 1);
    CHECK_EQ_INT(put(st, "c", 3, &err), 1);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    CHECK_EQ_INT(store_tx_depth(st), 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM t WHERE k IN ('a', 'c')"), 2);
    CHECK_EQ_INT(rows_in_t(st), 2);

    /* many rounds at several depths, alternating commit and rollback */
    for (int round = 0; round < 50; round++) {
        int depth = 1 + round % 4;
        char key[32];
        for (int d = 0; d < depth; d++) {
            CHECK_EQ_INT(store_begin(st, &err), 0);
            snprintf(key, sizeof(key), "r%d-%d", round, d);
            CHECK_EQ_INT(put(st, key, d, &err), 1);
        }
        for (int d = depth - 1; d >= 0; d--) {
            if (d == depth - 1 && round % 2)
                store_rollback(st);
            else
                CHECK_EQ_INT(store_commit(st, &err), 0);
        }
        CHECK_EQ_INT(store_tx_depth(st), 0);
    }
    /* even rounds keep all their rows, odd rounds lose their innermost row */
    int64_t want = 2;
    for (int round = 0; round < 50; round++)
        want += round % 2 ? round % 4 : 1 + round % 4;
    CHECK_EQ_INT(rows_in_t(st), want);

    /* a commit without a transaction is a bug, reported */
    CHECK(store_commit(st, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_INTERNAL);
    store_rollback(st); /* harmless */
    CHECK_EQ_INT(store_tx_depth(st), 0);
}

/* The outer transaction is really one: another connection sees nothing of it
 * until the outermost commit, savepoints included. */
struct peek {
    struct store *st;
    int64_t rows;
};

static void *peek_rows(void *arg)
{
    struct peek *p = arg;
    struct sl_error err = SL_ERROR_INIT;

    if (store_get_int(p->st, "SELECT COUNT(*) FROM t", DB_NO_ARGS, &p->rows, &err) != 1)
        p->rows = -1;
    return NULL;
}

static int64_t rows_seen_by_other_thread(struct store *st)
{
    struct peek p = { st, -2 };
    pthread_t th;

    pthread_create(&th, NULL, peek_rows, &p);
    pthread_join(th, NULL);
    return p.rows;
}

TEST(savepoints_stay_inside_the_outer_transaction)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    make_table(st);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ_INT(store_begin(st, &err), 0);
        CHECK_EQ_INT(store_begin(st, &err), 0);
        CHECK_EQ_INT(put(st, round == 0 ? "x" : round == 1 ? "y" : "z", round, &err), 1);
        CHECK_EQ_INT(store_commit(st, &err), 0);
        CHECK_EQ_INT(rows_seen_by_other_thread(st), round);
        CHECK_EQ_INT(store_begin(st, &err), 0);
        store_rollback(st);
        CHECK_EQ_INT(rows_seen_by_other_thread(st), round);
        CHECK_EQ_INT(store_commit(st, &err), 0);
        CHECK_EQ_INT(rows_seen_by_other_thread(st), round + 1);
    }
}

/* The cache keys statements by the address of their text: the same address
 * holding another text must not run the old statement. */
TEST(statement_cache_same_buffer_other_text)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    char sql[128];
    int64_t v = 0;

    make_table(st);
    snprintf(sql, sizeof(sql), "INSERT INTO t (k, v) VALUES ('one', 1)");
    CHECK_EQ_INT(store_exec(st, sql, DB_NO_ARGS, &err), 1);
    snprintf(sql, sizeof(sql), "INSERT INTO t (k, v) VALUES ('two', 2)");
    CHECK_EQ_INT(store_exec(st, sql, DB_NO_ARGS, &err), 1);
    snprintf(sql, sizeof(sql), "SELECT SUM(v) FROM t");
    CHECK_EQ_INT(store_get_int(st, sql, DB_NO_ARGS, &v, &err), 1);
    CHECK_EQ_INT(v, 3);
    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM t");
    CHECK_EQ_INT(store_get_int(st, sql, DB_NO_ARGS, &v, &err), 1);
    CHECK_EQ_INT(v, 2);
}

static int early_exit(struct store *st, bool fail_early, struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;

    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    if (put(st, "early", 1, err) < 0)
        return -1;
    if (fail_early)
        return sl_fail(err, SL_E_CONFLICT, "refused", "refused half-way");
    if (put(st, "late", 2, err) < 0)
        return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

TEST(cleanup_tx_rolls_back_early_exits)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    make_table(st);
    CHECK(early_exit(st, true, &err) < 0);
    CHECK_EQ_INT(store_tx_depth(st), 0);
    CHECK_EQ_INT(rows_in_t(st), 0);
    CHECK_EQ_INT(early_exit(st, false, &err), 0);
    CHECK_EQ_INT(rows_in_t(st), 2);

    /* nested inside an outer transaction: only the inner scope's work goes */
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "outer", 3, &err), 1);
    CHECK(early_exit(st, true, &err) < 0); /* "early" exists: a duplicate */
    CHECK_STR(err.code, "duplicate");
    CHECK_EQ_INT(store_tx_depth(st), 1);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    CHECK_EQ_INT(rows_in_t(st), 3);
}

TEST(unique_violation_is_conflict_duplicate)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    make_table(st);
    CHECK_EQ_INT(put(st, "k", 1, &err), 1);
    CHECK(put(st, "k", 2, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "duplicate");
    CHECK_EQ_INT(sl_error_http_status(err.kind), 409);

    /* a UNIQUE column, not only the primary key */
    CHECK_EQ_INT(store_exec(st,
                            "INSERT INTO users (id, email, name, password_hash, created_at)"
                            " VALUES ('u-1', 'a@b', '', 'x', 0)",
                            DB_NO_ARGS, &err),
                 1);
    sl_error_clear(&err);
    CHECK(store_exec(st,
                     "INSERT INTO users (id, email, name, password_hash, created_at)"
                     " VALUES ('u-2', 'a@b', '', 'x', 0)",
                     DB_NO_ARGS, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "duplicate");

    /* other constraints are not duplicates */
    sl_error_clear(&err);
    CHECK(store_exec(st,
                     "INSERT INTO users (id, email, name, password_hash, role, created_at)"
                     " VALUES ('u-3', 'c@d', '', 'x', 'king', 0)",
                     DB_NO_ARGS, &err) < 0);
    CHECK(err.kind != SL_E_CONFLICT);
    /* nor are syntax errors */
    sl_error_clear(&err);
    CHECK(store_exec(st, "INSERT INTO nowhere VALUES (1)", DB_NO_ARGS, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_INTERNAL);
    CHECK_STR(err.code, "store_error");
}

TEST(query_rows_and_nulls)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    int64_t v = 5;

    make_table(st);
    CHECK_EQ_INT(store_exec(st, "INSERT INTO t (k, v) VALUES (?1, ?2)",
                            DB_ARGS(DB_TEXT("n"), DB_NULL), &err),
                 1);
    CHECK_EQ_INT(store_exec(st, "INSERT INTO t (k, v) VALUES (?1, ?2)",
                            DB_ARGS(DB_TEXT("i"), DB_INT(INT64_MIN)), &err),
                 1);
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT k, v FROM t ORDER BY k", DB_NO_ARGS, &err);
    if (!CHECK(rows))
        return;
    CHECK_EQ_INT(db_next(rows, &err), 1);
    CHECK_STR(db_text(rows, 0), "i");
    CHECK_EQ_INT(db_int(rows, 1), INT64_MIN);
    CHECK(!db_null(rows, 1));
    CHECK_EQ_INT(db_next(rows, &err), 1);
    CHECK_STR(db_text(rows, 0), "n");
    CHECK(db_null(rows, 1));
    CHECK_STR(db_text(rows, 1), "");
    CHECK_EQ_INT(db_next(rows, &err), 0);
    CHECK_EQ_INT(
        store_get_int(st, "SELECT v FROM t WHERE k = ?1", DB_ARGS(DB_TEXT("none")), &v, &err), 0);
    CHECK_EQ_INT(v, 5);
    /* DB_TEXT(NULL) binds NULL */
    CHECK_EQ_INT(store_get_int(st, "SELECT ?1 IS NULL", DB_ARGS(DB_TEXT(NULL)), &v, &err), 1);
    CHECK_EQ_INT(v, 1);
    /* an optional filter: NULL matches all (PostgreSQL types such a NULL
     * by its other use, or as text) */
    static const char *const filter_sql = "SELECT COUNT(*) FROM t WHERE (?1 IS NULL OR k = ?1)"
                                          " AND (?3 IS NULL OR v > ?3) AND k != ?2";
    CHECK_EQ_INT(store_get_int(st, filter_sql, DB_ARGS(DB_NULL, DB_TEXT("x"), DB_NULL), &v, &err),
                 1);
    CHECK_EQ_INT(v, 2);
    CHECK_EQ_INT(
        store_get_int(st, filter_sql, DB_ARGS(DB_TEXT("i"), DB_TEXT("x"), DB_NULL), &v, &err), 1);
    CHECK_EQ_INT(v, 1);
    CHECK_EQ_INT(store_get_int(st, filter_sql, DB_ARGS(DB_NULL, DB_TEXT("x"), DB_INT(0)), &v, &err),
                 1);
    CHECK_EQ_INT(v, 0);
    /* a ?N inside a string is text, not a parameter; ten and more */
    CHECK_EQ_INT(store_get_int(st,
                               "SELECT COUNT(*) FROM t WHERE k != '?1' AND k = ?10 AND ?2 = 'b'"
                               " AND ?1 IS NULL",
                               DB_ARGS(DB_NULL, DB_TEXT("b"), DB_INT(3), DB_INT(4), DB_INT(5),
                                       DB_INT(6), DB_INT(7), DB_INT(8), DB_INT(9), DB_TEXT("i")),
                               &v, &err),
                 1);
    CHECK_EQ_INT(v, 1);
}

/* The same SQL text (same address) entered again while a query on it is
 * still open: the nested use gets its own statement. */
TEST(statement_cache_reentry)
{
    static const char *const select_sql = "SELECT k, v FROM t WHERE v >= ?1 ORDER BY v";
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    char key[16];

    make_table(st);
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_EQ_INT(put(st, key, i, &err), 1);
    }
    struct db_rows *outer = store_query(st, select_sql, DB_ARGS(DB_INT(0)), &err);
    if (!CHECK(outer))
        return;
    int seen = 0;
    while (db_next(outer, &err) == 1) {
        int64_t v = db_int(outer, 1);
        CHECK_EQ_INT(v, seen);
        /* the same text, nested, with other parameters */
        struct db_rows *inner = store_query(st, select_sql, DB_ARGS(DB_INT(v)), &err);
        if (!CHECK(inner))
            break;
        int n = 0;
        while (db_next(inner, &err) == 1) {
            CHECK_EQ_INT(db_int(inner, 1), v + n);
            n++;
        }
        CHECK_EQ_INT(n, 5 - v);
        db_rows_free(inner);
        /* and once more through store_get_int (its first column is text) */
        int64_t c = -1;
        CHECK_EQ_INT(store_get_int(st, select_sql, DB_ARGS(DB_INT(4)), &c, &err), 1);
        /* the outer row is intact */
        snprintf(key, sizeof(key), "k%d", seen);
        CHECK_STR(db_text(outer, 0), key);
        seen++;
    }
    CHECK_EQ_INT(seen, 5);
    db_rows_free(outer);
    /* the cached statement is usable afterwards, and reset */
    for (int i = 0; i < 3; i++) {
        cleanup_rows struct db_rows *again = store_query(st, select_sql, DB_ARGS(DB_INT(3)), &err);
        CHECK(again && db_next(again, &err) == 1 && db_int(again, 1) == 3);
    }
    /* a query freed before its end leaves the statement reusable */
    for (int i = 0; i < 200; i++) {
        cleanup_rows struct db_rows *r = store_query(st, select_sql, DB_ARGS(DB_INT(0)), &err);
        if (!CHECK(r && db_next(r, &err) == 1))
            break;
    }
}

/* Two threads, each with its own connection, write in transactions at once;
 * the busy timeout makes the second wait for the first instead of failing. */
struct writer {
    struct store *st;
    int id;
    int rounds;
    int hold_ms;
    int failures;
    char message[512];
};

static void *write_rows(void *arg)
{
    struct writer *w = arg;
    struct sl_error err = SL_ERROR_INIT;
    char key[32];

    for (int i = 0; i < w->rounds; i++) {
        if (store_begin(w->st, &err) < 0)
            goto fail;
        snprintf(key, sizeof(key), "w%d-%d", w->id, i);
        if (store_exec(w->st, "INSERT INTO t (k, v) VALUES (?1, ?2)",
                       DB_ARGS(DB_TEXT(key), DB_INT(w->id)), &err) < 0) {
            store_rollback(w->st);
            goto fail;
        }
        if (w->hold_ms)
            usleep((useconds_t)w->hold_ms * 1000);
        if (store_commit(w->st, &err) < 0)
            goto fail;
        continue;
    fail:
        w->failures++;
        snprintf(w->message, sizeof(w->message), "%s", err.message);
    }
    return NULL;
}

TEST(threads_write_concurrently)
{
    struct store *st = test_store();
    struct writer w[2];
    pthread_t th[2];

    make_table(st);
    for (int i = 0; i < 2; i++) {
        w[i] = (struct writer){ .st = st, .id = i, .rounds = 100 };
        pthread_create(&th[i], NULL, write_rows, &w[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        if (!CHECK_EQ_INT(w[i].failures, 0))
            printf("    writer %d: %s\n", i, w[i].message);
    }
    CHECK_EQ_INT(rows_in_t(st), 200);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM t WHERE v = 1"), 100);
}

TEST(busy_timeout_waits_for_the_writer)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    struct writer w = { .st = st, .id = 7, .rounds = 1, .hold_ms = 400 };
    pthread_t th;

    make_table(st);
    pthread_create(&th, NULL, write_rows, &w);
    usleep(100 * 1000); /* let the other thread take the write lock */
    int64_t started = sl_time_mono_ms();
    CHECK_EQ_INT(store_begin(st, &err), 0);
    int64_t waited = sl_time_mono_ms() - started;
    CHECK_EQ_INT(put(st, "main", 1, &err), 1);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    pthread_join(th, NULL);
    CHECK_EQ_INT(w.failures, 0);
    CHECK_EQ_INT(rows_in_t(st), 2);
    /* it waited for the other's commit (most of the 400 ms hold) */
    if (!CHECK(waited >= 150))
        printf("    waited only %lld ms\n", (long long)waited);
}

/* Lists page by an integer `seq` (store.h), never SQLite's rowid: the
 * tables keyed by a text id have one, and each new row gets its own, in
 * insertion order, without the INSERT naming it. */
TEST(text_keyed_tables_page_by_seq)
{
    static const char *const tables[] = { "users",       "tokens", "ssh_keys",
                                          "join_tokens", "nodes",  "images" };
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    for (size_t i = 0; i < ARRAY_SIZE(tables); i++) {
        cleanup_free char *sql =
            test_store_is_pg()
                ? xasprintf("SELECT COUNT(*) FROM information_schema.columns WHERE"
                            " table_schema = current_schema() AND table_name = '%s'"
                            " AND column_name = 'seq'",
                            tables[i])
                : xasprintf("SELECT COUNT(*) FROM pragma_table_info('%s') WHERE name = 'seq'",
                            tables[i]);
        if (!CHECK_EQ_INT(count(st, sql), 1))
            printf("    table %s has no seq\n", tables[i]);
    }
    const char *ids[] = { "u-c", "u-a", "u-b" }; /* not in id order */
    for (size_t i = 0; i < ARRAY_SIZE(ids); i++) {
        cleanup_free char *email = xasprintf("%s@example.com", ids[i]);
        CHECK_EQ_INT(store_exec(st,
                                "INSERT INTO users (id, email, name, password_hash, created_at)"
                                " VALUES (?1, ?2, 'n', 'x', 1)",
                                DB_ARGS(DB_TEXT(ids[i]), DB_TEXT(email)), &err),
                     1);
    }
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM users WHERE seq IS NULL"), 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(DISTINCT seq) FROM users"), 3);
    /* in the order they came */
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM users a JOIN users b ON a.seq < b.seq"
                           " WHERE a.id = 'u-c' AND b.id = 'u-a'"),
                 1);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM users a JOIN users b ON a.seq < b.seq"
                           " WHERE a.id = 'u-a' AND b.id = 'u-b'"),
                 1);
    test_store_close(st);
}

/* Group commit (store.c): transactions of several threads share one
 * commit, and each stays its own. */
struct peek_key {
    struct store *st;
    const char *key;
    int64_t rows;
};

static void *peek_key_rows(void *arg)
{
    struct peek_key *p = arg;
    struct sl_error err = SL_ERROR_INIT;

    if (store_get_int(p->st, "SELECT COUNT(*) FROM t WHERE k = ?1", DB_ARGS(DB_TEXT(p->key)),
                      &p->rows, &err) != 1)
        p->rows = -1;
    return NULL;
}

static int64_t key_seen_by_other_thread(struct store *st, const char *key)
{
    struct peek_key p = { st, key, -2 };
    pthread_t th;

    pthread_create(&th, NULL, peek_key_rows, &p);
    pthread_join(th, NULL);
    return p.rows;
}

struct batch_member {
    struct store *st;
    const char *key; /* the row it writes */
    enum {
        MEMBER_COMMITS,
        MEMBER_ROLLS_BACK,
        MEMBER_DUPLICATE,
        MEMBER_ALONE
    } how;
    int rc;
    int64_t seen_after; /* rows with its key another connection saw after it returned */
    char message[512];
};

static void *batch_member_run(void *arg)
{
    struct batch_member *m = arg;
    struct sl_error err = SL_ERROR_INIT;

    m->rc = 0;
    if (m->how == MEMBER_ALONE) {
        /* a statement outside a transaction joins the batch too */
        m->rc = put(m->st, m->key, 1, &err) == 1 ? 0 : -1;
    } else if (m->how == MEMBER_DUPLICATE) {
        /* fails inside the batch: the others' work stays */
        m->rc = put(m->st, "held", 1, &err) < 0 && strcmp(err.code, "duplicate") == 0 ? 0 : -1;
    } else if (store_begin(m->st, &err) < 0 || put(m->st, m->key, 1, &err) != 1) {
        m->rc = -1;
    } else if (m->how == MEMBER_ROLLS_BACK) {
        store_rollback(m->st);
    } else {
        m->rc = store_commit(m->st, &err);
    }
    if (m->rc < 0)
        snprintf(m->message, sizeof(m->message), "%s", err.message);
    /* once store_commit has returned, the row is committed: a connection
     * of another thread sees it */
    m->seen_after = key_seen_by_other_thread(m->st, m->key);
    return NULL;
}

TEST(group_commit_keeps_each_transaction_apart)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    struct batch_member m[] = {
        { .st = st, .key = "b", .how = MEMBER_COMMITS },
        { .st = st, .key = "c", .how = MEMBER_ROLLS_BACK },
        { .st = st, .key = "d", .how = MEMBER_ALONE },
        { .st = st, .key = "e", .how = MEMBER_DUPLICATE },
        { .st = st, .key = "f", .how = MEMBER_COMMITS },
    };
    pthread_t th[ARRAY_SIZE(m)];
    uint64_t tx0, commits0, tx1, commits1;

    make_table(st);
    store_stats(st, &tx0, &commits0);
    /* hold the writer while the others queue for it: they join one batch */
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "held", 1, &err), 1);
    for (size_t i = 0; i < ARRAY_SIZE(m); i++)
        pthread_create(&th[i], NULL, batch_member_run, &m[i]);
    usleep(200 * 1000);
    CHECK_EQ_INT(store_commit(st, &err), 0);
    /* committed when store_commit returned */
    CHECK_EQ_INT(key_seen_by_other_thread(st, "held"), 1);
    for (size_t i = 0; i < ARRAY_SIZE(m); i++) {
        pthread_join(th[i], NULL);
        if (!CHECK_EQ_INT(m[i].rc, 0))
            printf("    member %s: %s\n", m[i].key, m[i].message);
    }
    store_stats(st, &tx1, &commits1);
    /* the first holder left its batch open to the others */
    if (!CHECK(commits1 - commits0 < tx1 - tx0))
        printf("    %llu transactions in %llu commits\n", (unsigned long long)(tx1 - tx0),
               (unsigned long long)(commits1 - commits0));
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM t WHERE k IN ('held', 'b', 'd', 'f')"), 4);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM t WHERE k = 'c'"), 0);
    CHECK_EQ_INT(rows_in_t(st), 4);
    /* each one's row was committed when its store_commit returned: nothing
     * is acknowledged before the commit that makes it durable */
    for (size_t i = 0; i < ARRAY_SIZE(m); i++)
        if (!CHECK_EQ_INT(m[i].seen_after, m[i].how == MEMBER_COMMITS || m[i].how == MEMBER_ALONE))
            printf("    member %s\n", m[i].key);
}

/* gpu_free (migration 10) is what placement reads for candidate hosts: the
 * triggers keep it equal to the free GPUs of each host and model through
 * every kind of change to gpus. */
static int64_t gpu_free_wrong(struct store *st)
{
    return count(st, "SELECT COUNT(*) FROM (SELECT n.id AS node_id, m.id AS gpu_model_id"
                     " FROM nodes n, gpu_models m) p"
                     " WHERE COALESCE((SELECT free FROM gpu_free f WHERE f.node_id = p.node_id"
                     " AND f.gpu_model_id = p.gpu_model_id), 0) != (SELECT COUNT(*) FROM gpus g"
                     " WHERE g.node_id = p.node_id AND g.gpu_model_id = p.gpu_model_id"
                     " AND g.instance_id IS NULL)");
}

TEST(gpu_free_follows_gpus)
{
    static const char *const steps[] = {
        "INSERT INTO gpus (node_id, idx, uuid, name, gpu_model_id, vram_mib) VALUES"
        " ('n-a', 0, 'u0', 'x', 'm-1', 1), ('n-a', 1, 'u1', 'x', 'm-1', 1),"
        " ('n-a', 2, 'u2', 'x', 'm-2', 1), ('n-b', 0, 'u3', 'x', 'm-1', 1),"
        " ('n-b', 1, 'u4', 'x', NULL, 1)",
        /* reserved, then given back */
        "UPDATE gpus SET instance_id = 'i-1' WHERE node_id = 'n-a' AND idx IN (0, 1)",
        "UPDATE gpus SET instance_id = 'i-2' WHERE instance_id = 'i-1'",
        "UPDATE gpus SET instance_id = NULL WHERE instance_id = 'i-2' AND idx = 0",
        /* a heartbeat's upsert, unchanged and changed: the model comes and goes */
        "INSERT INTO gpus (node_id, idx, uuid, name, gpu_model_id, vram_mib) VALUES"
        " ('n-a', 0, 'u0', 'x', 'm-1', 1) ON CONFLICT (node_id, idx) DO UPDATE SET"
        " gpu_model_id = excluded.gpu_model_id",
        "UPDATE gpus SET gpu_model_id = 'm-1' WHERE node_id = 'n-b' AND idx = 1",
        "UPDATE gpus SET gpu_model_id = 'm-2' WHERE node_id = 'n-a' AND idx = 0",
        "UPDATE gpus SET gpu_model_id = NULL WHERE node_id = 'n-a' AND idx = 2",
        "UPDATE gpus SET gpu_model_id = 'm-2' WHERE node_id = 'n-a' AND idx = 1",
        /* a held GPU whose model changes stays out of the count */
        "UPDATE gpus SET instance_id = NULL WHERE node_id = 'n-a' AND idx = 1",
        /* gone from the host, one by one and all at once (a removed host) */
        "DELETE FROM gpus WHERE node_id = 'n-a' AND idx = 0",
        "DELETE FROM gpus WHERE node_id = 'n-b'",
        "DELETE FROM gpus",
    };
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    CHECK(store_exec(st, "INSERT INTO regions (id, name, created_at) VALUES ('r', 'r', 1)",
                     DB_NO_ARGS, &err) >= 0);
    CHECK(store_exec(st,
                     "INSERT INTO gpu_models (id, name, vram_mib, cpu_cores_per_gpu,"
                     " memory_mib_per_gpu, created_at) VALUES ('m-1', 'one', 1, 1, 1, 1),"
                     " ('m-2', 'two', 1, 1, 1, 1)",
                     DB_NO_ARGS, &err) == 2);
    CHECK(
        store_exec(st,
                   "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                   " ssh_port_min, ssh_port_max, created_at) VALUES"
                   " ('n-a', 'a', 'a', 'r', 'ha', 1, 2, 1), ('n-b', 'b', 'b', 'r', 'hb', 1, 2, 1)",
                   DB_NO_ARGS, &err) == 2);
    for (size_t i = 0; i < ARRAY_SIZE(steps); i++) {
        if (!CHECK(store_exec(st, steps[i], DB_NO_ARGS, &err) >= 0))
            printf("    step %zu: %s\n", i, err.message);
        if (!CHECK_EQ_INT(gpu_free_wrong(st), 0))
            printf("    after step %zu: %s\n", i, steps[i]);
    }
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM gpu_free WHERE free != 0"), 0);
    test_store_close(st);
}

/* The two backends' migrations build the same tables with the same
 * columns (store-pg-schema.c translates store-sqlite-schema.c by hand): a
 * migration added to one list and not the other, or a column that differs,
 * fails here. Runs where both backends are at hand (the PostgreSQL pass). */
static char *schema_columns(struct store *st, const char *sql)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_rows struct db_rows *rows = store_query(st, sql, DB_NO_ARGS, &err);
    char *out = xstrdup("");

    if (!rows) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return out;
    }
    while (db_next(rows, &err) == 1) {
        char *next = xasprintf("%s%s.%s\n", out, db_text(rows, 0), db_text(rows, 1));
        free(out);
        out = next;
    }
    return out;
}

TEST(schemas_match_across_backends)
{
    struct sl_error err = SL_ERROR_INIT;
    int have, want_pg, want_sqlite = 0;

    if (!test_store_is_pg()) {
        printf("  (compared in the PostgreSQL pass)\n");
        return;
    }
    struct store *pg = test_store();
    cleanup_free char *uri = xasprintf("sqlite:%s/schema.db", test_tmpdir());
    struct store *sq = store_open(uri, &err);
    if (!CHECK(sq) || !CHECK_EQ_INT(store_migrate(sq, &err), 0))
        return;
    CHECK_EQ_INT(store_schema_version(pg, &have, &want_pg, &err), 0);
    CHECK_EQ_INT(store_schema_version(sq, &have, &want_sqlite, &err), 0);
    CHECK_EQ_INT(want_pg, want_sqlite);
    cleanup_free char *a = schema_columns(
        sq, "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p"
            " WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.name");
    cleanup_free char *b =
        schema_columns(pg, "SELECT table_name, column_name FROM information_schema.columns"
                           " WHERE table_schema = current_schema()"
                           " ORDER BY table_name COLLATE \"C\", column_name COLLATE \"C\"");
    if (!CHECK_STR(b, a))
        printf("    sqlite:\n%s\n    postgres:\n%s\n", a, b);
    /* and the same indexes by name */
    cleanup_free char *ia =
        schema_columns(sq, "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index'"
                           " AND name NOT LIKE 'sqlite_%' ORDER BY tbl_name, name");
    cleanup_free char *ib = schema_columns(
        pg, "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '%_key'"
            " ORDER BY tablename COLLATE \"C\", indexname COLLATE \"C\"");
    if (!CHECK_STR(ib, ia))
        printf("    sqlite indexes:\n%s\n    postgres indexes:\n%s\n", ia, ib);
    store_close(sq);
}

/* PostgreSQL only: a connection the server ends fails with
 * SL_E_UNAVAILABLE, and the store connects again afterwards; one lost
 * inside a transaction refuses the rest of it rather than run it as
 * statements of their own. */
static void end_other_connections(void)
{
    struct sl_error err = SL_ERROR_INIT;
    struct store *admin = store_open(getenv("SUANLI_TEST_PG"), &err);
    int64_t n = -1;

    if (!admin) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    if (store_get_int(admin,
                      "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND pid != pg_backend_pid()"
                      " AND backend_type = 'client backend'",
                      DB_NO_ARGS, &n, &err) != 1)
        test_fail(__FILE__, __LINE__, "%s", err.message);
    store_close(admin);
}

TEST(pg_connection_loss)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t v = 0;

    if (!test_store_is_pg())
        return;
    struct store *st = test_store();
    make_table(st);
    CHECK_EQ_INT(put(st, "a", 1, &err), 1);

    /* idle connections, the writer's and a reader's: a read and the next
     * transaction connect again (nothing of theirs had run) */
    end_other_connections();
    usleep(100 * 1000);
    CHECK_EQ_INT(store_get_int(st, "SELECT COUNT(*) FROM t", DB_NO_ARGS, &v, &err), 1);
    CHECK_EQ_INT(v, 1);
    CHECK_EQ_INT(put(st, "a2", 1, &err), 1);
    CHECK_EQ_INT(store_exec(st, "DELETE FROM t WHERE k = 'a2'", DB_NO_ARGS, &err), 1);

    /* the writer, inside a transaction */
    CHECK_EQ_INT(store_begin(st, &err), 0);
    CHECK_EQ_INT(put(st, "b", 2, &err), 1);
    end_other_connections();
    usleep(100 * 1000);
    CHECK(put(st, "c", 3, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_UNAVAILABLE);
    sl_error_clear(&err);
    /* nothing after the loss runs on its own */
    CHECK(put(st, "d", 4, &err) < 0);
    CHECK_EQ_INT(err.kind, SL_E_UNAVAILABLE);
    CHECK(store_commit(st, &err) < 0);
    CHECK_EQ_INT(store_tx_depth(st), 0);
    /* the next transaction connects again */
    CHECK_EQ_INT(put(st, "e", 5, &err), 1);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM t WHERE k IN ('b', 'c', 'd')"), 0);
    CHECK_EQ_INT(rows_in_t(st), 2);
}

/* PostgreSQL only: two writers on one database (two stores here; several
 * suanlid replicas later) whose transactions read what the other writes:
 * SERIALIZABLE refuses one of them, as SQLite's busy store would,
 * SL_E_UNAVAILABLE "store_busy", and nothing of it stays. */
TEST(pg_serialization_failure_is_busy)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t sum = 0;

    if (!test_store_is_pg())
        return;
    struct store *a = test_store();
    make_table(a);
    CHECK_EQ_INT(put(a, "k", 1, &err), 1);
    struct store *b = store_open(test_store_uri(), &err);
    if (!CHECK(b))
        return;
    CHECK_EQ_INT(store_begin(a, &err), 0);
    CHECK_EQ_INT(store_begin(b, &err), 0);
    CHECK_EQ_INT(store_get_int(a, "SELECT SUM(v) FROM t", DB_NO_ARGS, &sum, &err), 1);
    CHECK_EQ_INT(put(a, "a", sum, &err), 1);
    CHECK_EQ_INT(store_get_int(b, "SELECT SUM(v) FROM t", DB_NO_ARGS, &sum, &err), 1);
    int rc = put(b, "b", sum, &err);
    CHECK_EQ_INT(store_commit(a, &err), 0);
    if (rc >= 0)
        rc = store_commit(b, &err);
    else
        store_rollback(b);
    CHECK(rc < 0);
    CHECK_EQ_INT(err.kind, SL_E_UNAVAILABLE);
    CHECK_STR(err.code, "store_busy");
    CHECK_EQ_INT(store_tx_depth(b), 0);
    CHECK_EQ_INT(count(a, "SELECT COUNT(*) FROM t WHERE k = 'b'"), 0);
    CHECK_EQ_INT(rows_in_t(a), 2);
    /* the refused writer's next transaction goes through */
    CHECK_EQ_INT(put(b, "c", 3, &err), 1);
    CHECK_EQ_INT(rows_in_t(a), 3);
    store_close(b);
}
