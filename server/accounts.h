/* Users: creation with argon2id password hashes and their money account. */
#ifndef SL_ACCOUNTS_H
#define SL_ACCOUNTS_H

#include <jansson.h>

#include "server.h"

/* email is lowercased; fails with "email_taken" (409) when it exists. */
int accounts_create_user(struct server *srv, const char *email, const char *name,
                         const char *password, const char *role, char *id_out,
                         struct sl_error *err);

/* The user as the API shows it; NULL with 404 when absent. */
json_t *accounts_user_json(struct server *srv, const char *user_id, struct sl_error *err);

/* 0 when the user exists, else 404 "no_such_user". */
int accounts_require_user(struct server *srv, const char *user_id, struct sl_error *err);

/* Checks an email address enough to catch typos: local@domain, no spaces. */
int accounts_check_email(const char *email, struct sl_error *err);
int accounts_check_password(const char *password, struct sl_error *err);

#endif
