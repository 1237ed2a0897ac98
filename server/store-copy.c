/* store_copy (store-copy.h): the tables are read from the schemas, never
 * listed here, so a table added by a later migration is copied too; the
 * two sides must list the same tables and columns. Rows go in dependency
 * order (the target's foreign keys), in multi-row INSERTs, with the
 * target's own triggers off (revision counters, the free-GPU counts and
 * the append-only guards: their tables are copied as they are), and the
 * identity columns' sequences are set past the largest value copied. */
#include "store-copy.h"

#include "ledger.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COPY_MAX_TABLES  128
#define COPY_MAX_COLUMNS 64
#define COPY_MAX_PARAMS  20000 /* per INSERT: well under the protocol's 65535 */
#define COPY_MAX_ROWS    200   /* per INSERT */

struct copy_table {
    char *name;
    int64_t rows;
    bool done;
};

struct copy_tables {
    struct copy_table t[COPY_MAX_TABLES];
    int n;
};

struct copy_column {
    char *name;
    bool integer;  /* sent as an integer parameter */
    bool identity; /* its sequence is reset after the copy */
};

static void tables_release(struct copy_tables *ts)
{
    for (int i = 0; i < ts->n; i++)
        free(ts->t[i].name);
    ts->n = 0;
}
#define cleanup_tables __attribute__((cleanup(tables_release)))

static bool is_pg(struct store *st)
{
    return strcmp(store_backend(st), "postgres") == 0;
}

/* Names are SQL identifiers from the schema itself; quoted all the same,
 * and refused if they could not be. */
static int check_name(const char *name, struct sl_error *err)
{
    if (!*name || strlen(name) >= 64 || strpbrk(name, "\"'\\"))
        return sl_fail(err, SL_E_INVALID, "schema_mismatch", "unexpected table name '%s'", name);
    return 0;
}

static int list_tables(struct store *st, struct copy_tables *ts, struct sl_error *err)
{
    const char *sql = is_pg(st) ? "SELECT table_name FROM information_schema.tables"
                                  " WHERE table_schema = current_schema()"
                                  " AND table_type = 'BASE TABLE' ORDER BY table_name"
                                : "SELECT name FROM sqlite_master WHERE type = 'table'"
                                  " AND name NOT LIKE 'sqlite%' ORDER BY name";
    cleanup_rows struct db_rows *rows = store_query(st, sql, DB_NO_ARGS, err);
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        if (ts->n == COPY_MAX_TABLES)
            return sl_fail(err, SL_E_INTERNAL, "too_many_tables", "more than %d tables",
                           COPY_MAX_TABLES);
        if (check_name(db_text(rows, 0), err) < 0)
            return -1;
        ts->t[ts->n++].name = xstrdup(db_text(rows, 0));
    }
    return rc;
}

static int find_table(const struct copy_tables *ts, const char *name)
{
    for (int i = 0; i < ts->n; i++)
        if (strcmp(ts->t[i].name, name) == 0)
            return i;
    return -1;
}

static int same_tables(const struct copy_tables *a, const struct copy_tables *b, const char *a_name,
                       const char *b_name, struct sl_error *err)
{
    for (int i = 0; i < a->n; i++)
        if (find_table(b, a->t[i].name) < 0)
            return sl_fail(err, SL_E_INVALID, "schema_mismatch",
                           "table '%s' is in the %s database but not in the %s one", a->t[i].name,
                           a_name, b_name);
    return 0;
}

/* Whether every table that `table` refers to (a foreign key on the
 * target) is copied already. */
static int parents_done(struct store *dst, const struct copy_tables *ts, const char *table,
                        bool *ready, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(dst,
                    "SELECT p.relname FROM pg_constraint k"
                    " JOIN pg_class c ON c.oid = k.conrelid"
                    " JOIN pg_class p ON p.oid = k.confrelid"
                    " WHERE k.contype = 'f' AND c.relname = ?1"
                    " AND c.relnamespace = to_regnamespace(current_schema())",
                    DB_ARGS(DB_TEXT(table)), err);
    int rc;

    *ready = true;
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        int i = find_table(ts, db_text(rows, 0));
        if (i >= 0 && !ts->t[i].done && strcmp(db_text(rows, 0), table) != 0)
            *ready = false;
    }
    return rc;
}

/* The target's tables, parents before children: order[] indexes ts. */
static int dependency_order(struct store *dst, struct copy_tables *ts, int *order,
                            struct sl_error *err)
{
    int placed = 0;

