/* The boot directory the node gives each instance, mounted read-only at
 * /.suanli inside (OCI_BOOT_MOUNT):
 *
 *   init             pid 1: sets root's password, makes SSH host keys on
 *                    first boot, then execs sshd
 *   root-password-crypt  a crypt(3) hash of the instance's random root
 *                    password (0600), set with chpasswd -e: the node never
 *                    holds the plaintext
 *   authorized_keys  the renter's public keys, read by sshd next to
 *                    /root/.ssh/authorized_keys
 *   jupyter          "PORT TOKEN" or empty: the init starts jupyter-notebook
 *                    on PORT with that token when the image has it
 *   desktop          "PORT TOKEN" or empty: the init starts the desktop when
 *                    the image has it (the desktop recipe): Xvnc on display
 *                    :1 listening on loopback only, its VNC password the
 *                    token's first 8 digits; an Xfce session on it; and
 *                    websockify serving noVNC on PORT, the only way in
 *   metadata-token   a random token, new at every start (0600): the
 *                    instance shows it to http://169.254.169.254/
 *                    (node/metadata.h), which answers for it only
 *   shutdown         the `shutdown` command (BOOT_SHUTDOWN_MOUNT): stops
 *                    the instance through that endpoint
 *   host-keys/       on an instance's first start only: its SSH host keys
 *                    (ed25519, ECDSA), made by the node, which the init
 *                    copies to /etc/ssh (boot_host_keys)
 *
 * It lives on the host, not on the instance's disks, and is rewritten on
 * every start, so a changed password applies at the next start; the key
 * set also while the instance runs (boot_update_keys).
 * Nothing in it is writable from inside; /etc/hosts, /etc/hostname and
 * /etc/resolv.conf, which are, live on the system disk (rootfs.h). */
#ifndef SL_NODE_BOOT_H
#define SL_NODE_BOOT_H

#include <stdbool.h>

#include "../lib/error.h"

struct boot_params {
    const char *id;                  /* instance id (hostname) */
    const char *root_password_crypt; /* "$6$SALT$HASH"; NULL or "": unchanged */
    const char *authorized_keys;     /* OpenSSH public key lines; NULL: none */
    unsigned jupyter_port;           /* 0: no Jupyter; else its port, with jupyter_token */
    const char *jupyter_token;       /* [0-9a-f], Jupyter's own login token */
    unsigned desktop_port;           /* 0: no desktop; else noVNC's port, with desktop_token */
    const char *desktop_token;       /* [0-9a-f], 8 or more: the VNC password is its first 8 */
    bool autodl_paths;               /* the init links /root/autodl-tmp -> /root/data,
                                        autodl-pub -> public, autodl-fs -> storage
                                        (each while its target exists) */
};

/* Creates boot_dir (0755) and writes its files. A password hash that is
 * not in crypt(3)'s alphabet, or key text with a control character, is
 * SL_E_INVALID. */
int boot_write(const char *boot_dir, const struct boot_params *p, struct sl_error *err);

/* fresh (the instance's first start, its system disk new): makes its SSH
 * host keys in boot_dir/host-keys with the host's ssh-keygen, so the
 * instance spends none of its CPU quota on them before sshd answers;
 * otherwise removes that directory (the keys live on the system disk by
 * then). Without ssh-keygen on the host, or after a failure, the init
 * makes the keys itself, as before. */
int boot_host_keys(const char *boot_dir, bool fresh, struct sl_error *err);

/* Makes boot_dir/authorized_keys say keys (NULL: none) when it says
 * something else: 1 when it changed, 0 when it was already so, -1 on
 * failure (key text with a control character is SL_E_INVALID). Written
 * whole and renamed into place on the host, in the boot directory the
 * instance sees read-only: sshd reads it at every login, so a running
 * instance takes a key added or removed at its next login, and nothing the
 * renter made inside (a symlink in /root/.ssh) is ever followed. */
int boot_update_keys(const char *boot_dir, const char *keys, struct sl_error *err);

/* Where the `shutdown` command is bound (read-only) inside: early in PATH,
 * before any shutdown the image has. */
#define BOOT_SHUTDOWN_MOUNT "/usr/local/sbin/shutdown"
#define BOOT_TOKEN_FILE     "metadata-token"
#define BOOT_TOKEN_HEX      64

#endif
