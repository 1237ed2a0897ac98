/* Registration, sessions, the caller's profile and the admin's user list. */
#include "accounts.h"
#include "auth.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <pthread.h>
#include <sodium.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* 429 for an address over a limit, with Retry-After in seconds. */
static int too_many(struct api_response *res, const char *code, const char *what,
                    int64_t retry_after, struct sl_error *err)
{
    char secs[32];

    snprintf(secs, sizeof(secs), "%" PRId64, retry_after);
    api_add_header(res, "Retry-After", secs);
    return sl_fail(err, SL_E_RATE_LIMITED, code,
                   "too many %s from this address: wait %" PRId64 " seconds", what, retry_after);
}

int api_register(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *email = NULL, *password = NULL, *name = NULL;
    const struct sl_json_field fields[] = {
        { "email", SL_JSON_STRING, .required = true, .min_len = 3, .max_len = 254, .out = &email },
        { "password", SL_JSON_STRING, .required = true, .max_len = 256, .out = &password },
        { "name", SL_JSON_STRING, .max_len = 100, .out = &name },
    };
    char id[SL_ID_MAX];
    int64_t retry_after;
    int rc;

    if (auth_check_browser_origin(req, err) < 0)
        return -1;
    /* API_OWN_TX: the attempt stays counted when the registration is refused */
    rc = auth_rate_take(req->srv, "register", req->remote_addr,
                        req->srv->cfg.register_max_per_address, req->srv->cfg.register_window,
                        &retry_after, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return too_many(res, "too_many_registrations", "registrations", retry_after, err);
    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        accounts_check_email(email, err) < 0 || accounts_check_password(password, err) < 0)
        return -1;
    if (accounts_create_user(req->srv, email, name ? name : "", password, "renter", id, err) < 0)
        return -1;
    json_t *user = accounts_user_json(req->srv, id, err);
    if (!user)
        return -1;
    api_reply(res, 201, user);
    return 0;
}

static pthread_once_t dummy_once = PTHREAD_ONCE_INIT;
static char dummy_hash[crypto_pwhash_STRBYTES];

static void make_dummy_hash(void)
{
    sl_password_hash("not a password of anyone", dummy_hash, sizeof(dummy_hash), NULL);
}

static void lowercase(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* Host-only (no Domain), script-proof, sent with no request another site
 * starts, and Secure when the client came over https (a trusted proxy says
 * so); docs/design/control-plane.md. */
static char *session_cookie(const struct api_request *req, const char *value, int64_t max_age)
{
    return xasprintf(AUTH_COOKIE "=%s; Path=/; Max-Age=%" PRId64 "; HttpOnly; SameSite=Strict%s",
                     value, max_age, req->https ? "; Secure" : "");
}

int api_login(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *email_in = NULL, *password = NULL;
    const struct sl_json_field fields[] = {
        { "email", SL_JSON_STRING, .required = true, .max_len = 254, .out = &email_in },
        { "password", SL_JSON_STRING, .required = true, .max_len = 256, .out = &password },
    };
    char token[SL_TOKEN_MAX], token_id[SL_ID_MAX], user_id[SL_ID_MAX];
    int64_t retry_after, expires = sl_time_now() + srv->cfg.session_ttl;
    bool ok = false;
    int rc;

    /* a page elsewhere must not log a visitor into an account of its choosing */
    if (auth_check_browser_origin(req, err) < 0 ||
        api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    cleanup_free char *email = xstrdup(email_in);
    lowercase(email);
    rc = auth_login_allowed(srv, email, req->remote_addr, &retry_after, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return too_many(res, "too_many_login_failures", "failed logins", retry_after, err);
    {
        cleanup_rows struct db_rows *rows =
            store_query(srv->store, "SELECT id, password_hash FROM users WHERE email = ?1",
                        DB_ARGS(DB_TEXT(email)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 1) {
            ok = sl_password_verify(db_text(rows, 1), password);
            snprintf(user_id, sizeof(user_id), "%s", db_text(rows, 0));
        } else {
            /* spend the same time as a real check: no user enumeration by timing */
            pthread_once(&dummy_once, make_dummy_hash);
            sl_password_verify(dummy_hash, password);
        }
    }
    if (!ok) {
        if (auth_login_failed(srv, email, req->remote_addr, err) < 0)
            return -1;
        return sl_fail(err, SL_E_UNAUTHENTICATED, "invalid_credentials", "wrong email or password");
    }
    if (auth_login_succeeded(srv, email, req->remote_addr, err) < 0 ||
        auth_token_create(srv->store, user_id, "session", "login session", expires, token, token_id,
                          err) < 0)
        return -1;
    json_t *user = accounts_user_json(srv, user_id, err);
    if (!user)
        return -1;
    cleanup_free char *cookie = session_cookie(req, token, srv->cfg.session_ttl);
    api_add_header(res, "Set-Cookie", cookie);
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:o, s:o}", "token", token, "token_id", token_id, "expires_at",
                        api_time(expires), "user", user));
    return 0;
}

int api_logout(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    if (store_exec(req->srv->store, "DELETE FROM tokens WHERE id = ?1",
                   DB_ARGS(DB_TEXT(req->caller.token_id)), err) < 0)
        return -1;
    cleanup_free char *cookie = session_cookie(req, "", 0);
    api_add_header(res, "Set-Cookie", cookie);
    api_reply(res, 204, NULL);
    return 0;
}

int api_me(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *user = accounts_user_json(req->srv, req->caller.user_id, err);

    if (!user)
        return -1;
    api_reply(res, 200, user);
    return 0;
}

static json_t *admin_user_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:I}", "id", db_text(rows, 1), "email",
                     db_text(rows, 2), "name", db_text(rows, 3), "role", db_text(rows, 4),
                     "verification", db_text(rows, 5), "created_at", api_time(db_int(rows, 6)),
                     "balance_micros", (json_int_t)db_int(rows, 7));
}

int api_admin_users(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *email = api_query(req, "email");
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT u.seq, u.id, u.email, u.name, u.role, u.verification, u.created_at,"
                    " COALESCE(a.balance_micros, 0) FROM users u"
                    " LEFT JOIN accounts a ON a.id = 'user:' || u.id"
                    " WHERE u.seq > ?1 AND (?2 IS NULL OR u.email = lower(?2))"
                    " ORDER BY u.seq LIMIT ?3",
                    DB_ARGS(DB_INT(after), DB_TEXT(email), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, admin_user_json, NULL, limit, err) : -1;
}
