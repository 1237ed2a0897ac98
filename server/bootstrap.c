#include "bootstrap.h"
#include "accounts.h"
#include "secrets.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/file.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define FINGERPRINT_SETTING "secret_key_fingerprint"

/* The key's fingerprint: hex of a 16-byte BLAKE2b of it, which tells keys
 * apart and reveals nothing of them. */
static void fingerprint(const unsigned char key[static 32], char hex[static 33])
{
    static const char context[] = "suanli secret.key fingerprint";
    unsigned char hash[16];

    crypto_generichash(hash, sizeof(hash), key, 32, (const unsigned char *)context,
                       sizeof(context) - 1);
    sodium_bin2hex(hex, 33, hash, sizeof(hash));
}

/* The fingerprint the database keeps (docs/operations.md, "Several
 * replicas"): every replica of one database must have the same
 * secret.key. The first process to start writes it. path: the key's file. */
static int check_fingerprint(struct server *srv, const char *path, struct sl_error *err)
{
    char mine[33];

    fingerprint(srv->id_hash_key, mine);
    if (store_exec(
            srv->store,
            "INSERT INTO settings (name, value) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
            DB_ARGS(DB_TEXT(FINGERPRINT_SETTING), DB_TEXT(mine)), err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(srv->store, "SELECT value FROM settings WHERE name = ?1",
                    DB_ARGS(DB_TEXT(FINGERPRINT_SETTING)), err);
    int rc = rows ? db_next(rows, err) : -1;
    if (rc < 0)
        return -1;
    if (rc == 1 && strcmp(db_text(rows, 0), mine) != 0)
        return sl_fail(err, SL_E_CONFLICT, "secret_mismatch",
                       "'%s' is not the key this database was made with (fingerprint %s, the "
                       "database's %s): another replica made it; copy secret.key and front-token "
                       "from that replica's data directory into '%s', then start again",
                       path, mine, db_text(rows, 0), srv->cfg.data_dir);
    return 0;
}

int bootstrap_secrets(struct server *srv, struct sl_error *err)
{
    cleanup_free char *path = xasprintf("%s/secret.key", srv->cfg.data_dir);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        if (errno != ENOENT)
            return sl_fail_errno(err, "unable to open '%s'", path);
        int64_t known = 0;
        if (store_get_int(srv->store, "SELECT COUNT(*) FROM settings WHERE name = ?1",
                          DB_ARGS(DB_TEXT(FINGERPRINT_SETTING)), &known, err) < 0)
            return -1;
        if (known)
            return sl_fail(err, SL_E_CONFLICT, "secret_missing",
                           "'%s' is missing, and the database was made by a replica with a key: "
                           "copy secret.key and front-token from another replica's data "
                           "directory into '%s', then start again",
                           path, srv->cfg.data_dir);
        randombytes_buf(srv->id_hash_key, sizeof(srv->id_hash_key));
        secrets_init(srv);
        if (sl_file_write(path, srv->id_hash_key, sizeof(srv->id_hash_key), 0600, SL_FILE_EXCLUSIVE,
                          err) < 0)
            return -1;
        return check_fingerprint(srv, path, err);
    }
    if (read(fd, srv->id_hash_key, sizeof(srv->id_hash_key)) != (ssize_t)sizeof(srv->id_hash_key))
        return sl_fail(err, SL_E_INTERNAL, "bad_secret",
                       "'%s' is not a 32-byte key: restore it from a backup", path);
    secrets_init(srv);
    return check_fingerprint(srv, path, err);
}

int bootstrap_admin(struct server *srv, char password[static BOOTSTRAP_PASSWORD_MAX],
                    struct sl_error *err)
{
    int64_t users = 0;
    char id[SL_ID_MAX];

    if (store_get_int(srv->store, "SELECT COUNT(*) FROM users", DB_NO_ARGS, &users, err) < 0)
        return -1;
    if (users > 0)
        return 0;
    sl_random_hex(password, 16);
    if (accounts_create_user(srv, "admin@localhost", "Administrator", password, "admin", id, err) <
        0)
        return -1;
    cleanup_free char *path = xasprintf("%s/admin-password", srv->cfg.data_dir);
    cleanup_free char *line = xasprintf("%s\n", password);
    unlink(path);
    if (sl_file_write(path, line, strlen(line), 0600, SL_FILE_EXCLUSIVE, err) < 0)
        return -1;
    log_info("bootstrap: created admin@localhost (%s)", id);
    return 1;
}
