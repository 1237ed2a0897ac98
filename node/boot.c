#include "boot.h"
#include "fsutil.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* sshd gets what it needs from the command line rather than from edits to
 * the image's /etc/ssh/sshd_config, which stays the renter's to change:
 * root may log in with the password, the platform's keys are read from
 * /.suanli/authorized_keys next to the renter's own file (rewritten by the
 * agent while the instance runs, so a key removed from the account stops
 * working at the next login: boot_update_keys), and the GPU variables and
 * OMP_NUM_THREADS (oci.c) reach SSH sessions (pid 1's environment does
 * not). */
static const char boot_init_script[] =
    "#!/bin/sh\n"
    "# Written by suanli-node: the instance's pid 1. It becomes sshd.\n"
    "set -eu\n"
    "umask 022\n"
    "boot=/.suanli\n"
    "# pid 1 runs alone: a lock on the account files was left by an instance\n"
    "# stopped while chpasswd or useradd held it, and would refuse root's\n"
    "# password (and this boot) forever: a pid in it is alive again in a new\n"
    "# pid namespace\n"
    "# (the shell's own tests first: every program run here is paid from the\n"
    "# instance's CPU quota before sshd answers)\n"
    "for f in /etc/passwd.lock /etc/shadow.lock /etc/group.lock /etc/gshadow.lock; do\n"
    "    if [ -e $f ] || [ -L $f ]; then rm -f $f; fi\n"
    "done\n"
    "# root's password comes as a crypt(3) hash: the node never has the plaintext.\n"
    "# /etc/shadow is rewritten only when its root line has another hash, with\n"
    "# the shell's own read and printf, made aside (cp -p keeps its owner and\n"
    "# mode) and moved in whole: chpasswd's PAM and fsyncs cost ~60 ms at every\n"
    "# first boot under the instance's CPU quota. No root line: chpasswd adds it.\n"
    "if [ -s \"$boot/root-password-crypt\" ]; then\n"
    "    IFS= read -r want < \"$boot/root-password-crypt\" || true\n"
    "    have= new= nl='\n"
    "'\n"
    "    while IFS= read -r line || [ -n \"$line\" ]; do\n"
    "        case $line in\n"
    "        root:*)\n"
    "            rest=${line#root:}; have=${rest%%:*}\n"
    "            line=\"root:$want:${rest#*:}\" ;;\n"
    "        esac\n"
    "        new=\"$new$line$nl\"\n"
    "    done < /etc/shadow || true\n"
    "    case $new in\n"
    "    root:* | *\"${nl}root:\"*)\n"
    "        if [ \"$have\" != \"$want\" ]; then\n"
    "            rm -f /etc/shadow.suanli\n"
    "            cp -p /etc/shadow /etc/shadow.suanli\n"
    "            printf '%s' \"$new\" > /etc/shadow.suanli\n"
    "            mv -f /etc/shadow.suanli /etc/shadow\n"
    "        fi ;;\n"
    "    *) printf 'root:%s\\n' \"$want\" | chpasswd -e ;;\n"
    "    esac\n"
    "fi\n"
    "# Host keys: made on the first boot (not taken from the image, where every\n"
    "# instance would share them) and kept on the system disk after.\n"
    "keys=/etc/ssh\n"
    "if [ ! -e $keys/.suanli-host-keys ]; then\n"
    "    rm -f $keys/ssh_host_*_key $keys/ssh_host_*_key.pub\n"
    "    # the node made them on the first start (boot_host_keys): copied with\n"
    "    # the shell's own read and printf, the marker last, so a boot cut\n"
    "    # short copies them again\n"
    "    if [ -s $boot/host-keys/ssh_host_ed25519_key ]; then\n"
    "        for f in $boot/host-keys/ssh_host_*; do\n"
    "            case $f in *.pub) umask 022 ;; *) umask 077 ;; esac\n"
    "            while IFS= read -r line; do printf '%s\\n' \"$line\"; done < $f > $keys/${f##*/}\n"
    "        done\n"
    "        umask 022\n"
    "    fi\n"
    "    : > $keys/.suanli-host-keys\n"
    "fi\n"
    "# each made aside and moved in whole: an instance stopped midway leaves no\n"
    "# half a key that would be kept\n"
    "for type in ed25519 ecdsa; do\n"
    "    if [ ! -s $keys/ssh_host_${type}_key ]; then\n"
    "        rm -f $keys/$type.tmp $keys/$type.tmp.pub\n"
    "        ssh-keygen -q -t $type -N '' -f $keys/$type.tmp\n"
    "        mv $keys/$type.tmp.pub $keys/ssh_host_${type}_key.pub\n"
    "        mv $keys/$type.tmp $keys/ssh_host_${type}_key\n"
    "    fi\n"
    "done\n"
    "# No RSA host key: it took a second of CPU at every first boot (four at the\n"
    "# instance's quota), competing with sshd; ed25519 and ECDSA serve every\n"
    "# client of the last decade, and sshd serves an RSA key the renter makes\n"
    "# (ssh-keygen -A) from the next start on.\n"
    "# AutoDL's paths (suanlid's instances.autodl_paths): /root/autodl-tmp,\n"
    "# autodl-pub and autodl-fs link to the data disk, the public data and the\n"
    "# file storage, each only while its target is there; never over a\n"
    "# renter's own file or directory of that name. A link of ours goes when\n"
    "# the setting is off or its target is gone (no dangling link).\n"
    "for pair in autodl-tmp:data autodl-pub:public autodl-fs:storage; do\n"
    "    link=/root/${pair%%:*} target=/root/${pair#*:}\n"
    "    if [ -L $link ]; then\n"
    "        if [ ! -e $boot/autodl-paths ] || [ ! -d $target ]; then\n"
    "            if [ \"$(readlink $link 2>/dev/null)\" = $target ]; then rm -f $link; fi\n"
    "        fi\n"
    "    elif [ -e $boot/autodl-paths ] && [ -d $target ] && [ ! -e $link ]; then\n"
    "        ln -s $target $link || true\n"
    "    fi\n"
    "done\n"
    "# /run is a fresh tmpfs (mode 0755 under umask 022)\n"
    "mkdir -p /run/sshd /root/.ssh\n"
    "chmod 0700 /root/.ssh\n"
    "# Jupyter, when the image has it and suanlid published its port (PORT TOKEN)\n"
    "if [ -s $boot/jupyter ] && command -v jupyter-notebook >/dev/null 2>&1; then\n"
    "    read -r jport jtoken < $boot/jupyter || true\n"
    "    (cd /root && exec jupyter-notebook --allow-root --no-browser --ip=0.0.0.0 \\\n"
    "        --port=\"$jport\" --NotebookApp.token=\"$jtoken\" --NotebookApp.port_retries=0 \\\n"
    "        --NotebookApp.allow_remote_access=True) </dev/null >>/var/log/jupyter.log 2>&1 &\n"
    "fi\n"
    "# The desktop, when the image has it and suanlid published its port (PORT\n"
    "# TOKEN): Xvnc on display :1 listening on loopback only (no TCP for X\n"
    "# either), the token's first 8 digits its VNC password; an Xfce session on\n"
    "# it, started again after a logout; websockify serving noVNC on the port,\n"
    "# which the node's proxy lets the owner reach\n"
    "if [ -s $boot/desktop ] && command -v Xvnc >/dev/null 2>&1 &&\n"
    "    command -v vncpasswd >/dev/null 2>&1 && command -v websockify >/dev/null 2>&1; then\n"
    "    read -r dport dtoken < $boot/desktop || true\n"
    "    # a lock left by the last start names a pid that may be alive again\n"
    "    rm -f /tmp/.X1-lock /tmp/.X11-unix/X1\n"
    "    # dbus needs a machine id; the image has none (each instance its own)\n"
    "    if [ ! -s /etc/machine-id ]; then\n"
    "        read -r uuid < /proc/sys/kernel/random/uuid || true\n"
    "        printf '%s\\n' \"$uuid\" | tr -d - > /etc/machine-id || true\n"
    "    fi\n"
    "    mkdir -p /run/suanli-desktop\n"
    "    chmod 0700 /run/suanli-desktop\n"
    "    printf '%s\\n' \"${dtoken%\"${dtoken#????????}\"}\" |\n"
    "        vncpasswd -f > /run/suanli-desktop/passwd || true\n"
    "    Xvnc :1 -localhost -interface 127.0.0.1 -rfbport 5901 -nolisten tcp \\\n"
    "        -SecurityTypes VncAuth -PasswordFile /run/suanli-desktop/passwd \\\n"
    "        -geometry 1280x800 -depth 24 -AlwaysShared \\\n"
    "        </dev/null >>/var/log/desktop.log 2>&1 &\n"
    "    (cd /root\n"
    "     export DISPLAY=:1 HOME=/root USER=root SHELL=/bin/bash\n"
    "     i=0\n"
    "     while [ ! -S /tmp/.X11-unix/X1 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done\n"
    "     while :; do dbus-launch --exit-with-session xfce4-session || true; sleep 2; done\n"
    "    ) </dev/null >>/var/log/desktop.log 2>&1 &\n"
    "    websockify --web /usr/share/novnc 0.0.0.0:\"$dport\" 127.0.0.1:5901 \\\n"
    "        </dev/null >>/var/log/desktop.log 2>&1 &\n"
    "fi\n"
    "exec /usr/sbin/sshd -D -e \\\n"
    "    -o PermitRootLogin=yes \\\n"
    "    -o \"AuthorizedKeysFile=.ssh/authorized_keys $boot/authorized_keys\" \\\n"
    "    -o \"SetEnv=NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-void} "
    "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-} "
    "${OMP_NUM_THREADS:+OMP_NUM_THREADS=$OMP_NUM_THREADS}\"\n";

