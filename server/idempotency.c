#include "idempotency.h"
#include "secrets.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <string.h>

bool idempotency_applies(const struct api_request *req)
{
    return strcmp(req->method, "POST") == 0 && !(req->route->flags & API_NO_IDEMPOTENCY) &&
           req->io.header && req->io.header(req->io.ctx, "Idempotency-Key");
}

static int check_key(const char *key, struct sl_error *err)
{
    size_t n = strlen(key);

    if (n == 0 || n > IDEMPOTENCY_KEY_MAX)
        return sl_fail(err, SL_E_INVALID, "invalid_idempotency_key",
                       "Idempotency-Key must be 1 to %d characters", IDEMPOTENCY_KEY_MAX);
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        if (*p < 0x21 || *p > 0x7e)
            return sl_fail(err, SL_E_INVALID, "invalid_idempotency_key",
                           "Idempotency-Key must be printable ASCII without spaces, such as a "
                           "UUID");
    return 0;
}

static void request_hash(const struct api_request *req, char *hex)
{
    cleanup_buf struct sl_buf b = SL_BUF_INIT;

    sl_buf_addf(&b, "%s %s\n", req->method, req->path);
    sl_buf_add(&b, req->body, req->body_len);
    sl_sha256_hex(b.data, b.len, hex);
}

/* 1 replayed, 0 no stored response, -1 error */
static int replay(struct api_request *req, struct api_response *res, const char *owner,
                  const char *key, const char *hash, struct sl_error *err)
{
    struct store *st = req->srv->store;
    int64_t cutoff = sl_time_now() - req->srv->cfg.idempotency_ttl;
    cleanup_free char *context = xasprintf("idempotency:%s:%s", owner, key);
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT request_hash, status, response FROM idempotency_keys"
                    " WHERE owner = ?1 AND key = ?2 AND created_at > ?3",
                    DB_ARGS(DB_TEXT(owner), DB_TEXT(key), DB_INT(cutoff)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    if (strcmp(db_text(rows, 0), hash) != 0)
        return sl_fail(err, SL_E_UNPROCESSABLE, "idempotency_key_reused",
                       "this Idempotency-Key was used for a different request: use a new key "
                       "for a new request");
    res->raw = secrets_open(req->srv, context, db_text(rows, 2), err);
    if (!res->raw)
        return -1;
    res->status = (int)db_int(rows, 1);
    res->raw_len = strlen(res->raw);
    res->content_type = "application/json";
    api_add_header(res, "Idempotent-Replayed", "true");
    return 1;
}

static int store_response(struct api_request *req, struct api_response *res, const char *owner,
                          const char *key, const char *hash, struct sl_error *err)
{
    cleanup_free char *body = NULL;
    const char *ctype;
    size_t len;

    body = api_response_body(res, &len, &ctype);
    /* a response may hold a secret (an instance's root password): stored
     * sealed, like the secrets themselves (secrets.h) */
    cleanup_free char *context = xasprintf("idempotency:%s:%s", owner, key);
    cleanup_free char *sealed = secrets_seal(req->srv, context, body);
    if (store_exec(req->srv->store,
                   "INSERT INTO idempotency_keys (owner, key, method, path, request_hash, status,"
                   " response, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                   " ON CONFLICT (owner, key) DO UPDATE SET method = excluded.method,"
                   " path = excluded.path, request_hash = excluded.request_hash,"
                   " status = excluded.status, response = excluded.response,"
                   " created_at = excluded.created_at",
                   DB_ARGS(DB_TEXT(owner), DB_TEXT(key), DB_TEXT(req->method), DB_TEXT(req->path),
                           DB_TEXT(hash), DB_INT(res->status), DB_TEXT(sealed),
                           DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    /* the response was serialised: send those exact bytes */
    json_decref(res->json);
    res->json = NULL;
    res->raw = TAKE_PTR(body);
    res->raw_len = len;
    res->content_type = "application/json";
    return 0;
}

int idempotency_run(struct api_request *req, struct api_response *res,
                    int (*handler)(struct api_request *, struct api_response *, struct sl_error *),
                    struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *key = api_header(req, "Idempotency-Key");
    char owner[SL_ID_MAX + 64], hash[SL_HASH_HEX_MAX];
    cleanup_tx struct store *tx = NULL;
    int rc;

    if (check_key(key, err) < 0)
        return -1;
    /* anonymous callers get a space per client address, so strangers' keys
     * never collide nor replay one another's answers */
    if (req->caller.authenticated)
        snprintf(owner, sizeof(owner), "%s", req->caller.user_id);
    else
        snprintf(owner, sizeof(owner), "anonymous:%s", req->remote_addr ? req->remote_addr : "");
    request_hash(req, hash);
    /* the outer write transaction serialises requests with the same key */
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    rc = replay(req, res, owner, key, hash, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (handler(req, res, err) < 0) {
        if (err->kind == SL_E_INTERNAL || err->kind == SL_E_UNAVAILABLE ||
            err->kind == SL_E_RATE_LIMITED)
            return -1;
        /* a refusal is an answer too: store it so a retry gets the same */
        api_reply(res, sl_error_http_status(err->kind), api_error_json(err->code, err->message));
    }
    if (res->status >= 500)
        return 0;
    if (store_response(req, res, owner, key, hash, err) < 0)
        return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

int idempotency_expire(struct server *srv, struct sl_error *err)
{
    return store_exec(srv->store, "DELETE FROM idempotency_keys WHERE created_at <= ?1",
                      DB_ARGS(DB_INT(sl_time_now() - srv->cfg.idempotency_ttl)), err);
}
