/* PostgreSQL backend of the store (libpq): one connection per thread and
 * the store's one writer, as with SQLite. The callers' portable SQL
 * (store.h) reaches PostgreSQL with its ?N parameters renumbered $N; an
 * integer parameter is an int8, a text one text, and a NULL the literal
 * NULL in the text (translate()).
 *
 * SQLite undoes a failed statement alone and keeps its transaction;
 * PostgreSQL aborts the whole transaction. Callers rely on the former (a
 * duplicate insert they answer, then go on), so a statement run inside a
 * transaction is wrapped in a savepoint of its own, released when it
 * succeeds and rolled back to when it fails; the three go in one round
 * trip (pipeline mode). A query is not wrapped (see pg_query). Statements
 * are prepared once per connection (struct pg_stmt).
 *
 * A lost connection fails with SL_E_UNAVAILABLE; a connection lost outside
 * a transaction is made again at its next statement, one lost inside a
 * transaction only at the next BEGIN, so the rest of that transaction never
 * runs as statements of their own. Serialization failures and deadlocks
 * (40001, 40P01) fail as SQLite's busy store does: SL_E_UNAVAILABLE,
 * "store_busy" (docs/design/control-plane.md, "PostgreSQL"). */
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* pg_type.h's OIDs of the types parameters and booleans are sent as */
#define PG_BOOLOID 16
#define PG_INT8OID 20
#define PG_TEXTOID 25

/* the protocol's limit: a parameter count is 16 bits */
#define PG_MAX_PARAMS 65535

/* Prepared statements, per connection (PQprepare once, PQexecPrepared
 * after): keyed by the statement's text as sent (NULL parameters are in
 * it) and its parameters' types, named sl_N with N never reused on the
 * connection. At most PG_STMT_MAX; past that a statement is sent with its
 * text each time. Forgotten on a new connection and after a script (a
 * migration may change what they refer to). */
#define PG_STMT_SLOTS 2048 /* a power of two, twice PG_STMT_MAX */
#define PG_STMT_MAX   1024

struct pg_stmt {
    char *key; /* NULL: a free slot */
    unsigned id;
};

struct pg_conn {
    PGconn *pg;
    char *target;
    bool lost_in_tx;       /* the connection went while a transaction was open */
    struct pg_stmt *stmts; /* PG_STMT_SLOTS, open addressing */
    int nstmts;
    unsigned next_id;
};

struct db_rows {
    const struct store_ops *ops; /* must be first: see store.c */
    PGresult *res;
    int row;   /* the current row; -1 before the first */
    int nrows; /* rows in res */
};

extern const char *const pg_migrations[];

/* What a failed result or connection means for the caller. */
static int fail_pg(struct sl_error *err, struct pg_conn *c, const PGresult *res, const char *what)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : NULL;
    char text[512];
    size_t n;

    if (!msg || !*msg)
        msg = PQerrorMessage(c->pg);
    snprintf(text, sizeof(text), "%s", msg ? msg : "unknown error");
    n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
        text[--n] = '\0';
    /* the server gives every error of its own a SQLSTATE: one without is
     * libpq's, the connection's */
    if (PQstatus(c->pg) == CONNECTION_BAD || !state || strncmp(state, "08", 2) == 0)
        return sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable",
                       "the database connection is lost (%s); try again in a moment", text);
    if (state && strcmp(state, "23505") == 0)
        return sl_fail(err, SL_E_CONFLICT, "duplicate", "%s: %s", what, text);
    if (state &&
        (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 || strcmp(state, "55P03") == 0))
        return sl_fail(err, SL_E_UNAVAILABLE, "store_busy",
                       "the database is busy; try again in a moment");
    if (state && (strcmp(state, "53100") == 0 || strncmp(state, "57P", 3) == 0))
        return sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable",
                       "the database is unavailable (%s); try again in a moment", text);
    return sl_fail(err, SL_E_INTERNAL, "store_error", "%s: %s", what, text);
}

