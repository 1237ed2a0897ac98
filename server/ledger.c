#include "ledger.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "store-rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *ledger_user_account(char *buf, const char *user_id)
{
    snprintf(buf, LEDGER_ACCOUNT_MAX, "user:%s", user_id);
    return buf;
}

int ledger_open_account(struct store *st, const char *account, const char *user_id,
                        struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO accounts (id, user_id, balance_micros, created_at)"
                      " VALUES (?1, ?2, 0, ?3) ON CONFLICT (id) DO NOTHING",
                      DB_ARGS(DB_TEXT(account), DB_TEXT(user_id), DB_INT(sl_time_now())), err) < 0
               ? -1
               : 0;
}

static int find_existing(struct store *st, const char *key, char *txn_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT id FROM ledger_txns WHERE idempotency_key = ?1", DB_ARGS(DB_TEXT(key)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 1)
        snprintf(txn_id, SL_ID_MAX, "%s", db_text(rows, 0));
    return rc;
}

static int validate(const struct ledger_txn *txn, struct sl_error *err)
{
    int64_t sum = 0;

    if (txn->n_entries < 2 || txn->n_entries > LEDGER_MAX_ENTRIES)
        return sl_fail(err, SL_E_INTERNAL, NULL, "BUG: a ledger transaction needs 2 to %d entries",
                       LEDGER_MAX_ENTRIES);
    for (int i = 0; i < txn->n_entries; i++) {
        if (txn->entries[i].amount_micros == 0)
            return sl_fail(err, SL_E_INTERNAL, NULL, "BUG: zero ledger entry");
        if (sl_money_add(sum, txn->entries[i].amount_micros, &sum, err) < 0)
            return -1;
    }
    if (sum != 0)
        return sl_fail(err, SL_E_INTERNAL, NULL, "BUG: ledger transaction does not balance");
    return 0;
}

