#include "ledger.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <stdio.h>
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
