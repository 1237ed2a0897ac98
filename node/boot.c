#include "boot.h"
#include "fsutil.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <string.h>

/* sshd gets what it needs from the command line rather than from edits to
 * the image's /etc/ssh/sshd_config, which stays the renter's to change:
 * root may log in with the password, the platform's keys are read from
 * /.suanli/authorized_keys next to the renter's own file (so a key removed
 * from the account stops working at the next start), and the GPU variables
 * reach SSH sessions (pid 1's environment does not). */
const char boot_init_script[] =
    "#!/bin/sh\n"
    "# Written by suanli-node: the instance's pid 1. It becomes sshd.\n"
    "set -eu\n"
    "umask 022\n"
    "boot=/.suanli\n"
    "if [ -s \"$boot/root-password\" ]; then\n"
    "    printf 'root:%s\\n' \"$(cat \"$boot/root-password\")\" | chpasswd\n"
    "fi\n"
    "# Host keys: made on the first boot (not taken from the image, where every\n"
    "# instance would share them) and kept on the system disk after.\n"
    "keys=/etc/ssh\n"
    "if [ ! -e $keys/.suanli-host-keys ]; then\n"
    "    rm -f $keys/ssh_host_*_key $keys/ssh_host_*_key.pub\n"
    "    : > $keys/.suanli-host-keys\n"
    "fi\n"
    "for type in ed25519 ecdsa; do\n"
    "    [ -s $keys/ssh_host_${type}_key ] ||\n"
    "        ssh-keygen -q -t $type -N '' -f $keys/ssh_host_${type}_key\n"
    "done\n"
    "# RSA takes about a second: it is made in the background and served from\n"
    "# the next start on. (Reloading sshd with SIGHUP instead briefly closes\n"
    "# its listener and refuses logins in flight.)\n"
    "if [ ! -s $keys/ssh_host_rsa_key ]; then\n"
    "    (\n"
    "        rm -f $keys/rsa.tmp $keys/rsa.tmp.pub\n"
    "        ssh-keygen -q -t rsa -b 3072 -N '' -f $keys/rsa.tmp &&\n"
    "            mv $keys/rsa.tmp.pub $keys/ssh_host_rsa_key.pub &&\n"
    "            mv $keys/rsa.tmp $keys/ssh_host_rsa_key\n"
    "    ) </dev/null >/dev/null 2>&1 &\n"
    "fi\n"
    "mkdir -p /run/sshd /root/.ssh\n"
    "chmod 0755 /run/sshd\n"
    "chmod 0700 /root/.ssh\n"
    "exec /usr/sbin/sshd -D -e \\\n"
    "    -o PermitRootLogin=yes \\\n"
    "    -o \"AuthorizedKeysFile=.ssh/authorized_keys $boot/authorized_keys\" \\\n"
    "    -o \"SetEnv=NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-void} "
    "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}\"\n";

static bool printable(const char *s, bool lines)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n' && lines)
            continue;
        if (*p < 0x20 || *p == 0x7f)
            return false;
    }
    return true;
}

/* The host's resolvers, less loopback ones, which mean nothing inside. */
static char *resolv_conf(void)
{
    struct sl_error ignored = SL_ERROR_INIT;
    cleanup_free char *host = fs_read_file("/etc/resolv.conf", 64 * 1024, NULL, &ignored);
    struct sl_buf out;
    sl_buf_init(&out);
    sl_buf_adds(&out, "# written by suanli-node from the host's resolv.conf\n");
    char *save = NULL;
    for (char *line = host ? strtok_r(host, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "nameserver", 10) == 0 &&
            (strstr(line, " 127.") || strstr(line, " ::1") || strstr(line, "\t127.")))
            continue;
        sl_buf_addf(&out, "%s\n", line);
    }
    return sl_buf_detach(&out, NULL);
}

int boot_write(const char *boot_dir, const struct boot_params *p, struct sl_error *err)
{
    if (p->root_password && !printable(p->root_password, false))
        return sl_fail(err, SL_E_INVALID, "invalid_password",
                       "root password has a control character");
    if (p->authorized_keys && !printable(p->authorized_keys, true))
        return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                       "authorized keys have a control character");
    if (fs_mkdir_p(boot_dir, 0755, err) < 0)
        return -1;

    cleanup_free char *init = xasprintf("%s/init", boot_dir);
    cleanup_free char *password = xasprintf("%s/root-password", boot_dir);
    cleanup_free char *keys = xasprintf("%s/authorized_keys", boot_dir);
    cleanup_free char *hosts = xasprintf("%s/hosts", boot_dir);
    cleanup_free char *resolv = xasprintf("%s/resolv.conf", boot_dir);
    cleanup_free char *hosts_text =
        xasprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                  "127.0.1.1\t%s\n",
                  p->id);
    cleanup_free char *resolv_text = resolv_conf();
    const char *pw = p->root_password ? p->root_password : "";
    const char *k = p->authorized_keys ? p->authorized_keys : "";

    if (fs_write_file(init, boot_init_script, strlen(boot_init_script), 0755, err) < 0 ||
        fs_write_file(password, pw, strlen(pw), 0600, err) < 0 ||
        fs_write_file(keys, k, strlen(k), 0644, err) < 0 ||
        fs_write_file(hosts, hosts_text, strlen(hosts_text), 0644, err) < 0 ||
        fs_write_file(resolv, resolv_text, strlen(resolv_text), 0644, err) < 0)
        return -1;
    return 0;
}
