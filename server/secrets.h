/* Instance secrets at rest: a value the owner must see again (the root
 * password, a service port's access token) is stored sealed with a key
 * derived from DATA/secret.key (0600), so a copy of the database alone
 * reveals none of them (docs/design/threat-model.md).
 *
 * A sealed value is "s1:" + base64url(nonce || ciphertext || tag),
 * XChaCha20-Poly1305 with the context (such as "root_password:i-...") as
 * associated data: a sealed value moved to another row does not open. */
#ifndef SL_SECRETS_H
#define SL_SECRETS_H

#include <stdbool.h>

#include "../lib/error.h"
#include "server.h"
#include "store.h"

#define SECRETS_PREFIX "s1:"

/* Derives the sealing key from srv->id_hash_key (bootstrap_secrets first). */
void secrets_init(struct server *srv);

/* A new sealed copy of plaintext for context; the caller frees it. */
char *secrets_seal(const struct server *srv, const char *context, const char *plaintext);

/* The plaintext of stored, which the caller frees; NULL with err filled when
 * it does not open (wrong key, context or a damaged value). A value without
 * the prefix (written before secrets were sealed) is returned as it is. */
char *secrets_open(const struct server *srv, const char *context, const char *stored,
                   struct sl_error *err);

bool secrets_is_sealed(const char *stored);

/* Sealing what was stored in plaintext: the old bytes must stay neither in
 * the database's free pages nor in its write-ahead log. begin turns on
 * SQLite's secure_delete and opens a transaction (the caller commits or
 * rolls back); after the commit, scrub_log truncates the log. */
int secrets_rewrite_begin(struct store *st, struct sl_error *err);
int secrets_scrub_log(struct store *st, struct sl_error *err);

#endif
