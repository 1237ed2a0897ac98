/* Real-name verification, as AutoDL asks of its renters: a renter submits a
 * name and an ID number (kept as a keyed hash and a masked copy only); an
 * admin approves or rejects with a reason. */
#include "id-number.h"
#include "accounts.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"

#include <string.h>

#define VERIFICATION_COLUMNS                                                                       \
    "v.seq, v.id, v.user_id, u.email, v.real_name, v.id_number_masked, v.state, v.reason,"         \
    " v.created_at, v.decided_at"

static json_t *verification_json(struct db_rows *rows)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o}", "id", db_text(rows, 1),
                     "user_id", db_text(rows, 2), "email", db_text(rows, 3), "real_name",
                     db_text(rows, 4), "id_number_masked", db_text(rows, 5), "state",
                     db_text(rows, 6), "reason", db_text(rows, 7), "created_at",
                     api_time(db_int(rows, 8)), "decided_at",
                     db_null(rows, 9) ? json_null() : api_time(db_int(rows, 9)));
}

/* The newest verification of user as JSON; NULL and 404 when none. */
static json_t *latest(struct store *st, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT " VERIFICATION_COLUMNS " FROM verifications v"
                    " JOIN users u ON u.id = v.user_id WHERE v.user_id = ?1"
                    " ORDER BY v.seq DESC LIMIT 1",
                    DB_ARGS(DB_TEXT(user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return NULL;
    if (rc == 0) {
        sl_fail(err, SL_E_NOT_FOUND, "no_verification",
                "no verification request yet: submit one with suanli verify --name N "
                "--id-number X");
        return NULL;
    }
    return verification_json(rows);
}

int api_verification_submit(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *name = NULL, *number_in = NULL;
    const struct sl_json_field fields[] = {
        { "real_name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 100,
          .out = &name },
        { "id_number", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64,
          .out = &number_in },
    };
    char number[ID_NUMBER_MAX], masked[ID_NUMBER_MAX + 8], hash[SL_HASH_HEX_MAX], id[SL_ID_MAX];
    int64_t n;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        id_number_check(req->srv->cfg.id_number_format, number_in, number, err) < 0)
        return -1;
    if (store_get_int(st,
                      "SELECT COUNT(*) FROM verifications WHERE user_id = ?1"
                      " AND state IN ('pending', 'approved')",
                      DB_ARGS(DB_TEXT(req->caller.user_id)), &n, err) < 0)
        return -1;
    if (n > 0)
        return sl_fail(err, SL_E_CONFLICT, "verification_exists",
                       "you already have a pending or approved verification: see it with "
                       "suanli verify --status");
    sl_keyed_hash_hex(req->srv->id_hash_key, number, strlen(number), hash);
    if (store_get_int(st,
                      "SELECT COUNT(*) FROM verifications WHERE id_number_hash = ?1"
                      " AND state IN ('pending', 'approved') AND user_id != ?2",
                      DB_ARGS(DB_TEXT(hash), DB_TEXT(req->caller.user_id)), &n, err) < 0)
        return -1;
    if (n > 0)
        return sl_fail(err, SL_E_CONFLICT, "id_number_in_use",
                       "this ID number verifies another account already: contact the operator");
    id_number_mask(number, masked, sizeof(masked));
    sl_id_new(id, "ver-");
    if (store_exec(
            st,
            "INSERT INTO verifications (id, user_id, real_name, id_number_hash,"
            " id_number_masked, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)",
            DB_ARGS(DB_TEXT(id), DB_TEXT(req->caller.user_id), DB_TEXT(name), DB_TEXT(hash),
                    DB_TEXT(masked), DB_INT(sl_time_now())),
            err) < 0 ||
        store_exec(st, "UPDATE users SET verification = 'pending' WHERE id = ?1",
                   DB_ARGS(DB_TEXT(req->caller.user_id)), err) < 0)
        return -1;
    json_t *v = latest(st, req->caller.user_id, err);
    if (!v)
        return -1;
    api_reply(res, 201, v);
    return 0;
}

int api_verification_get(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *v = latest(req->srv->store, req->caller.user_id, err);

    if (!v)
        return -1;
    api_reply(res, 200, v);
    return 0;
}

static json_t *verification_row(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return verification_json(rows);
}

int api_admin_verifications(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *state = api_query(req, "state");
    int64_t limit, after;

    if (!state)
        state = "pending";
    if (strcmp(state, "pending") && strcmp(state, "approved") && strcmp(state, "rejected") &&
        strcmp(state, "all"))
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "state must be pending, approved, rejected or all");
    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT " VERIFICATION_COLUMNS " FROM verifications v JOIN users u ON u.id = v.user_id"
        " WHERE v.seq > ?1 AND (?2 = 'all' OR v.state = ?2) ORDER BY v.seq LIMIT ?3",
        DB_ARGS(DB_INT(after), DB_TEXT(state), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, verification_row, NULL, limit, err) : -1;
}

int api_admin_verification_decide(struct api_request *req, struct api_response *res,
                                  struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *user_id = req->params[0], *reason = NULL;
    bool approve = false;
    const struct sl_json_field fields[] = {
        { "approve", SL_JSON_BOOL, .required = true, .out = &approve },
        { "reason", SL_JSON_STRING, .max_len = 500, .out = &reason },
    };
    int n;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (accounts_require_user(req->srv, user_id, err) < 0)
        return -1;
    if (!approve && (!reason || !*reason))
        return sl_fail(err, SL_E_INVALID, "missing_field",
                       "a rejection needs a reason the renter can act on (--reason)");
    n = store_exec(st,
                   "UPDATE verifications SET state = ?2, reason = ?3, decided_at = ?4,"
                   " decided_by = ?5 WHERE user_id = ?1 AND state = 'pending'",
                   DB_ARGS(DB_TEXT(user_id), DB_TEXT(approve ? "approved" : "rejected"),
                           DB_TEXT(reason ? reason : ""), DB_INT(sl_time_now()),
                           DB_TEXT(req->caller.user_id)),
                   err);
    if (n < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_CONFLICT, "no_pending_verification",
                       "user '%s' has no pending verification request", user_id);
    if (store_exec(st, "UPDATE users SET verification = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(user_id), DB_TEXT(approve ? "approved" : "rejected")), err) < 0)
        return -1;
    json_t *v = latest(st, user_id, err);
    if (!v)
        return -1;
    api_reply(res, 200, v);
    return 0;
}