/* `python train.py; shutdown` stops the instance when training ends. POSIX
 * sh with curl, else python3 (the default images have both; an imported
 * image may have either). */
static const char boot_shutdown_script[] =
    "#!/bin/sh\n"
    "# Written by suanli-node: stops this instance from inside, through the\n"
    "# node's metadata endpoint (billing stops with it; the disks stay).\n"
    "#   shutdown [now|-h now|-P now]  stop the instance\n"
    "#   shutdown --status             print its id, balance and time left (JSON)\n"
    "set -u\n"
    "url=${SUANLI_METADATA_URL:-http://169.254.169.254}\n"
    "token_file=/.suanli/metadata-token\n"
    "case \"${1:-}\" in\n"
    "--help)\n"
    "    echo 'usage: shutdown [now]     stop this instance (billing stops; disks stay)'\n"
    "    echo '       shutdown --status  its id, balance and time left, as JSON'; exit 0 ;;\n"
    "--status | status | -s) method=GET path=/ ;;\n"
    "-r | --reboot | reboot)\n"
    "    echo 'shutdown: instances do not reboot from inside: suanli restart ID' >&2; exit 2 ;;\n"
    "-c)\n"
    "    echo 'shutdown: nothing to cancel: a stop from inside is immediate' >&2; exit 2 ;;\n"
    "*) method=POST path=/stop ;;\n"
    "esac\n"
    "token=$(cat \"$token_file\" 2>/dev/null) || {\n"
    "    echo \"shutdown: $token_file is missing: is this a suanli instance?\" >&2; exit 1; }\n"
    "# said before asking: the agent may stop sshd before a later line gets out\n"
    "[ \"$method\" = POST ] &&\n"
    "    echo \"shutdown: stopping ${SUANLI_INSTANCE_ID:-this instance}; billing ends as it "
    "stops\"\n"
    "if command -v curl >/dev/null 2>&1; then\n"
    "    out=$(curl -sS --max-time 30 -X \"$method\" -H \"Authorization: Bearer $token\" \\\n"
    "        -w '\\n%{http_code}' \"$url$path\") || exit 1\n"
    "    code=$(printf '%s\\n' \"$out\" | tail -n 1)\n"
    "    body=$(printf '%s\\n' \"$out\" | sed '$d')\n"
    "elif command -v python3 >/dev/null 2>&1; then\n"
    "    out=$(python3 - \"$method\" \"$url$path\" \"$token\" <<'EOF'\n"
    "import sys, urllib.request, urllib.error\n"
    "req = urllib.request.Request(sys.argv[2], method=sys.argv[1], data=b'' if "
    "sys.argv[1] == 'POST' else None)\n"
    "req.add_header('Authorization', 'Bearer ' + sys.argv[3])\n"
    "try:\n"
    "    r = urllib.request.urlopen(req, timeout=30); code, body = r.status, r.read()\n"
    "except urllib.error.HTTPError as e:\n"
    "    code, body = e.code, e.read()\n"
    "print(body.decode('utf-8', 'replace')); print(code)\n"
    "EOF\n"
    "    ) || exit 1\n"
    "    code=$(printf '%s\\n' \"$out\" | tail -n 1)\n"
    "    body=$(printf '%s\\n' \"$out\" | sed '$d')\n"
    "else\n"
    "    echo 'shutdown: needs curl or python3 to reach the metadata endpoint' >&2; exit 1\n"
    "fi\n"
    "case $code in\n"
    "2[0-9][0-9]) ;;\n"
    "*) echo \"shutdown: the node answered $code: $body\" >&2\n"
    "   [ \"$method\" = POST ] && echo 'shutdown: not stopped' >&2; exit 1 ;;\n"
    "esac\n"
    "[ \"$method\" = GET ] && printf '%s\\n' \"$body\"\n"
    "exit 0\n";

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