    while (placed < ts->n) {
        int before = placed;
        for (int i = 0; i < ts->n; i++) {
            bool ready;
            if (ts->t[i].done)
                continue;
            if (parents_done(dst, ts, ts->t[i].name, &ready, err) < 0)
                return -1;
            if (ready) {
                ts->t[i].done = true;
                order[placed++] = i;
            }
        }
        if (placed == before)
            return sl_fail(err, SL_E_INTERNAL, "schema_mismatch",
                           "the target's foreign keys form a cycle");
    }
    return 0;
}

static void columns_release(struct copy_column *cols, int n)
{
    for (int i = 0; i < n; i++)
        free(cols[i].name);
}

/* The columns of a table, in order, with their types on the target. */
static int list_columns(struct store *st, const char *table, struct copy_column *cols, int *n,
                        struct sl_error *err)
{
    const char *sql = is_pg(st) ? "SELECT column_name, data_type, is_identity"
                                  " FROM information_schema.columns"
                                  " WHERE table_schema = current_schema() AND table_name = ?1"
                                  " ORDER BY ordinal_position"
                                : "SELECT name, type, 'NO' FROM pragma_table_info(?1) ORDER BY cid";
    cleanup_rows struct db_rows *rows = store_query(st, sql, DB_ARGS(DB_TEXT(table)), err);
    int rc;

    *n = 0;
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        const char *type = db_text(rows, 1);
        if (*n == COPY_MAX_COLUMNS)
            return sl_fail(err, SL_E_INTERNAL, "schema_mismatch", "table '%s' has over %d columns",
                           table, COPY_MAX_COLUMNS);
        if (check_name(db_text(rows, 0), err) < 0)
            return -1;
        cols[*n].name = xstrdup(db_text(rows, 0));
        cols[*n].integer = strcasestr(type, "int") != NULL;
        cols[*n].identity = strcmp(db_text(rows, 2), "YES") == 0;
        (*n)++;
    }
    return rc;
}

static int same_columns(const char *table, struct copy_column *a, int na, struct copy_column *b,
                        int nb, struct sl_error *err)
{
    for (int i = 0; i < na; i++) {
        bool found = false;
        for (int j = 0; j < nb && !found; j++)
            found = strcmp(a[i].name, b[j].name) == 0;
        if (!found)
            return sl_fail(err, SL_E_INVALID, "schema_mismatch", "column %s.%s is on one side only",
                           table, a[i].name);
    }
    return na == nb ? 0
                    : sl_fail(err, SL_E_INVALID, "schema_mismatch",
                              "table '%s' has %d columns in the source, %d in the target", table,
                              nb, na);
}

/* One batch of rows: the INSERT's text and parameters. */
struct copy_batch {
    struct sl_buf sql;
    struct db_arg *args;
    char **texts;
    int nargs, rows;
};

static void batch_clear(struct copy_batch *b)
{
    for (int i = 0; i < b->nargs; i++) {
        free(b->texts[i]);
        b->texts[i] = NULL; /* the slot may hold a NULL or an integer next */
    }
    b->nargs = 0;
    b->rows = 0;
}

static int batch_flush(struct store *dst, const char *head, struct copy_batch *b,
                       struct sl_error *err)
{
    int rc = 0;

    if (b->rows == 0)
        return 0;
    b->args[b->nargs].type = DB_ARG_END;
    sl_buf_reset(&b->sql);
    sl_buf_adds(&b->sql, head);
    for (int r = 0, k = 0, per = b->nargs / b->rows; r < b->rows; r++) {
        sl_buf_adds(&b->sql, r ? ", (" : " (");
        for (int c = 0; c < per; c++, k++) {
            char p[16];
            snprintf(p, sizeof(p), "%s?%d", c ? ", " : "", k + 1);
            sl_buf_adds(&b->sql, p);
        }
        sl_buf_adds(&b->sql, ")");
    }
    sl_buf_add(&b->sql, "", 1);
    if (store_exec(dst, b->sql.data, b->args, err) < 0)
        rc = -1;
    batch_clear(b);
    return rc;
}

