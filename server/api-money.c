/* Balance, ledger, and the admin's credit. */
#include "ledger.h"
#include "billing.h"
#include "accounts.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"

#include <stdint.h>
#include <string.h>

/* Largest single credit: 10^9 units, far beyond any real top-up, well inside
 * int64 micros so no sum of a few can overflow unnoticed. */
#define CREDIT_MAX_MICROS (1000000000LL * SL_MICROS_PER_UNIT)

int api_balance(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX];
    int64_t balance, spend_per_hour = 0;

    if (ledger_balance(req->srv->store, ledger_user_account(account, req->caller.user_id), &balance,
                       err) < 0)
        return -1;
    if (billing_spend_per_hour(req->srv->store, req->caller.user_id, &spend_per_hour, err) < 0)
        return -1;
    int64_t covers = sl_money_covers_seconds(balance, spend_per_hour);
    api_reply(res, 200,
              json_pack("{s:I, s:s, s:I, s:o}", "balance_micros", (json_int_t)balance, "currency",
                        req->srv->cfg.currency, "spend_per_hour_micros", (json_int_t)spend_per_hour,
                        "covers_seconds",
                        spend_per_hour == 0 ? json_null() : json_integer(covers)));
    return 0;
}

static json_t *ledger_entry_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:I, s:s, s:s, s:s, s:I, s:I, s:o}", "seq", (json_int_t)db_int(rows, 0),
                     "txn_id", db_text(rows, 1), "kind", db_text(rows, 2), "memo", db_text(rows, 3),
                     "amount_micros", (json_int_t)db_int(rows, 4), "balance_after_micros",
                     (json_int_t)db_int(rows, 5), "created_at", api_time(db_int(rows, 6)));
}

int api_ledger(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    char account[LEDGER_ACCOUNT_MAX];
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    /* newest first: the cursor is the last seq seen, 0 starts at the newest */
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT e.seq, t.id, t.kind, t.memo, e.amount_micros, e.balance_after_micros,"
        " e.created_at FROM ledger_entries e JOIN ledger_txns t ON t.id = e.txn_id"
        " WHERE e.account_id = ?1 AND (?2 = 0 OR e.seq < ?2) ORDER BY e.seq DESC LIMIT ?3",
        DB_ARGS(DB_TEXT(ledger_user_account(account, req->caller.user_id)), DB_INT(after),
                DB_INT(limit)),
        err);
    return rows ? api_reply_rows(res, rows, ledger_entry_json, NULL, limit, err) : -1;
}

int api_admin_credit(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *user_id = req->params[0], *memo = NULL;
    int64_t amount = 0, balance;
    const struct sl_json_field fields[] = {
        { "amount_micros", SL_JSON_INT, .required = true, .min = 1, .max = CREDIT_MAX_MICROS,
          .out = &amount },
        { "memo", SL_JSON_STRING, .max_len = 200, .out = &memo },
    };
    char account[LEDGER_ACCOUNT_MAX], txn_id[SL_ID_MAX], key[64];
    bool existed;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (accounts_require_user(req->srv, user_id, err) < 0)
        return -1;
    ledger_user_account(account, user_id);
    if (ledger_open_account(st, "system:credits", NULL, err) < 0)
        return -1;
    struct ledger_txn txn = {
        .kind = "credit",
        .memo = memo ? memo : "",
        .idempotency_key = sl_id_new(key, "credit:"),
        .actor = req->caller.user_id,
        .entries = { { account, amount }, { "system:credits", -amount } },
        .n_entries = 2,
    };
    if (ledger_post(st, &txn, txn_id, &existed, err) < 0 ||
        ledger_balance(st, account, &balance, err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:I, s:I, s:s}", "txn_id", txn_id, "user_id", user_id,
                        "amount_micros", (json_int_t)amount, "balance_micros", (json_int_t)balance,
                        "memo", txn.memo));
    return 0;
}

int api_admin_ledger_check(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct ledger_check c;

    if (ledger_check(req->srv->store, &c, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:b, s:I, s:I, s:I, s:I, s:I}", "ok",
                        c.bad_balances == 0 && c.unbalanced_txns == 0 && c.bad_running == 0,
                        "accounts", (json_int_t)c.accounts, "transactions",
                        (json_int_t)c.transactions, "bad_balances", (json_int_t)c.bad_balances,
                        "unbalanced_transactions", (json_int_t)c.unbalanced_txns,
                        "bad_running_balances", (json_int_t)c.bad_running));
    return 0;
}