/* An internal error names its statement (the text, never the values). */
static void name_statement(struct sl_error *err, const char *sql)
{
    if (err && err->kind == SL_E_INTERNAL)
        sl_error_prefix(err, "\"%.100s%s\"", sql, strlen(sql) > 100 ? "..." : "");
}

static void pg_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* NOTICEs (IF NOT EXISTS, ...) are not errors */
}

/* target: what follows "postgres:" in the store URI; libpq takes the whole
 * URI back, or a conninfo string after "postgres:" alone. */
static char *conninfo_of(const char *target)
{
    return strncmp(target, "//", 2) == 0 ? xasprintf("postgresql:%s", target) : xstrdup(target);
}

static PGconn *pg_open(const char *target, struct sl_error *err)
{
    cleanup_free char *conninfo = conninfo_of(target);
    PGconn *pg;

    pg = PQconnectdb(conninfo);
    if (!pg) {
        sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable", "unable to connect to PostgreSQL");
        return NULL;
    }
    if (PQstatus(pg) != CONNECTION_OK) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", PQerrorMessage(pg));
        msg[strcspn(msg, "\n")] = '\0';
        sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable",
                "unable to connect to PostgreSQL: %s; check the store URI and that the server runs",
                msg);
        PQfinish(pg);
        return NULL;
    }
    PQsetNoticeProcessor(pg, pg_notice, NULL);
    return pg;
}

static int pg_setup(PGconn *pg, struct sl_error *err)
{
    /* the store's times are integers it writes itself; statements never
     * wait long for a lock: the single writer holds none a reader wants */
    PGresult *res = PQexec(pg, "SET client_min_messages = warning;"
                               " SET lock_timeout = '10s'");
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;

    if (!ok)
        sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable", "unable to configure PostgreSQL: %s",
                PQresultErrorMessage(res));
    PQclear(res);
    return ok ? 0 : -1;
}

/* Lists ordered by a text column come out in SQLite's byte order only
 * under the C collation: said once, by the writer, when the database has
 * another. */
static void pg_check_collation(PGconn *pg)
{
    PGresult *res = PQexec(pg, "SELECT datcollate FROM pg_database"
                               " WHERE datname = current_database()");

    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
        const char *coll = PQgetvalue(res, 0, 0);
        if (strcmp(coll, "C") != 0 && strcmp(coll, "POSIX") != 0 && strncasecmp(coll, "C.", 2) != 0)
            log_warn("store: the database's collation is '%s': lists ordered by name differ "
                     "from SQLite's byte order; create it with --locale=C.UTF-8 "
                     "(docs/operations.md)",
                     coll);
    }
    PQclear(res);
}

static void *pg_connect(const char *target, bool writer, struct sl_error *err)
{
    struct pg_conn *c;
    PGconn *pg = pg_open(target, err);

    if (!pg)
        return NULL;
    if (pg_setup(pg, err) < 0) {
        PQfinish(pg);
        return NULL;
    }
    if (writer)
        pg_check_collation(pg);
    c = xzalloc(sizeof(*c));
    c->pg = pg;
    c->target = xstrdup(target);
    return c;
}

static void stmts_forget(struct pg_conn *c)
{
    for (int i = 0; c->stmts && i < PG_STMT_SLOTS; i++) {
        free(c->stmts[i].key);
        c->stmts[i].key = NULL;
    }
    c->nstmts = 0;
}

static void pg_disconnect(void *p)
{
    struct pg_conn *c = p;

    if (!c)
        return;
    stmts_forget(c);
    free(c->stmts);
    PQfinish(c->pg);
    free(c->target);
    free(c);
}

static bool starts_with_word(const char *sql, const char *word)
{
    size_t n = strlen(word);
    while (*sql == ' ' || *sql == '\n' || *sql == '\t')
        sql++;
    return strncasecmp(sql, word, n) == 0 &&
           (sql[n] == '\0' || sql[n] == ' ' || sql[n] == ';' || sql[n] == '\n');
}

