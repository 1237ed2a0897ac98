/* Top-ups from a payment gateway's webhook. The gateway signs
 * "TIMESTAMP.BODY" with HMAC-SHA256 under the shared secret and sends
 *   X-Suanli-Timestamp: <unix seconds>
 *   X-Suanli-Signature: v1=<hex>
 * A request outside the time tolerance is refused (a captured request cannot
 * be replayed later) and the gateway's transaction id makes every delivery
 * idempotent (one inside the window credits once). */
#include "ledger.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define TOPUP_MAX_MICROS (10000000LL * SL_MICROS_PER_UNIT)

static int verify_signature(struct api_request *req, struct sl_error *err)
{
    const char *secret = req->srv->cfg.payment_webhook_secret;
    const char *ts = api_header(req, "X-Suanli-Timestamp");
    const char *sig = api_header(req, "X-Suanli-Signature");
    char expected[SL_HASH_HEX_MAX];
    char *end;

    if (!secret || !*secret)
        return sl_fail(err, SL_E_NOT_FOUND, "payments_disabled",
                       "the payment webhook is not configured on this server");
    if (!ts || !sig)
        return sl_fail(err, SL_E_UNAUTHENTICATED, "missing_signature",
                       "send X-Suanli-Timestamp and X-Suanli-Signature headers");
    errno = 0;
    long long t = strtoll(ts, &end, 10);
    if (errno || *end || end == ts)
        return sl_fail(err, SL_E_UNAUTHENTICATED, "bad_signature",
                       "X-Suanli-Timestamp must be Unix seconds");
    if (llabs(t - (long long)sl_time_now()) > req->srv->cfg.payment_webhook_tolerance)
        return sl_fail(err, SL_E_UNAUTHENTICATED, "stale_signature",
                       "the signature's timestamp is too far from now: sign each delivery anew "
                       "and check the gateway's clock");
    cleanup_buf struct sl_buf signed_part = SL_BUF_INIT;
    sl_buf_addf(&signed_part, "%s.", ts);
    sl_buf_add(&signed_part, req->body, req->body_len);
    sl_hmac_sha256_hex(secret, strlen(secret), signed_part.data, signed_part.len, expected);
    if (strncmp(sig, "v1=", 3) != 0 || !sl_secret_equal(sig + 3, expected))
        return sl_fail(err, SL_E_UNAUTHENTICATED, "bad_signature",
                       "the webhook signature does not match: check the shared secret");
    return 0;
}

static int reply_existing(struct api_request *req, struct api_response *res, const char *txn,
                          const char *user_id, int64_t amount, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT user_id, amount_micros, ledger_txn_id FROM payments"
                    " WHERE gateway_txn_id = ?1",
                    DB_ARGS(DB_TEXT(txn)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    if (strcmp(db_text(rows, 0), user_id) != 0 || db_int(rows, 1) != amount)
        return sl_fail(err, SL_E_CONFLICT, "transaction_conflict",
                       "transaction '%s' was delivered before with another user or amount", txn);
    api_reply(res, 200,
              json_pack("{s:s, s:s, s:I, s:s, s:b}", "transaction_id", txn, "user_id", user_id,
                        "amount_micros", (json_int_t)amount, "ledger_txn_id", db_text(rows, 2),
                        "duplicate", 1));
    return 1;
}

int api_payment_webhook(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *txn = NULL, *user_id = NULL, *currency = NULL;
    int64_t amount = 0, exists;
    const struct sl_json_field fields[] = {
        { "transaction_id", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 128,
          .out = &txn },
        { "user_id", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64,
          .out = &user_id },
        { "amount_micros", SL_JSON_INT, .required = true, .min = 1, .max = TOPUP_MAX_MICROS,
          .out = &amount },
        { "currency", SL_JSON_STRING, .required = true, .min_len = 3, .max_len = 3,
          .out = &currency },
    };
    char account[LEDGER_ACCOUNT_MAX], ledger_txn[SL_ID_MAX];
    bool existed;
    int rc;

    if (verify_signature(req, err) < 0)
        return -1;
    req->json = sl_json_parse_object(req->body, req->body_len, err);
    if (!req->json || sl_json_fields(req->json, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (strcmp(currency, req->srv->cfg.currency) != 0)
        return sl_fail(err, SL_E_UNPROCESSABLE, "wrong_currency",
                       "this server keeps money in %s, not %s", req->srv->cfg.currency, currency);
    rc = reply_existing(req, res, txn, user_id, amount, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (store_get_int(st, "SELECT COUNT(*) FROM users WHERE id = ?1", DB_ARGS(DB_TEXT(user_id)),
                      &exists, err) < 0)
        return -1;
    if (!exists)
        return sl_fail(err, SL_E_UNPROCESSABLE, "no_such_user", "no user '%s'", user_id);
    cleanup_free char *key = xasprintf("payment:%s", txn);
    cleanup_free char *memo = xasprintf("top-up %s", txn);
    if (ledger_open_account(st, "system:payments", NULL, err) < 0)
        return -1;
    struct ledger_txn t = {
        .kind = "topup",
        .memo = memo,
        .idempotency_key = key,
        .actor = NULL,
        .entries = { { ledger_user_account(account, user_id), amount },
                     { "system:payments", -amount } },
        .n_entries = 2,
    };
    if (ledger_post(st, &t, ledger_txn, &existed, err) < 0)
        return -1;
    if (store_exec(st,
                   "INSERT INTO payments (gateway_txn_id, user_id, amount_micros, currency,"
                   " ledger_txn_id, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                   DB_ARGS(DB_TEXT(txn), DB_TEXT(user_id), DB_INT(amount), DB_TEXT(currency),
                           DB_TEXT(ledger_txn), DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:I, s:s, s:b}", "transaction_id", txn, "user_id", user_id,
                        "amount_micros", (json_int_t)amount, "ledger_txn_id", ledger_txn,
                        "duplicate", 0));
    return 0;
}
