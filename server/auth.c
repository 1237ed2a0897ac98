#include "auth.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"

#include <stdio.h>
#include <string.h>

static const char *bearer_token(struct api_request *req)
{
    const char *h = api_header(req, "Authorization");

    if (h) {
        if (strncasecmp(h, "Bearer ", 7) != 0)
            return "";
        h += 7;
        while (*h == ' ')
            h++;
        return h;
    }
    return req->io.cookie ? req->io.cookie(req->io.ctx, AUTH_COOKIE) : NULL;
}

int auth_authenticate(struct api_request *req, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *token = bearer_token(req);
    char hash[SL_HASH_HEX_MAX];
    int64_t now = sl_time_now();
    int rc;

    memset(&req->caller, 0, sizeof(req->caller));
    if (!token)
        return 0;
    if (strlen(token) > 0 && strlen(token) < SL_TOKEN_MAX) {
        sl_sha256_hex(token, strlen(token), hash);
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT t.id, t.kind, t.expires_at, t.last_used_at, u.id, u.role"
                        " FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?1",
                        DB_ARGS(DB_TEXT(hash)), err);
        if (!rows)
            return -1;
        rc = db_next(rows, err);
        if (rc < 0)
            return -1;
        if (rc == 1 && (db_null(rows, 2) || db_int(rows, 2) > now)) {
            struct api_caller *c = &req->caller;
            int64_t last_used = db_null(rows, 3) ? 0 : db_int(rows, 3);
            c->authenticated = true;
            snprintf(c->token_id, sizeof(c->token_id), "%s", db_text(rows, 0));
            snprintf(c->token_kind, sizeof(c->token_kind), "%s", db_text(rows, 1));
            snprintf(c->user_id, sizeof(c->user_id), "%s", db_text(rows, 4));
            c->admin = strcmp(db_text(rows, 5), "admin") == 0;
            /* a write per request would serialise readers: once a minute is enough */
            if (now - last_used >= 60) {
                db_rows_free(TAKE_PTR(rows));
                store_exec(st, "UPDATE tokens SET last_used_at = ?2 WHERE id = ?1",
                           DB_ARGS(DB_TEXT(c->token_id), DB_INT(now)), NULL);
            }
            return 0;
        }
    }
    if (strlen(token) > 0 && strlen(token) < SL_TOKEN_MAX) {
        /* not a user's token: perhaps a node agent's */
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT id FROM nodes WHERE token_hash = ?1", DB_ARGS(DB_TEXT(hash)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 1) {
            snprintf(req->caller.node_id, sizeof(req->caller.node_id), "%s", db_text(rows, 0));
            return 0;
        }
    }
    if (req->route && (req->route->flags & API_PUBLIC))
        return 0;
    return sl_fail(err, SL_E_UNAUTHENTICATED, "invalid_token",
                   "the token is not valid or has expired: log in again (suanli login)");
}

int auth_token_create(struct store *st, const char *user_id, const char *kind, const char *name,
                      int64_t expires_at, char *secret, char *id, struct sl_error *err)
{
    char hash[SL_HASH_HEX_MAX], hint[16];

    sl_token_new(secret);
    sl_sha256_hex(secret, strlen(secret), hash);
    sl_id_new(id, "tok-");
    snprintf(hint, sizeof(hint), "%.7s", secret);
    return store_exec(st,
                      "INSERT INTO tokens (id, user_id, kind, name, hash, hint, created_at,"
                      " expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                      DB_ARGS(DB_TEXT(id), DB_TEXT(user_id), DB_TEXT(kind), DB_TEXT(name),
                              DB_TEXT(hash), DB_TEXT(hint), DB_INT(sl_time_now()),
                              expires_at ? DB_INT(expires_at) : DB_NULL),
                      err) < 0
               ? -1
               : 0;
}

static int count_failures(struct store *st, const char *subject, int64_t since, int64_t *count,
                          int64_t *oldest, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT COUNT(*), MIN(at) FROM login_failures WHERE subject = ?1 AND at > ?2",
        DB_ARGS(DB_TEXT(subject), DB_INT(since)), err);
    if (!rows || db_next(rows, err) < 0)
        return -1;
    *count = db_int(rows, 0);
    *oldest = db_int(rows, 1);
    return 0;
}

int auth_login_allowed(struct server *srv, const char *email, const char *ip, int64_t *retry_after,
                       struct sl_error *err)
{
    const struct server_config *cfg = &srv->cfg;
    int64_t now = sl_time_now(), since = now - cfg->login_failure_window;
    int64_t n, oldest;
    char subject[300];

    snprintf(subject, sizeof(subject), "email:%s", email);
    if (count_failures(srv->store, subject, since, &n, &oldest, err) < 0)
        return -1;
    if (n < cfg->login_max_failures) {
        snprintf(subject, sizeof(subject), "ip:%s", ip);
        if (count_failures(srv->store, subject, since, &n, &oldest, err) < 0)
            return -1;
        if (n < cfg->login_max_failures_per_ip)
            return 1;
    }
    *retry_after = oldest + cfg->login_failure_window - now;
    if (*retry_after < 1)
        *retry_after = 1;
    return 0;
}

int auth_login_failed(struct server *srv, const char *email, const char *ip, struct sl_error *err)
{
    char subject[300];
    int64_t now = sl_time_now();

    snprintf(subject, sizeof(subject), "email:%s", email);
    if (store_exec(srv->store, "INSERT INTO login_failures (subject, at) VALUES (?1, ?2)",
                   DB_ARGS(DB_TEXT(subject), DB_INT(now)), err) < 0)
        return -1;
    snprintf(subject, sizeof(subject), "ip:%s", ip);
    return store_exec(srv->store, "INSERT INTO login_failures (subject, at) VALUES (?1, ?2)",
                      DB_ARGS(DB_TEXT(subject), DB_INT(now)), err) < 0
               ? -1
               : 0;
}

int auth_login_succeeded(struct server *srv, const char *email, struct sl_error *err)
{
    char subject[300];

    snprintf(subject, sizeof(subject), "email:%s", email);
    return store_exec(srv->store, "DELETE FROM login_failures WHERE subject = ?1",
                      DB_ARGS(DB_TEXT(subject)), err) < 0
               ? -1
               : 0;
}
