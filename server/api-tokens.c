/* API tokens for the CLI and scripts: shown once, stored as hashes. */
#include "auth.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <string.h>

static json_t *token_json(struct db_rows *rows, void *current_token_id)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:b}", "id", db_text(rows, 1), "kind",
                     db_text(rows, 2), "name", db_text(rows, 3), "hint", db_text(rows, 4),
                     "created_at", api_time(db_int(rows, 5)), "expires_at",
                     db_null(rows, 6) ? json_null() : api_time(db_int(rows, 6)), "last_used_at",
                     db_null(rows, 7) ? json_null() : api_time(db_int(rows, 7)), "current",
                     strcmp(db_text(rows, 1), current_token_id) == 0);
}

int api_tokens_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, id, kind, name, hint, created_at, expires_at, last_used_at"
        " FROM tokens WHERE user_id = ?1 AND seq > ?2"
        " AND (expires_at IS NULL OR expires_at > ?3) ORDER BY seq LIMIT ?4",
        DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_INT(sl_time_now()), DB_INT(limit)),
        err);
    return rows ? api_reply_rows(res, rows, token_json, req->caller.token_id, limit, err) : -1;
}

int api_tokens_create(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *name = NULL;
    int64_t days = 0, count = 0, expires = 0;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 100, .out = &name },
        { "expires_in_days", SL_JSON_INT, .min = 1, .max = 3650, .out = &days },
    };
    char secret[SL_TOKEN_MAX], id[SL_ID_MAX];

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (store_get_int(req->srv->store,
                      "SELECT COUNT(*) FROM tokens WHERE user_id = ?1 AND kind = 'api'"
                      " AND (expires_at IS NULL OR expires_at > ?2)",
                      DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(sl_time_now())), &count,
                      err) < 0)
        return -1;
    if (count >= req->srv->cfg.max_api_tokens)
        return sl_fail(err, SL_E_CONFLICT, "too_many_tokens",
                       "you hold %" PRId64 " API tokens, the most allowed: remove one first "
                       "(suanli token rm ID)",
                       count);
    if (days)
        expires = sl_time_now() + days * SL_SEC_PER_DAY;
    if (auth_token_create(req->srv->store, req->caller.user_id, "api", name, expires, secret, id,
                          err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:o}", "id", id, "kind", "api", "name",
                        name, "token", secret, "hint", "", "created_at", api_time(sl_time_now()),
                        "expires_at", expires ? api_time(expires) : json_null()));
    char hint[8];
    snprintf(hint, sizeof(hint), "%.7s", secret);
    json_object_set_new(res->json, "hint", json_string(hint));
    return 0;
}

int api_tokens_delete(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int n = store_exec(req->srv->store, "DELETE FROM tokens WHERE id = ?1 AND user_id = ?2",
                       DB_ARGS(DB_TEXT(req->params[0]), DB_TEXT(req->caller.user_id)), err);
    if (n < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_token",
                       "no token '%s' of yours: list them with suanli token ls", req->params[0]);
    api_reply(res, 204, NULL);
    return 0;
}
