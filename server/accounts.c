#include "accounts.h"
#include "api.h"
#include "ledger.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <ctype.h>
#include <sodium.h>
#include <string.h>

int accounts_check_email(const char *email, struct sl_error *err)
{
    const char *at = strchr(email, '@');

    if (!at || at == email || !at[1] || strchr(at + 1, '@') || strlen(email) > 254)
        return sl_fail(err, SL_E_INVALID, "invalid_email",
                       "'%s' is not an email address: write it as name@example.com", email);
    for (const unsigned char *p = (const unsigned char *)email; *p; p++)
        if (isspace(*p) || *p < 0x21)
            return sl_fail(err, SL_E_INVALID, "invalid_email",
                           "an email address must not contain spaces");
    return 0;
}

int accounts_require_user(struct server *srv, const char *user_id, struct sl_error *err)
{
    int64_t n;

    if (store_get_int(srv->store, "SELECT COUNT(*) FROM users WHERE id = ?1",
                      DB_ARGS(DB_TEXT(user_id)), &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_user",
                       "no user '%s': find ids with suanli admin user ls", user_id);
    return 0;
}

int accounts_check_password(const char *password, struct sl_error *err)
{
    size_t n = strlen(password);

    if (n < 8)
        return sl_fail(err, SL_E_INVALID, "weak_password",
                       "the password is too short: use at least 8 characters");
    if (n > 256)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "the password is over 256 characters");
    return 0;
}

int accounts_create_user(struct server *srv, const char *email, const char *name,
                         const char *password, const char *role, char *id_out, struct sl_error *err)
{
    char hash[crypto_pwhash_STRBYTES], account[LEDGER_ACCOUNT_MAX];
    cleanup_free char *lower = xstrdup(email);
    cleanup_tx struct store *tx = NULL;
    struct store *st = srv->store;

    for (char *p = lower; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (sl_password_hash(password, hash, sizeof(hash), err) < 0)
        return -1;
    sl_id_new(id_out, "u-");
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    if (store_exec(st,
                   "INSERT INTO users (id, email, name, password_hash, role, created_at)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                   DB_ARGS(DB_TEXT(id_out), DB_TEXT(lower), DB_TEXT(name), DB_TEXT(hash),
                           DB_TEXT(role), DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "email_taken",
                           "'%s' is already registered: log in, or use another email", lower);
        return -1;
    }
    if (ledger_open_account(st, ledger_user_account(account, id_out), id_out, err) < 0)
        return -1;
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    return 0;
}

json_t *accounts_user_json(struct server *srv, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT id, email, name, role, verification, created_at FROM users"
                    " WHERE id = ?1",
                    DB_ARGS(DB_TEXT(user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return NULL;
    if (rc == 0) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_user", "no user '%s'", user_id);
        return NULL;
    }
    bool admin = strcmp(db_text(rows, 3), "admin") == 0;
    bool verified = strcmp(db_text(rows, 4), "approved") == 0;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:b}", "id", db_text(rows, 0), "email",
                     db_text(rows, 1), "name", db_text(rows, 2), "role", db_text(rows, 3),
                     "verification", db_text(rows, 4), "created_at", api_time(db_int(rows, 5)),
                     "can_start_instances", admin || verified || !srv->cfg.require_verification);
}