/* Makes a lost connection again when that is safe (see the top). Returns 0
 * when the connection is usable. */
static int pg_ensure(struct pg_conn *c, const char *sql, struct sl_error *err)
{
    if (PQstatus(c->pg) == CONNECTION_OK)
        return 0;
    if (c->lost_in_tx && !starts_with_word(sql, "BEGIN"))
        return sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable",
                       "the database connection was lost in a transaction; try again in a moment");
    PQreset(c->pg);
    if (PQstatus(c->pg) != CONNECTION_OK) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", PQerrorMessage(c->pg));
        msg[strcspn(msg, "\n")] = '\0';
        return sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable",
                       "unable to reconnect to PostgreSQL: %s; try again in a moment", msg);
    }
    PQsetNoticeProcessor(c->pg, pg_notice, NULL);
    stmts_forget(c);
    if (pg_setup(c->pg, err) < 0)
        return -1;
    c->lost_in_tx = false;
    return 0;
}

/* After a statement: a connection that went in a transaction stays
 * refused until the next BEGIN. */
static void pg_note_state(struct pg_conn *c, bool was_in_tx)
{
    if (PQstatus(c->pg) == CONNECTION_BAD && was_in_tx)
        c->lost_in_tx = true;
}

/* The callers' ?N become $N, outside quotes, and a NULL parameter the
 * literal NULL, which means the same wherever it stands: PostgreSQL must
 * know a parameter's type, and a NULL's can only come from the context,
 * which `?1 IS NULL` does not give. Returns a new string. */
static char *translate(const char *sql, const struct db_arg *args, int nargs)
{
    size_t n = strlen(sql);
    char *out = xmalloc(3 * n + 1), *o = out;
    char quote = 0;

    for (const char *s = sql; *s; s++) {
        if (quote) {
            if (*s == quote)
                quote = 0;
        } else if (*s == '\'' || *s == '"') {
            quote = *s;
        } else if (*s == '?' && s[1] >= '0' && s[1] <= '9') {
            char *end;
            long k = strtol(s + 1, &end, 10);
            if (k >= 1 && k <= nargs && args[k - 1].type == DB_ARG_NULL) {
                memcpy(o, "NULL", 4);
                o += 4;
            } else {
                *o++ = '$';
                memcpy(o, s + 1, (size_t)(end - s - 1));
                o += end - s - 1;
            }
            s = end - 1;
            continue;
        }
        *o++ = *s;
    }
    *o = '\0';
    return out;
}

/* A statement's parameters, as many as it has (a settlement's INSERT of
 * 128 charges has 1,280): up to PG_INLINE_PARAMS in the struct itself, as
 * nearly every statement has, more on the heap. Free with params_release
 * (cleanup_params). */
#define PG_INLINE_PARAMS 64

struct pg_params {
    int n;
    Oid *types;
    const char **values;
    char (*ints)[24];
    Oid inline_types[PG_INLINE_PARAMS];
    const char *inline_values[PG_INLINE_PARAMS];
    char inline_ints[PG_INLINE_PARAMS][24];
};

static void params_release(struct pg_params *p)
{
    if (p->types != p->inline_types) {
        free(p->types);
        free(p->values);
        free(p->ints);
    }
}
#define cleanup_params __attribute__((cleanup(params_release)))

