/* First start of a data directory: secrets, the admin account, the catalog. */
#ifndef SL_BOOTSTRAP_H
#define SL_BOOTSTRAP_H

#include "server.h"

/* Loads DATA_DIR/secret.key, creating it (0600) on first start. */
int bootstrap_secrets(struct server *srv, struct sl_error *err);

#define BOOTSTRAP_PASSWORD_MAX 33

/* With no user in the store, creates admin@localhost with a random password,
 * writes it to DATA_DIR/admin-password (0600) and into password, for the
 * caller to show once, and returns 1; 0 when there are users already. */
int bootstrap_admin(struct server *srv, char password[static BOOTSTRAP_PASSWORD_MAX],
                    struct sl_error *err);

#endif
