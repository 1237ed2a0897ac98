/* Instance root passwords (docs/design/instances.md, "SSH"): random per
 * instance, shown to its owner, stored sealed (secrets.h, context
 * "root_password:ID"); a host gets only the crypt(3) hash it needs to set
 * it. */
#ifndef SL_INSTANCE_PASSWORDS_H
#define SL_INSTANCE_PASSWORDS_H

#include "../lib/error.h"
#include "server.h"

/* A new root password for instance id: *sealed, what the store keeps, and
 * *hash, what the node gets ("$6$salt$hash"). Both are the caller's to
 * free; on failure (-1) neither is set. */
int instance_password_new(struct server *srv, const char *id, char **sealed, char **hash,
                          struct sl_error *err);

/* The plaintext of instance id's stored password (sealed, or plaintext
 * from before sealing); the caller frees it. NULL when it cannot be opened
 * (a different secret key). */
char *instance_password_open(struct server *srv, const char *id, const char *stored,
                             struct sl_error *err);

/* At start-up: seals the root passwords stored in plaintext before secrets
 * were sealed and hashes them for the nodes of the instances not released.
 * Rows already sealed and hashed are left alone. */
int instances_seal_secrets(struct server *srv, struct sl_error *err);

#endif