static int params_fill(struct pg_params *p, const struct db_arg *args, struct sl_error *err)
{
    size_t count = 0;

    while (args && args[count].type != DB_ARG_END)
        count++;
    if (count > PG_MAX_PARAMS)
        return sl_fail(err, SL_E_INTERNAL, "store_error",
                       "BUG: more than %d parameters in one statement", PG_MAX_PARAMS);
    p->n = 0;
    if (count <= PG_INLINE_PARAMS) {
        p->types = p->inline_types;
        p->values = p->inline_values;
        p->ints = p->inline_ints;
    } else {
        p->types = xcalloc(count, sizeof(*p->types));
        p->values = xcalloc(count, sizeof(*p->values));
        p->ints = xcalloc(count, sizeof(*p->ints));
    }
    for (int i = 0; args && args[i].type != DB_ARG_END; i++) {
        switch (args[i].type) {
        case DB_ARG_TEXT:
            p->types[i] = PG_TEXTOID;
            p->values[i] = args[i].text;
            break;
        case DB_ARG_INT:
            p->types[i] = PG_INT8OID;
            snprintf(p->ints[i], sizeof(p->ints[i]), "%" PRId64, args[i].i);
            p->values[i] = p->ints[i];
            break;
        case DB_ARG_NULL:
        case DB_ARG_END:
            /* not in the text (translate): typed, as nothing infers it */
            p->types[i] = PG_TEXTOID;
            p->values[i] = NULL;
            break;
        }
        p->n = i + 1;
    }
    return 0;
}

/* A statement's cache key, its slot (found, or the free one it would
 * take), and its name. */
struct pg_prepared {
    char *key;
    int slot;
    bool found;    /* prepared on this connection already */
    bool cachable; /* found, or room to prepare it */
    char name[24];
};

static void prepared_release(struct pg_prepared *s)
{
    free(s->key);
}
#define cleanup_prepared __attribute__((cleanup(prepared_release)))

static void prepared_find(struct pg_conn *c, const char *text, const struct pg_params *p,
                          struct pg_prepared *s)
{
    size_t n = strlen(text);
    uint32_t h = 2166136261u;

    s->key = xmalloc(n + (size_t)p->n + 2);
    memcpy(s->key, text, n);
    s->key[n] = '\x1f';
    for (int i = 0; i < p->n; i++)
        s->key[n + 1 + (size_t)i] = p->types[i] == PG_INT8OID ? 'i' : 't';
    s->key[n + 1 + (size_t)p->n] = '\0';
    for (const char *k = s->key; *k; k++)
        h = (h ^ (unsigned char)*k) * 16777619u;
    if (!c->stmts)
        c->stmts = xcalloc(PG_STMT_SLOTS, sizeof(*c->stmts));
    s->slot = (int)(h & (PG_STMT_SLOTS - 1));
    while (c->stmts[s->slot].key && strcmp(c->stmts[s->slot].key, s->key) != 0)
        s->slot = (s->slot + 1) & (PG_STMT_SLOTS - 1);
    s->found = c->stmts[s->slot].key != NULL;
    s->cachable = s->found || c->nstmts < PG_STMT_MAX;
    snprintf(s->name, sizeof(s->name), "sl_%u", s->found ? c->stmts[s->slot].id : c->next_id);
}

/* After the server accepted the statement's Parse. */
static void prepared_keep(struct pg_conn *c, struct pg_prepared *s)
{
    c->stmts[s->slot].key = s->key;
    c->stmts[s->slot].id = c->next_id++;
    c->nstmts++;
    s->key = NULL;
}

/* A prepared statement that a schema change made stale ("cached plan
 * must not change result type") or that the server does not know: the
 * cache starts again. */
static void forget_if_stale(struct pg_conn *c, const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    if (state && (strcmp(state, "0A000") == 0 || strcmp(state, "26000") == 0))
        stmts_forget(c);
}