static int apply_entry(struct store *st, const char *txn_id, const struct ledger_entry *e,
                       int64_t now, struct sl_error *err)
{
    int64_t balance, after;
    int rc = store_get_int(st, "SELECT balance_micros FROM accounts WHERE id = ?1",
                           DB_ARGS(DB_TEXT(e->account)), &balance, err);

    if (rc < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_account", "no money account '%s'", e->account);
    if (sl_money_add(balance, e->amount_micros, &after, err) < 0) {
        sl_error_prefix(err, "account '%s'", e->account);
        return -1;
    }
    if (store_exec(st, "UPDATE accounts SET balance_micros = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(e->account), DB_INT(after)), err) < 0)
        return -1;
    return store_exec(st,
                      "INSERT INTO ledger_entries (txn_id, account_id, amount_micros,"
                      " balance_after_micros, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                      DB_ARGS(DB_TEXT(txn_id), DB_TEXT(e->account), DB_INT(e->amount_micros),
                              DB_INT(after), DB_INT(now)),
                      err) < 0
               ? -1
               : 0;
}

int ledger_post(struct store *st, const struct ledger_txn *txn, char *txn_id, bool *existed,
                struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;
    int64_t now = sl_time_now();
    int rc;

    *existed = false;
    if (validate(txn, err) < 0)
        return -1;
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    rc = find_existing(st, txn->idempotency_key, txn_id, err);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        *existed = true;
        return store_commit(st, err) < 0 ? -1 : (tx = NULL, 0);
    }
    if (txn->id)
        snprintf(txn_id, SL_ID_MAX, "%s", txn->id);
    else
        sl_id_new(txn_id, "txn-");
    if (store_exec(st,
                   "INSERT INTO ledger_txns (id, kind, memo, idempotency_key, actor, created_at)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                   DB_ARGS(DB_TEXT(txn_id), DB_TEXT(txn->kind), DB_TEXT(txn->memo ? txn->memo : ""),
                           DB_TEXT(txn->idempotency_key), DB_TEXT(txn->actor), DB_INT(now)),
                   err) < 0)
        return -1;
    for (int i = 0; i < txn->n_entries; i++)
        if (apply_entry(st, txn_id, &txn->entries[i], now, err) < 0)
            return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

/* PostgreSQL writes arrays in their order (a function scan's rows feed the
 * INSERT one by one): the entries' identities follow the running balances */
static struct store_rows_sql txns_sql = STORE_ROWS_SQL(
    "INSERT INTO ledger_txns (id, kind, memo, idempotency_key, actor, created_at) VALUES ", "", 6,
    "INSERT INTO ledger_txns (id, kind, memo, idempotency_key, actor, created_at) SELECT * FROM"
    " unnest(?1::text[], ?2::text[], ?3::text[], ?4::text[], ?5::text[], ?6::bigint[])");
static struct store_rows_sql entries_sql =
    STORE_ROWS_SQL("INSERT INTO ledger_entries (txn_id, account_id, amount_micros,"
                   " balance_after_micros, created_at) VALUES ",
                   "", 5,
                   "INSERT INTO ledger_entries (txn_id, account_id, amount_micros,"
                   " balance_after_micros, created_at) SELECT * FROM unnest(?1::text[],"
                   " ?2::text[], ?3::bigint[], ?4::bigint[], ?5::bigint[])");
static struct store_rows_sql balances_sql =
    STORE_ROWS_SQL("UPDATE accounts SET balance_micros = v.column2 FROM (VALUES ",
                   ") AS v WHERE id = v.column1", 2,
                   "UPDATE accounts SET balance_micros = v.column2 FROM unnest(?1::text[],"
                   " ?2::bigint[]) AS v(column1, column2) WHERE id = v.column1");
static struct store_rows_sql read_sql =
    STORE_ROWS_SQL("SELECT id, balance_micros FROM accounts WHERE id IN (VALUES ", ")", 1, NULL);

/* An account of a batch and its running balance. */
struct account_balance {
    const char *id;
    int64_t balance;
    bool found;
};

static int by_account(const void *a, const void *b)
{
    return strcmp(((const struct account_balance *)a)->id, ((const struct account_balance *)b)->id);
}

/* The distinct accounts of txns, sorted, with their balances. */
static struct account_balance *balances_read(struct store *st, const struct ledger_txn *txns,
                                             size_t n, size_t *n_accounts, struct sl_error *err)
{
    size_t cap = 0, m = 0;

    for (size_t i = 0; i < n; i++)
        cap += (size_t)txns[i].n_entries;
    cleanup_free struct account_balance *acc = xcalloc(cap ? cap : 1, sizeof(*acc));
    for (size_t i = 0; i < n; i++)
        for (int e = 0; e < txns[i].n_entries; e++)
            acc[m++].id = txns[i].entries[e].account;
    qsort(acc, m, sizeof(*acc), by_account);
    size_t distinct = 0;
    for (size_t i = 0; i < m; i++)
        if (distinct == 0 || strcmp(acc[distinct - 1].id, acc[i].id) != 0)
            acc[distinct++] = acc[i];
    cleanup_free struct db_arg *args = xcalloc(distinct + 1, sizeof(*args));
    for (size_t i = 0; i < distinct; i++)
        args[i] = DB_TEXT(acc[i].id);
    /* pieces of 2^k accounts, the largest first */
    size_t done = 0;
    for (int k = STORE_ROWS_SIZES - 1; k >= 0; k--) {
        size_t size = (size_t)1 << k;
        for (; distinct - done >= size; done += size) {
            struct db_arg kept = args[done + size];
            args[done + size] = (struct db_arg){ .type = DB_ARG_END };
            cleanup_rows struct db_rows *rows =
                store_query(st, store_rows_text(&read_sql, k), &args[done], err);
            args[done + size] = kept;
            int rc;
            while (rows && (rc = db_next(rows, err)) == 1) {
                struct account_balance key = { .id = db_text(rows, 0) };
                struct account_balance *a = bsearch(&key, acc, distinct, sizeof(*acc), by_account);
                if (a) {
                    a->balance = db_int(rows, 1);
                    a->found = true;
                }
            }
            if (!rows || rc < 0)
                return NULL;
        }
    }
    for (size_t i = 0; i < distinct; i++)
        if (!acc[i].found)
            return sl_fail(err, SL_E_NOT_FOUND, "no_account", "no money account '%s'", acc[i].id),
                   NULL;
    *n_accounts = distinct;
    return TAKE_PTR(acc);
}

int ledger_post_many(struct store *st, const struct ledger_txn *txns, size_t n,
                     struct sl_error *err)
{
    cleanup_tx struct store *tx = NULL;
    int64_t now = sl_time_now();
    size_t n_accounts, n_entries = 0;

    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!txns[i].id)
            return sl_fail(err, SL_E_INTERNAL, NULL, "BUG: ledger_post_many needs the ids");
        if (validate(&txns[i], err) < 0)
            return -1;
        n_entries += (size_t)txns[i].n_entries;
    }
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    cleanup_free struct account_balance *acc = balances_read(st, txns, n, &n_accounts, err);
    if (!acc)
        return -1;
    cleanup_free struct db_arg *t = xcalloc(n * 6 + 1, sizeof(*t));
    cleanup_free struct db_arg *e = xcalloc(n_entries * 5 + 1, sizeof(*e));
    cleanup_free struct db_arg *b = xcalloc(n_accounts * 2 + 1, sizeof(*b));
    struct db_arg *row = e;
    for (size_t i = 0; i < n; i++) {
        const struct ledger_txn *x = &txns[i];
        struct db_arg *r = &t[i * 6];
        r[0] = DB_TEXT(x->id);
        r[1] = DB_TEXT(x->kind);
        r[2] = DB_TEXT(x->memo ? x->memo : "");
        r[3] = DB_TEXT(x->idempotency_key);
        r[4] = DB_TEXT(x->actor);
        r[5] = DB_INT(now);
        for (int k = 0; k < x->n_entries; k++, row += 5) {
            struct account_balance key = { .id = x->entries[k].account };
            struct account_balance *a = bsearch(&key, acc, n_accounts, sizeof(*acc), by_account);
            if (sl_money_add(a->balance, x->entries[k].amount_micros, &a->balance, err) < 0) {
                sl_error_prefix(err, "account '%s'", a->id);
                return -1;
            }
            row[0] = DB_TEXT(x->id);
            row[1] = DB_TEXT(a->id);
            row[2] = DB_INT(x->entries[k].amount_micros);
            row[3] = DB_INT(a->balance);
            row[4] = DB_INT(now);
        }
    }
    for (size_t i = 0; i < n_accounts; i++) {
        b[i * 2] = DB_TEXT(acc[i].id);
        b[i * 2 + 1] = DB_INT(acc[i].balance);
    }
    if (store_write_rows(st, &txns_sql, t, n, err) < 0 ||
        store_write_rows(st, &entries_sql, e, n_entries, err) < 0 ||
        store_write_rows(st, &balances_sql, b, n_accounts, err) < 0 || store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

int ledger_balance(struct store *st, const char *account, int64_t *balance, struct sl_error *err)
{
    int rc = store_get_int(st, "SELECT balance_micros FROM accounts WHERE id = ?1",
                           DB_ARGS(DB_TEXT(account)), balance, err);
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_account", "no money account '%s'", account);
    return rc < 0 ? -1 : 0;
}

/* Entries whose running balance is not the previous entry's of the account
 * (0 before its first) plus their amount, added by lib/money. */
static int count_bad_running(struct store *st, int64_t *out, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT account_id, amount_micros, balance_after_micros FROM ledger_entries"
                    " ORDER BY account_id, seq",
                    DB_NO_ARGS, err);
    cleanup_free char *account = NULL;
    int64_t bad = 0, before = 0, want;
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        struct sl_error e = SL_ERROR_INIT;
        if (!account || strcmp(account, db_text(rows, 0)) != 0) {
            free(account);
            account = xstrdup(db_text(rows, 0));
            before = 0;
        }
        if (sl_money_add(before, db_int(rows, 1), &want, &e) < 0 || want != db_int(rows, 2))
            bad++;
        before = db_int(rows, 2);
    }
    if (rc < 0)
        return -1;
    *out = bad;
    return 0;
}

int ledger_check(struct store *st, struct ledger_check *out, struct sl_error *err)
{
    memset(out, 0, sizeof(*out));
    if (store_get_int(st, "SELECT COUNT(*) FROM accounts", DB_NO_ARGS, &out->accounts, err) < 0 ||
        store_get_int(st, "SELECT COUNT(*) FROM ledger_txns", DB_NO_ARGS, &out->transactions, err) <
            0 ||
        store_get_int(st,
                      "SELECT COUNT(*) FROM accounts a WHERE a.balance_micros !="
                      " (SELECT COALESCE(SUM(amount_micros), 0) FROM ledger_entries e"
                      "  WHERE e.account_id = a.id)",
                      DB_NO_ARGS, &out->bad_balances, err) < 0 ||
        store_get_int(st,
                      "SELECT COUNT(*) FROM (SELECT txn_id FROM ledger_entries GROUP BY txn_id"
                      " HAVING SUM(amount_micros) != 0 OR COUNT(*) < 2) t",
                      DB_NO_ARGS, &out->unbalanced_txns, err) < 0)
        return -1;
    return count_bad_running(st, &out->bad_running, err);
}