/* "$id$salt$hash" in crypt(3)'s alphabet: nothing chpasswd could read as
 * another field or line. */
static bool crypt_hash_valid(const char *s)
{
    size_t n = strlen(s);
    return n > 3 && n < 256 && s[0] == '$' &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789./$=,") == n;
}

int boot_write(const char *boot_dir, const struct boot_params *p, struct sl_error *err)
{
    if (p->root_password_crypt && *p->root_password_crypt &&
        !crypt_hash_valid(p->root_password_crypt))
        return sl_fail(err, SL_E_INVALID, "invalid_password",
                       "the root password must come as a crypt(3) hash ($6$SALT$HASH)");
    if (p->authorized_keys && !printable(p->authorized_keys, true))
        return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                       "authorized keys have a control character");
    if (p->jupyter_port &&
        (!p->jupyter_token || !*p->jupyter_token ||
         strspn(p->jupyter_token, "0123456789abcdef") != strlen(p->jupyter_token)))
        return sl_fail(err, SL_E_INVALID, "invalid_token", "Jupyter's token must be hex digits");
    if (p->desktop_port &&
        (!p->desktop_token || strlen(p->desktop_token) < 8 ||
         strspn(p->desktop_token, "0123456789abcdef") != strlen(p->desktop_token)))
        return sl_fail(err, SL_E_INVALID, "invalid_token",
                       "the desktop's token must be 8 or more hex digits");
    if (fs_mkdir_p(boot_dir, 0755, err) < 0)
        return -1;

    cleanup_free char *init = xasprintf("%s/init", boot_dir);
    cleanup_free char *password = xasprintf("%s/root-password-crypt", boot_dir);
    cleanup_free char *keys = xasprintf("%s/authorized_keys", boot_dir);
    const char *pw = p->root_password_crypt ? p->root_password_crypt : "";
    const char *k = p->authorized_keys ? p->authorized_keys : "";
    cleanup_free char *shutdown = xasprintf("%s/shutdown", boot_dir);
    cleanup_free char *jupyter = xasprintf("%s/jupyter", boot_dir);
    cleanup_free char *jupyter_text =
        p->jupyter_port ? xasprintf("%u %s\n", p->jupyter_port, p->jupyter_token) : xstrdup("");
    cleanup_free char *desktop = xasprintf("%s/desktop", boot_dir);
    cleanup_free char *desktop_text =
        p->desktop_port ? xasprintf("%u %s\n", p->desktop_port, p->desktop_token) : xstrdup("");
    cleanup_free char *token_path = xasprintf("%s/" BOOT_TOKEN_FILE, boot_dir);
    unsigned char raw[BOOT_TOKEN_HEX / 2];
    char token[BOOT_TOKEN_HEX + 1];
    randombytes_buf(raw, sizeof(raw));
    sodium_bin2hex(token, sizeof(token), raw, sizeof(raw));

    if (sl_file_write(init, boot_init_script, strlen(boot_init_script), 0755, 0, err) < 0 ||
        sl_file_write(password, pw, strlen(pw), 0600, 0, err) < 0 ||
        sl_file_write(keys, k, strlen(k), 0644, 0, err) < 0 ||
        sl_file_write(shutdown, boot_shutdown_script, strlen(boot_shutdown_script), 0755, 0, err) <
            0 ||
        sl_file_write(token_path, token, strlen(token), 0600, 0, err) < 0 ||
        sl_file_write(jupyter, jupyter_text, strlen(jupyter_text), 0600, 0, err) < 0 ||
        sl_file_write(desktop, desktop_text, strlen(desktop_text), 0600, 0, err) < 0)
        return -1;
    cleanup_free char *autodl = xasprintf("%s/autodl-paths", boot_dir);
    if (p->autodl_paths ? sl_file_write(autodl, "1\n", 2, 0644, 0, err) < 0
                        : (unlink(autodl) < 0 && errno != ENOENT))
        return err->kind ? -1 : sl_fail_errno(err, "unable to remove '%s'", autodl);
    return 0;
}

