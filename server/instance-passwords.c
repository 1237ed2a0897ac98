/* Instance root passwords (instance-passwords.h). */
#include "instance-passwords.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"
#include "secrets.h"
#include "store.h"

#include <crypt.h>
#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#define ROOT_PASSWORD_CONTEXT "root_password:%s"

/* The fewest rounds SHA-512 crypt takes. Stretching protects passwords
 * people choose; these are 64 random bits, which no number of rounds makes
 * more or less guessable (2^63 tries either way), while the default 5,000
 * cost each placement ~4 ms of CPU inside its transaction (bench/sched.py). */
#define ROOT_PASSWORD_ROUNDS 1000

/* A crypt(3) SHA-512 hash ("$6$rounds=...$salt$hash") of password: what the
 * node needs to set it (chpasswd -e), and nothing it could log in elsewhere
 * with. */
static char *root_password_crypt(const char *password, struct sl_error *err)
{
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    cleanup_free struct crypt_data *data = xzalloc(sizeof(*data));
    const char *hash = NULL;

    if (!crypt_gensalt_rn("$6$", ROOT_PASSWORD_ROUNDS, NULL, 0, salt, sizeof(salt)) ||
        !(hash = crypt_rn(password, salt, data, sizeof(*data))) || hash[0] != '$') {
        sl_fail_errno(err, "unable to hash a root password with crypt(3) SHA-512");
        return NULL;
    }
    return xstrdup(hash);
}

int instance_password_new(struct server *srv, const char *id, char **sealed, char **hash,
                          struct sl_error *err)
{
    char password[17], context[SL_ID_MAX + 32];

    sl_random_hex(password, 8);
    snprintf(context, sizeof(context), ROOT_PASSWORD_CONTEXT, id);
    *hash = root_password_crypt(password, err);
    if (!*hash)
        return -1;
    *sealed = secrets_seal(srv, context, password);
    sodium_memzero(password, sizeof(password));
    return 0;
}

char *instance_password_open(struct server *srv, const char *id, const char *stored,
                             struct sl_error *err)
{
    char context[SL_ID_MAX + 32];

    snprintf(context, sizeof(context), ROOT_PASSWORD_CONTEXT, id);
    return secrets_open(srv, context, stored, err);
}

int instances_seal_secrets(struct server *srv, struct sl_error *err)
{
    struct store *st = srv->store;
    cleanup_tx struct store *tx = NULL;
    cleanup_json json_t *unsealed = json_array();
    int64_t sealed = 0, hashed = 0;
    size_t i;
    json_t *row;
    int rc;

    if (secrets_rewrite_begin(st, err) < 0)
        return -1;
    tx = st;
    {
        /* read whole before anything is written */
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT id, root_password, root_password_crypt = '' AND state != 'released'"
                        " FROM instances WHERE root_password NOT LIKE 's1:%'"
                        " OR (root_password_crypt = '' AND state != 'released')",
                        DB_NO_ARGS, err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1)
            json_array_append_new(unsealed, json_pack("[s, s, b]", db_text(rows, 0),
                                                      db_text(rows, 1), (int)db_int(rows, 2)));
        if (rc < 0)
            return -1;
    }
    json_array_foreach(unsealed, i, row)
    {
        const char *id = json_string_value(json_array_get(row, 0));
        const char *stored = json_string_value(json_array_get(row, 1));
        bool needs_hash = json_is_true(json_array_get(row, 2));
        char context[SL_ID_MAX + 32];
        snprintf(context, sizeof(context), ROOT_PASSWORD_CONTEXT, id);
        cleanup_free char *plain = secrets_open(srv, context, stored, err);
        if (!plain)
            return -1;
        cleanup_free char *hash = needs_hash ? root_password_crypt(plain, err) : NULL;
        if (needs_hash && !hash)
            return -1;
        cleanup_free char *seal =
            secrets_is_sealed(stored) ? xstrdup(stored) : secrets_seal(srv, context, plain);
        sealed += !secrets_is_sealed(stored);
        hashed += hash != NULL;
        sodium_memzero(plain, strlen(plain));
        if (store_exec(st,
                       "UPDATE instances SET root_password = ?2,"
                       " root_password_crypt = COALESCE(?3, root_password_crypt) WHERE id = ?1",
                       DB_ARGS(DB_TEXT(id), DB_TEXT(seal), DB_TEXT(hash)), err) < 0)
            return -1;
    }
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    if (sealed && secrets_scrub_log(st, err) < 0)
        return -1;
    if (sealed || hashed)
        log_info("instances: sealed %" PRId64 " root password%s stored in plaintext before, "
                 "hashed %" PRId64 " for their nodes",
                 sealed, sealed == 1 ? "" : "s", hashed);
    return 0;
}