static bool result_ok(const PGresult *res)
{
    ExecStatusType s = PQresultStatus(res);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

static PGresult *run(struct pg_conn *c, const char *sql, const struct db_arg *args,
                     struct sl_error *err)
{
    cleanup_params struct pg_params p = { 0 };

    if (params_fill(&p, args, err) < 0)
        return NULL;
    cleanup_free char *text = translate(sql, args, p.n);
    cleanup_prepared struct pg_prepared s = { 0 };
    PGresult *res;

    prepared_find(c, text, &p, &s);
    if (s.cachable && !s.found) {
        res = PQprepare(c->pg, s.name, text, p.n, p.types);
        if (res && PQresultStatus(res) != PGRES_COMMAND_OK)
            return res; /* the statement's error */
        if (res)
            prepared_keep(c, &s);
        PQclear(res);
    }
    if (s.cachable)
        res = PQexecPrepared(c->pg, s.name, p.n, p.values, NULL, NULL, 0);
    else
        res = PQexecParams(c->pg, text, p.n, p.types, p.values, NULL, NULL, 0);
    if (!res) /* not sent: a connection that is gone */
        fail_pg(err, c, NULL, "unable to send a statement");
    return res;
}

/* A connection the server ended while idle is found out only by the next
 * statement: when nothing of a transaction is lost by it (a BEGIN, a read
 * of its own), that statement runs again on a new connection, once. */
static PGresult *run_again_if_lost(struct pg_conn *c, PGresult *res, const char *sql,
                                   const struct db_arg *args, bool idle, struct sl_error *err)
{
    if (!idle || result_ok(res) || PQstatus(c->pg) != CONNECTION_BAD)
        return res;
    PQclear(res);
    if (pg_ensure(c, sql, err) < 0)
        return NULL;
    return run(c, sql, args, err);
}

static int simple(struct pg_conn *c, const char *sql)
{
    PGresult *res = PQexec(c->pg, sql);
    bool ok = result_ok(res);
    PQclear(res);
    return ok ? 0 : -1;
}

/* SQLite's PRAGMAs tune SQLite: synchronous maps to synchronous_commit
 * (the billing simulation and the fuzzer turn fsync off), the others mean
 * nothing here. */
static int pg_pragma(struct pg_conn *c, const char *sql, struct sl_error *err)
{
    const char *set = NULL;

    if (strcasestr(sql, "synchronous"))
        set =
            strcasestr(sql, "OFF") ? "SET synchronous_commit = off" : "SET synchronous_commit = on";
    if (set && simple(c, set) < 0)
        return fail_pg(err, c, NULL, "unable to set synchronous_commit");
    return 0;
}

/* The next result of a pipeline and the NULL that ends it. */
static PGresult *pipeline_result(PGconn *pg)
{
    PGresult *res = PQgetResult(pg);

    if (res && PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
        PGresult *end = PQgetResult(pg);
        PQclear(end); /* NULL, unless the connection broke */
    }
    return res;
}

/* Inside a transaction: the savepoint, the statement and its release in
 * one round trip (libpq's pipeline mode). Returns the statement's result,
 * its savepoint released when it succeeded; NULL (err filled) when the
 * connection failed. */
static PGresult *run_in_savepoint(struct pg_conn *c, const char *sql, const struct db_arg *args,
                                  struct sl_error *err)
{
    cleanup_params struct pg_params p = { 0 };
    cleanup_prepared struct pg_prepared s = { 0 };
    PGresult *res = NULL, *r;
    bool ok, parse, parsed = false;
    int at; /* the statement's result: after the savepoint's and the Parse's */

    if (params_fill(&p, args, err) < 0)
        return NULL;
    cleanup_free char *text = translate(sql, args, p.n);
    prepared_find(c, text, &p, &s);
    parse = s.cachable && !s.found;
    at = parse ? 2 : 1;
    ok =
        PQenterPipelineMode(c->pg) == 1 &&
        PQsendQueryParams(c->pg, "SAVEPOINT sl_statement", 0, NULL, NULL, NULL, NULL, 0) == 1 &&
        (!parse || PQsendPrepare(c->pg, s.name, text, p.n, p.types) == 1) &&
        (s.cachable ? PQsendQueryPrepared(c->pg, s.name, p.n, p.values, NULL, NULL, 0)
                    : PQsendQueryParams(c->pg, text, p.n, p.types, p.values, NULL, NULL, 0)) == 1 &&
        PQsendQueryParams(c->pg, "RELEASE SAVEPOINT sl_statement", 0, NULL, NULL, NULL, NULL, 0) ==
            1 &&
        PQpipelineSync(c->pg) == 1;
    for (int i = 0; ok && i < at + 3; i++) {
        r = pipeline_result(c->pg);
        if (!r) {
            ok = false;
        } else if (i == at && !res) {
            res = r;
            continue;
        } else if (i < at && PQresultStatus(r) != PGRES_COMMAND_OK) {
            if (!res) { /* the savepoint or the Parse failed: that is the error */
                res = r;
                r = NULL;
            }
        } else if (i == 1 && parse) {
            parsed = true;
        }
        PQclear(r);
    }
    if (parsed)
        prepared_keep(c, &s);
    if (!ok || PQexitPipelineMode(c->pg) != 1) {
        PQclear(res);
        fail_pg(err, c, NULL, "unable to run a statement");
        /* the connection is in an unknown state: drop it, with the
         * transaction (refused until the next BEGIN, which connects again) */
        cleanup_free char *conninfo = conninfo_of(c->target);
        PQfinish(c->pg);
        stmts_forget(c);
        c->pg = PQconnectStart(conninfo);
        if (!c->pg)
            abort(); /* out of memory */
        c->lost_in_tx = true;
        return NULL;
    }
    return res;
}

static int pg_exec(void *p, const char *sql, const struct db_arg *args, struct sl_error *err)
{
    struct pg_conn *c = p;
    PGTransactionStatusType ts;
    bool control, wrap;
    PGresult *res;
    int changed;

    if (pg_ensure(c, sql, err) < 0)
        return -1;
    if (starts_with_word(sql, "PRAGMA"))
        return pg_pragma(c, sql, err);
    ts = PQtransactionStatus(c->pg);
    control = starts_with_word(sql, "BEGIN") || starts_with_word(sql, "COMMIT") ||
              starts_with_word(sql, "ROLLBACK") || starts_with_word(sql, "SAVEPOINT") ||
              starts_with_word(sql, "RELEASE");
    wrap = !control && ts == PQTRANS_INTRANS;
    res = wrap ? run_in_savepoint(c, sql, args, err) : run(c, sql, args, err);
    if (res && ts == PQTRANS_IDLE && starts_with_word(sql, "BEGIN"))
        res = run_again_if_lost(c, res, sql, args, true, err);
    if (!res) {
        pg_note_state(c, ts != PQTRANS_IDLE);
        return -1;
    }
    if (!result_ok(res)) {
        fail_pg(err, c, res, "statement failed");
        name_statement(err, sql);
        forget_if_stale(c, res);
        PQclear(res);
        if (wrap)
            simple(c, "ROLLBACK TO SAVEPOINT sl_statement; RELEASE SAVEPOINT sl_statement");
        pg_note_state(c, ts != PQTRANS_IDLE);
        return -1;
    }
    /* COMMIT of a transaction that an error aborted answers ROLLBACK */
    if (starts_with_word(sql, "COMMIT") && strcmp(PQcmdStatus(res), "ROLLBACK") == 0) {
        PQclear(res);
        return sl_fail(err, SL_E_UNAVAILABLE, "store_error",
                       "the database undid a batch of writes after an error: try again");
    }
    changed = atoi(PQcmdTuples(res));
    PQclear(res);
    return changed;
}

static int pg_exec_script(void *p, const char *sql, struct sl_error *err)
{
    struct pg_conn *c = p;
    PGresult *res;

    if (pg_ensure(c, sql, err) < 0)
        return -1;
    res = PQexec(c->pg, sql);
    stmts_forget(c); /* the names stay on the server, unused, until it ends */
    if (!result_ok(res)) {
        fail_pg(err, c, res, "script failed");
        PQclear(res);
        return -1;
    }
    PQclear(res);
    return 0;
}

/* A failed query aborts the transaction too, but a query fails only on a
 * bug in its text or with the connection, and its caller then gives up its
 * transaction (store_rollback undoes the abort with its savepoint): unlike
 * a statement, a query runs without a savepoint of its own, which saves
 * two round trips on most of what a transaction runs. */
static struct db_rows *pg_query(void *p, const char *sql, const struct db_arg *args,
                                struct sl_error *err)
{
    struct pg_conn *c = p;
    PGTransactionStatusType ts;
    struct db_rows *rows;
    PGresult *res;

    if (pg_ensure(c, sql, err) < 0)
        return NULL;
    ts = PQtransactionStatus(c->pg);
    res = run(c, sql, args, err);
    if (res)
        res = run_again_if_lost(c, res, sql, args, ts == PQTRANS_IDLE, err);
    if (!res) {
        pg_note_state(c, ts != PQTRANS_IDLE);
        return NULL;
    }
    if (!result_ok(res)) {
        fail_pg(err, c, res, "query failed");
        name_statement(err, sql);
        forget_if_stale(c, res);
        PQclear(res);
        pg_note_state(c, ts != PQTRANS_IDLE);
        return NULL;
    }
    rows = xmalloc(sizeof(*rows));
    rows->ops = &store_pg_ops;
    rows->res = res;
    rows->row = -1;
    rows->nrows = PQntuples(res);
    return rows;
}

static int pg_next(struct db_rows *rows, struct sl_error *err)
{
    (void)err;
    if (rows->row + 1 >= rows->nrows) {
        rows->row = rows->nrows;
        return 0;
    }
    rows->row++;
    return 1;
}

static bool pg_null(struct db_rows *rows, int col)
{
    if (rows->row < 0 || rows->row >= rows->nrows || col >= PQnfields(rows->res))
        return true;
    return PQgetisnull(rows->res, rows->row, col);
}

/* Booleans read as SQLite's 1 and 0. */
static const char *pg_text(struct db_rows *rows, int col)
{
    if (pg_null(rows, col))
        return "";
    const char *v = PQgetvalue(rows->res, rows->row, col);
    if (PQftype(rows->res, col) == PG_BOOLOID)
        return v[0] == 't' ? "1" : "0";
    return v;
}

static int64_t pg_int(struct db_rows *rows, int col)
{
    const char *v = pg_text(rows, col);
    return strtoll(v, NULL, 10);
}

static void pg_rows_free(struct db_rows *rows)
{
    PQclear(rows->res);
    free(rows);
}

static bool pg_in_transaction(void *p)
{
    struct pg_conn *c = p;
    PGTransactionStatusType ts = PQtransactionStatus(c->pg);
    return ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR || ts == PQTRANS_ACTIVE;
}

const struct store_ops store_pg_ops = {
    .name = "postgres",
    .connect = pg_connect,
    .disconnect = pg_disconnect,
    .exec = pg_exec,
    .exec_script = pg_exec_script,
    .query = pg_query,
    .next = pg_next,
    .column_text = pg_text,
    .column_int = pg_int,
    .column_null = pg_null,
    .rows_free = pg_rows_free,
    .in_transaction = pg_in_transaction,
    /* one writer per suanlid: serializable costs it nothing and is what
     * several replicas will need (control-plane.md, "PostgreSQL") */
    .begin_sql = "BEGIN ISOLATION LEVEL SERIALIZABLE",
    .arrays = true,
    .migrations = pg_migrations,
    .link = &store_pg_link_ops, /* store-pg-link.c */
    /* replicas' writers one at a time; LOCK takes no snapshot, so the
     * batch's snapshot comes after the wait (control-plane.md, "Replicas
     * and the leader") */
    .turn_sql = "LOCK TABLE schema_migrations IN SHARE ROW EXCLUSIVE MODE",
};