int boot_host_keys(const char *boot_dir, bool fresh, struct sl_error *err)
{
    static const char *const types[] = { "ed25519", "ecdsa" };
    cleanup_free char *dir = xasprintf("%s/host-keys", boot_dir);
    if (fs_remove_tree(dir, err) < 0)
        return -1;
    if (!fresh)
        return 0;
    cleanup_free char *tmp = xasprintf("%s/host-keys.new", boot_dir);
    if (fs_remove_tree(tmp, err) < 0 || fs_mkdir_p(tmp, 0700, err) < 0)
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        cleanup_free char *key = xasprintf("%s/ssh_host_%s_key", tmp, types[i]);
        const char *argv[] = { "ssh-keygen", "-q", "-t", types[i], "-N", "",
                               "-C",         "",   "-f", key,      NULL };
        if (sl_run(argv, NULL, err) < 0) {
            struct sl_error e = SL_ERROR_INIT;
            fs_remove_tree(tmp, &e);
            sl_error_prefix(err, "make the SSH host keys");
            return -1;
        }
    }
    /* whole or not at all: the init takes the directory as it finds it */
    if (rename(tmp, dir) < 0)
        return sl_fail_errno(err, "unable to rename '%s'", tmp);
    return 0;
}

int boot_update_keys(const char *boot_dir, const char *keys, struct sl_error *err)
{
    const char *k = keys ? keys : "";
    if (!printable(k, true))
        return sl_fail(err, SL_E_INVALID, "invalid_ssh_key",
                       "authorized keys have a control character");
    cleanup_free char *path = xasprintf("%s/authorized_keys", boot_dir);
    size_t len = strlen(k);
    size_t have_len = 0;
    cleanup_free char *have = fs_read_file(path, len + 2, &have_len, NULL);
    if (have && have_len == len && memcmp(have, k, len) == 0)
        return 0;
    if (access(boot_dir, F_OK) != 0) /* not started yet: boot_write makes it */
        return 0;
    return sl_file_write(path, k, len, 0644, 0, err) < 0 ? -1 : 1;
}
