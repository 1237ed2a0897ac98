/* The boot directory the node gives each instance, mounted read-only at
 * /.suanli inside (OCI_BOOT_MOUNT):
 *
 *   init             pid 1: sets root's password, makes SSH host keys on
 *                    first boot, then execs sshd
 *   root-password    the instance's random root password (0600)
 *   authorized_keys  the renter's public keys, read by sshd next to
 *                    /root/.ssh/authorized_keys
 *   hosts, resolv.conf  bound over /etc/hosts and /etc/resolv.conf
 *
 * It lives on the host, not on the instance's disks, and is rewritten on
 * every start, so a changed password or key set applies at the next start. */
#ifndef SL_NODE_BOOT_H
#define SL_NODE_BOOT_H

#include "../lib/error.h"

struct boot_params {
    const char *id;              /* instance id (hostname) */
    const char *root_password;   /* printable, no newline; NULL or "": unchanged */
    const char *authorized_keys; /* OpenSSH public key lines; NULL: none */
};

/* Creates boot_dir (0755) and writes its files. A password or key text with
 * a control character is SL_E_INVALID. */
int boot_write(const char *boot_dir, const struct boot_params *p, struct sl_error *err);

/* The init script's text (for tests and docs). */
extern const char boot_init_script[];

#endif
