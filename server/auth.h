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

/* Failed-login accounting per subject ("email:x", "ip:y"). */
int auth_login_allowed(struct server *srv, const char *email, const char *ip, int64_t *retry_after,
                       struct sl_error *err);
int auth_login_failed(struct server *srv, const char *email, const char *ip, struct sl_error *err);
int auth_login_succeeded(struct server *srv, const char *email, struct sl_error *err);

#endif
