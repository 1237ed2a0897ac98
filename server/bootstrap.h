/* First start of a data directory: secrets, the admin account, the catalog. */
#ifndef SL_BOOTSTRAP_H
#define SL_BOOTSTRAP_H

#include "server.h"

/* Loads DATA_DIR/secret.key, creating it (0600) on first start. */
int bootstrap_secrets(struct server *srv, struct sl_error *err);

/* With no user in the store, creates admin@localhost with a random password,
 * prints it once on stdout and writes DATA_DIR/admin-password (0600). */
int bootstrap_admin(struct server *srv, struct sl_error *err);

#endif
