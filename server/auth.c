#include "auth.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/netaddr.h"
#include "../lib/timefmt.h"
#include "../lib/timeconst.h"

#include <stdio.h>
#include <string.h>

/* The credential of the request: the Authorization header's bearer token
 * ("" for another scheme), else the session cookie (*from_cookie set), else
 * NULL. */
static const char *bearer_token(struct api_request *req, bool *from_cookie)
{
    const char *h = api_header(req, "Authorization");

    *from_cookie = false;
    if (h) {
        if (strncasecmp(h, "Bearer ", 7) != 0)
            return "";
        h += 7;
        while (*h == ' ')
            h++;
        return h;
    }
    const char *cookie = req->io.cookie ? req->io.cookie(req->io.ctx, AUTH_COOKIE) : NULL;
    *from_cookie = cookie != NULL;
    return cookie;
}

int auth_authenticate(struct api_request *req, struct sl_error *err)
{
    struct store *st = req->srv->store;
    bool from_cookie;
    const char *token = bearer_token(req, &from_cookie);
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
            c->via_cookie = from_cookie;
            snprintf(c->token_id, sizeof(c->token_id), "%s", db_text(rows, 0));
            snprintf(c->token_kind, sizeof(c->token_kind), "%s", db_text(rows, 1));
            snprintf(c->user_id, sizeof(c->user_id), "%s", db_text(rows, 4));
            c->admin = strcmp(db_text(rows, 5), "admin") == 0;
            /* a write per request would serialise readers: once a minute is enough */
            if (now - last_used >= SL_SEC_PER_MIN) {
                db_rows_free(TAKE_PTR(rows));
                store_exec(st, "UPDATE tokens SET last_used_at = ?2 WHERE id = ?1",
                           DB_ARGS(DB_TEXT(c->token_id), DB_INT(now)), NULL);
            }
            return 0;
        }
    }
    if (!from_cookie && strlen(token) > 0 && strlen(token) < SL_TOKEN_MAX) {
        /* not a user's token: perhaps a node agent's (never a cookie) */
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

/* Whether origin ("scheme://host[:port]") is the API's own (its host and
 * port are the request's Host) or one the operator listed. */
static bool origin_allowed(struct api_request *req, const char *origin)
{
    const char *host = req->forwarded_host ? req->forwarded_host : api_header(req, "Host");
    const char *sep = strstr(origin, "://");

    if (!sep || sep == origin || !sep[3] || strpbrk(sep + 3, "/?#@ \t"))
        return false; /* "null", or not an origin at all */
    if (host && strcasecmp(sep + 3, host) == 0)
        return true;
    const char *list = req->srv->cfg.http_allowed_origins;
    size_t len = strlen(origin);
    for (const char *p = list ? list : ""; *p;) {
        p += strspn(p, ", \t");
        size_t n = strcspn(p, ", \t");
        if (n == len && strncasecmp(p, origin, n) == 0)
            return true;
        p += n;
    }
    return false;
}

static bool json_content_type(const char *type)
{
    static const char json[] = "application/json";

    if (!type)
        return false;
    type += strspn(type, " \t");
    return strncasecmp(type, json, sizeof(json) - 1) == 0 &&
           strchr("; \t", type[sizeof(json) - 1]) != NULL;
}

int auth_check_browser_origin(struct api_request *req, struct sl_error *err)
{
    const char *origin = api_header(req, "Origin");
    const char *site = api_header(req, "Sec-Fetch-Site");

    if (origin) {
        if (origin_allowed(req, origin))
            return 0;
        return sl_fail(err, SL_E_FORBIDDEN, "origin_not_allowed",
                       "requests from the page at '%.200s' are refused: the session cookie "
                       "works only from the API's own address (or an origin listed in "
                       "http.allowed_origins); scripts send 'Authorization: Bearer TOKEN'",
                       origin);
    }
    if (site && strcasecmp(site, "same-origin") != 0 && strcasecmp(site, "none") != 0)
        return sl_fail(err, SL_E_FORBIDDEN, "origin_not_allowed",
                       "the browser says this request comes from another site's page "
                       "(Sec-Fetch-Site: %.40s): open the API's own address instead; scripts "
                       "send 'Authorization: Bearer TOKEN'",
                       site);
    return 0;
}

int auth_check_cookie_request(struct api_request *req, struct sl_error *err)
{
    bool read = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0 ||
                strcmp(req->method, "OPTIONS") == 0;

    if (!req->caller.via_cookie)
        return 0;
    if (auth_check_browser_origin(req, err) < 0)
        return -1;
    if (read)
        return 0;
    if (!api_header(req, "Origin"))
        return sl_fail(err, SL_E_FORBIDDEN, "origin_not_allowed",
                       "a change made with the session cookie must carry the browser's Origin "
                       "header; scripts send 'Authorization: Bearer TOKEN' instead of the cookie");
    if (!json_content_type(api_header(req, "Content-Type")))
        return sl_fail(err, SL_E_FORBIDDEN, "json_required",
                       "a change made with the session cookie must send 'Content-Type: "
                       "application/json' (form posts are refused); scripts send "
                       "'Authorization: Bearer TOKEN' instead of the cookie");
    return 0;
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

/* How many rows of subject in table are newer than since, and the oldest. */
static int count_since(struct store *st, const char *sql, const char *subject, int64_t since,
                       int64_t *count, int64_t *oldest, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, sql, DB_ARGS(DB_TEXT(subject), DB_INT(since)), err);
    if (!rows || db_next(rows, err) < 0)
        return -1;
    *count = db_int(rows, 0);
    *oldest = db_null(rows, 1) ? 0 : db_int(rows, 1);
    return 0;
}

static const char count_failures_sql[] =
    "SELECT COUNT(*), MIN(at) FROM login_failures WHERE subject = ?1 AND at > ?2";
static const char count_events_sql[] =
    "SELECT COUNT(*), MIN(at) FROM rate_events WHERE subject = ?1 AND at > ?2";

/* The subjects failures are counted under: the address (an IPv6 /64), and
 * the email from that address. */
struct login_subjects {
    char address[16 + SL_ADDR_TEXT_MAX];
    char pair[16 + 256 + SL_ADDR_TEXT_MAX];
};

static void login_subjects(const char *email, const char *ip, struct login_subjects *s)
{
    char key[SL_ADDR_TEXT_MAX];

    sl_addr_limit_key(ip ? ip : "unknown", key);
    snprintf(s->address, sizeof(s->address), "ip:%s", key);
    snprintf(s->pair, sizeof(s->pair), "email-ip:%.254s %s", email, key);
}

/* Seconds until the oldest of a full window's events leaves it. */
static int64_t wait_for_oldest(int64_t oldest, int64_t window, int64_t now)
{
    int64_t wait = oldest + window - now;
    return wait < 1 ? 1 : wait;
}

int auth_login_allowed(struct server *srv, const char *email, const char *ip, int64_t *retry_after,
                       struct sl_error *err)
{
    const struct server_config *cfg = &srv->cfg;
    int64_t now = sl_time_now(), since = now - cfg->login_failure_window;
    int64_t n, oldest;
    struct login_subjects s;

    *retry_after = 0;
    login_subjects(email, ip, &s);
    if (count_since(srv->store, count_failures_sql, s.pair, since, &n, &oldest, err) < 0)
        return -1;
    if (n >= cfg->login_max_failures)
        *retry_after = wait_for_oldest(oldest, cfg->login_failure_window, now);
    if (count_since(srv->store, count_failures_sql, s.address, since, &n, &oldest, err) < 0)
        return -1;
    if (n >= cfg->login_max_failures_per_ip) {
        int64_t wait = wait_for_oldest(oldest, cfg->login_failure_window, now);
        if (wait > *retry_after)
            *retry_after = wait;
    }
    return *retry_after == 0;
}

int auth_login_failed(struct server *srv, const char *email, const char *ip, struct sl_error *err)
{
    struct login_subjects s;
    int64_t now = sl_time_now();

    login_subjects(email, ip, &s);
    if (store_exec(srv->store, "INSERT INTO login_failures (subject, at) VALUES (?1, ?2)",
                   DB_ARGS(DB_TEXT(s.pair), DB_INT(now)), err) < 0)
        return -1;
    return store_exec(srv->store, "INSERT INTO login_failures (subject, at) VALUES (?1, ?2)",
                      DB_ARGS(DB_TEXT(s.address), DB_INT(now)), err) < 0
               ? -1
               : 0;
}

int auth_login_succeeded(struct server *srv, const char *email, const char *ip,
                         struct sl_error *err)
{
    struct login_subjects s;

    /* only this email's count from this address: the address's own count
     * stays, or an attacker could clear it by logging into an account of
     * his own between guesses */
    login_subjects(email, ip, &s);
    return store_exec(srv->store, "DELETE FROM login_failures WHERE subject = ?1",
                      DB_ARGS(DB_TEXT(s.pair)), err) < 0
               ? -1
               : 0;
}

int auth_rate_take(struct server *srv, const char *what, const char *ip, int64_t max,
                   int64_t window, int64_t *retry_after, struct sl_error *err)
{
    char key[SL_ADDR_TEXT_MAX], subject[64 + SL_ADDR_TEXT_MAX];
    int64_t now = sl_time_now(), n, oldest;
    struct store *st = srv->store;
    cleanup_tx struct store *tx = NULL;

    sl_addr_limit_key(ip ? ip : "unknown", key);
    snprintf(subject, sizeof(subject), "%.60s:%s", what, key);
    /* count and take in one write transaction: concurrent requests queue */
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    if (count_since(st, count_events_sql, subject, now - window, &n, &oldest, err) < 0)
        return -1;
    if (n >= max) {
        *retry_after = wait_for_oldest(oldest, window, now);
        return 0;
    }
    *retry_after = 0;
    if (store_exec(st, "INSERT INTO rate_events (subject, at) VALUES (?1, ?2)",
                   DB_ARGS(DB_TEXT(subject), DB_INT(now)), err) < 0 ||
        store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 1;
}