static int copy_rows(struct store *src, struct store *dst, const char *table,
                     const struct copy_column *cols, int n, struct sl_error *err)
{
    cleanup_buf struct sl_buf select = SL_BUF_INIT, head = SL_BUF_INIT;
    int per_batch = COPY_MAX_PARAMS / n < COPY_MAX_ROWS ? COPY_MAX_PARAMS / n : COPY_MAX_ROWS;
    struct copy_batch b = { .sql = SL_BUF_INIT };
    int rc;

    sl_buf_adds(&select, "SELECT ");
    sl_buf_adds(&head, "INSERT INTO \"");
    sl_buf_adds(&head, table);
    sl_buf_adds(&head, "\" (");
    for (int c = 0; c < n; c++) {
        sl_buf_adds(&select, c ? ", \"" : "\"");
        sl_buf_adds(&select, cols[c].name);
        sl_buf_adds(&select, "\"");
        sl_buf_adds(&head, c ? ", \"" : "\"");
        sl_buf_adds(&head, cols[c].name);
        sl_buf_adds(&head, "\"");
    }
    sl_buf_adds(&select, " FROM \"");
    sl_buf_adds(&select, table);
    sl_buf_add(&select, "\"", 2);
    sl_buf_add(&head, ") VALUES", 9);

    cleanup_rows struct db_rows *rows = store_query(src, select.data, DB_NO_ARGS, err);
    if (!rows)
        return -1;
    b.args = xcalloc((size_t)(per_batch * n + 1), sizeof(*b.args));
    b.texts = xcalloc((size_t)(per_batch * n + 1), sizeof(*b.texts));
    while ((rc = db_next(rows, err)) == 1) {
        for (int c = 0; c < n; c++, b.nargs++) {
            if (db_null(rows, c))
                b.args[b.nargs] = DB_NULL;
            else if (cols[c].integer)
                b.args[b.nargs] = DB_INT(db_int(rows, c));
            else {
                b.texts[b.nargs] = xstrdup(db_text(rows, c));
                b.args[b.nargs] = DB_TEXT(b.texts[b.nargs]);
            }
        }
        if (++b.rows == per_batch && batch_flush(dst, head.data, &b, err) < 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && batch_flush(dst, head.data, &b, err) < 0)
        rc = -1;
    batch_clear(&b);
    free(b.args);
    free(b.texts);
    sl_buf_release(&b.sql);
    if (rc < 0)
        sl_error_prefix(err, "copying table %s", table);
    return rc;
}

/* Identity columns continue past the largest value copied. */
static int reset_identities(struct store *dst, const char *table, const struct copy_column *cols,
                            int n, struct sl_error *err)
{
    for (int c = 0; c < n; c++) {
        if (!cols[c].identity)
            continue;
        cleanup_free char *qualified = xasprintf("\"%s\"", table);
        cleanup_free char *sql =
            xasprintf("SELECT setval(pg_get_serial_sequence(?1, ?2), COALESCE(MAX(\"%s\"), 0) + 1,"
                      " false) FROM \"%s\"",
                      cols[c].name, table);
        int64_t v;
        if (store_get_int(dst, sql, DB_ARGS(DB_TEXT(qualified), DB_TEXT(cols[c].name)), &v, err) <
            0)
            return -1;
    }
    return 0;
}

static int set_triggers(struct store *dst, const char *table, bool on, struct sl_error *err)
{
    cleanup_free char *sql =
        xasprintf("ALTER TABLE \"%s\" %s TRIGGER USER", table, on ? "ENABLE" : "DISABLE");
    return store_exec(dst, sql, DB_NO_ARGS, err) < 0 ? -1 : 0;
}

static int count_rows(struct store *st, const char *table, int64_t *n, struct sl_error *err)
{
    cleanup_free char *sql = xasprintf("SELECT COUNT(*) FROM \"%s\"", table);
    return store_get_int(st, sql, DB_NO_ARGS, n, err) < 0 ? -1 : 0;
}

static int copy_table(struct store *src, struct store *dst, const char *table, struct sl_error *err)
{
    struct copy_column dcols[COPY_MAX_COLUMNS], scols[COPY_MAX_COLUMNS];
    int nd = 0, ns = 0, rc;

    rc = list_columns(dst, table, dcols, &nd, err);
    if (rc == 0)
        rc = list_columns(src, table, scols, &ns, err);
    if (rc == 0)
        rc = same_columns(table, dcols, nd, scols, ns, err);
    if (rc == 0)
        rc = copy_rows(src, dst, table, dcols, nd, err);
    if (rc == 0)
        rc = reset_identities(dst, table, dcols, nd, err);
    columns_release(dcols, nd);
    columns_release(scols, ns);
    return rc;
}

static int check_ledger(struct store *src, struct store *dst, struct sl_error *err)
{
    struct ledger_check a, b;

    if (ledger_check(src, &a, err) < 0 || ledger_check(dst, &b, err) < 0)
        return -1;
    if (b.bad_balances || b.unbalanced_txns || b.bad_running || a.accounts != b.accounts ||
        a.transactions != b.transactions)
        return sl_fail(err, SL_E_INTERNAL, "ledger_check",
                       "the ledger check fails on the copy: %lld bad balances, %lld unbalanced "
                       "transactions, %lld bad running balances (source: %lld, %lld, %lld)",
                       (long long)b.bad_balances, (long long)b.unbalanced_txns,
                       (long long)b.bad_running, (long long)a.bad_balances,
                       (long long)a.unbalanced_txns, (long long)a.bad_running);
    return 0;
}

/* Inside both transactions. */
static int copy_all(struct store *src, struct store *dst, struct copy_tables *ts,
                    struct sl_error *err)
{
    cleanup_tables struct copy_tables dts = { 0 };
    int order[COPY_MAX_TABLES];

    if (list_tables(src, ts, err) < 0 || list_tables(dst, &dts, err) < 0 ||
        same_tables(ts, &dts, "source", "target", err) < 0 ||
        same_tables(&dts, ts, "target", "source", err) < 0 ||
        dependency_order(dst, ts, order, err) < 0)
        return -1;
    /* the migrations' own rows (the revenue account, cursors, versions)
     * give way to the source's */
    for (int i = 0; i < ts->n; i++)
        if (set_triggers(dst, ts->t[i].name, false, err) < 0)
            return -1;
    for (int i = ts->n - 1; i >= 0; i--) {
        cleanup_free char *sql = xasprintf("DELETE FROM \"%s\"", ts->t[order[i]].name);
        if (store_exec(dst, sql, DB_NO_ARGS, err) < 0)
            return -1;
    }
    for (int i = 0; i < ts->n; i++)
        if (copy_table(src, dst, ts->t[order[i]].name, err) < 0)
            return -1;
    for (int i = 0; i < ts->n; i++)
        if (set_triggers(dst, ts->t[i].name, true, err) < 0)
            return -1;
    for (int i = 0; i < ts->n; i++) {
        int64_t n_src, n_dst;
        if (count_rows(src, ts->t[i].name, &n_src, err) < 0 ||
            count_rows(dst, ts->t[i].name, &n_dst, err) < 0)
            return -1;
        if (n_src != n_dst)
            return sl_fail(err, SL_E_INTERNAL, "row_count",
                           "table %s: %lld rows in the source, %lld in the copy", ts->t[i].name,
                           (long long)n_src, (long long)n_dst);
        ts->t[i].rows = n_dst;
    }
    return check_ledger(src, dst, err);
}

int store_copy(struct store *src, struct store *dst,
               void (*report)(const char *table, int64_t rows, void *ctx), void *ctx,
               struct sl_error *err)
{
    cleanup_tables struct copy_tables ts = { 0 };
    int have, want;

    if (!is_pg(dst))
        return sl_fail(err, SL_E_INVALID, "unsupported_store",
                       "the target must be a PostgreSQL database (postgres://...)");
    if (store_begin(src, err) < 0)
        return -1;
    cleanup_tx struct store *src_tx = src;
    if (store_schema_version(src, &have, &want, err) < 0)
        return -1;
    if (have != want)
        return sl_fail(err, SL_E_INVALID, "schema_version",
                       "the source has schema version %d and this suanlid %d: start this "
                       "suanlid on it once (it migrates at start), stop it, then migrate",
                       have, want);
    if (store_begin(dst, err) < 0)
        return -1;
    cleanup_tx struct store *dst_tx = dst;
    if (store_schema_version(dst, &have, &want, err) < 0)
        return -1;
    if (have != 0)
        return sl_fail(err, SL_E_INVALID, "not_empty",
                       "the target database already holds a suanli schema (version %d): "
                       "migrate copies into an empty database only (createdb a new one)",
                       have);
    if (store_migrate(dst, err) < 0 || copy_all(src, dst, &ts, err) < 0)
        return -1;
    if (store_commit(dst, err) < 0)
        return -1;
    dst_tx = NULL;
    for (int i = 0; i < ts.n && report; i++)
        report(ts.t[i].name, ts.t[i].rows, ctx);
    return 0;
}
