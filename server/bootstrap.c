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

int bootstrap_secrets(struct server *srv, struct sl_error *err)
{
    cleanup_free char *path = xasprintf("%s/secret.key", srv->cfg.data_dir);
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        if (errno != ENOENT)
            return sl_fail_errno(err, "unable to open '%s'", path);
        randombytes_buf(srv->id_hash_key, sizeof(srv->id_hash_key));
        secrets_init(srv);
        return sl_file_write(path, srv->id_hash_key, sizeof(srv->id_hash_key), 0600,
                             SL_FILE_EXCLUSIVE, err);
    }
    if (read(fd, srv->id_hash_key, sizeof(srv->id_hash_key)) != (ssize_t)sizeof(srv->id_hash_key))
        return sl_fail(err, SL_E_INTERNAL, "bad_secret",
                       "'%s' is not a 32-byte key: restore it from a backup", path);
    secrets_init(srv);
    return 0;
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
