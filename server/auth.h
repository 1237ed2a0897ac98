/* Who is calling: bearer tokens and session cookies, stored only as SHA-256
 * hashes; tokens are 256-bit random, so a fast hash is enough. */
#ifndef SL_AUTH_H
#define SL_AUTH_H

#include "api.h"

#define AUTH_COOKIE "suanli_session"

/* Fills req->caller from the Authorization header or the session cookie.
 * No credentials: anonymous, returns 0. Bad or expired credentials: 401 on
 * routes that need a caller, anonymous on public ones. */
int auth_authenticate(struct api_request *req, struct sl_error *err);

/* Creates a token for user; writes the secret (shown once) into secret
 * (SL_TOKEN_MAX) and its id into id (SL_ID_MAX). expires_at 0: never. */
int auth_token_create(struct store *st, const char *user_id, const char *kind, const char *name,
                      int64_t expires_at, char *secret, char *id, struct sl_error *err);

/* The session cookie against cross-site use (docs/design/control-plane.md).
 *
 * auth_check_browser_origin: refuses (403 "origin_not_allowed") a request a
 * browser says comes from another page than the API's own: an Origin that
 * is neither the request's Host nor listed in http.allowed_origins, or no
 * Origin and a Sec-Fetch-Site other than same-origin or none. Requests
 * without those headers (the CLI, scripts) pass.
 *
 * auth_check_cookie_request: for a caller authenticated by the cookie, the
 * same; and for a change (not GET, HEAD or OPTIONS) an allowed Origin must
 * be present and the body declared application/json ("json_required").
 * Callers with a bearer token pass untouched. */
int auth_check_browser_origin(struct api_request *req, struct sl_error *err);
int auth_check_cookie_request(struct api_request *req, struct sl_error *err);

/* Failed logins, counted per client address (an IPv6 /64) and per email
 * from that address, so a stranger's guesses slow down only the stranger's
 * address. allowed: 1, or 0 with *retry_after (seconds) when either count
 * is full. A success clears the email's count from that address only. */
int auth_login_allowed(struct server *srv, const char *email, const char *ip, int64_t *retry_after,
                       struct sl_error *err);
int auth_login_failed(struct server *srv, const char *email, const char *ip, struct sl_error *err);
int auth_login_succeeded(struct server *srv, const char *email, const char *ip,
                         struct sl_error *err);

/* A per-address rate limit in rate_events (subject "WHAT:ADDRESS-KEY"): 1
 * and the event recorded when fewer than max happened within window
 * seconds; 0 with *retry_after when the window is full (nothing recorded). */
int auth_rate_take(struct server *srv, const char *what, const char *ip, int64_t max,
                   int64_t window, int64_t *retry_after, struct sl_error *err);

#endif
