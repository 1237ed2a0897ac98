/* node-smoke: the whole host path of an instance, for real. Imports the base
 * rootfs tarball as an image (cached under SMOKE_DIR, so reruns are fast),
 * makes a 30 GiB system disk and a 50 GiB data disk, starts the instance
 * (overlay root, netns + CNI with a free host port, runc), waits for the SSH
 * banner on 127.0.0.1, logs in with a fresh ed25519 key and checks what the
 * renter sees, writes files, stops, starts again from the same disks, checks
 * the files survived, releases, and checks that nothing is left on the host.
 *
 * Needs root, runc, the CNI plugins, e2fsprogs and openssh-client.
 *   SUANLI_BASE_TAR   the rootfs tarball (default /var/tmp/suanli-img/base.tar)
 *   SUANLI_SMOKE_DIR  the node data dir (default /var/tmp/suanli-node-test)
 *   SUANLI_SMOKE_BRIDGE, SUANLI_SMOKE_SUBNET  the instances' bridge and its
 *                     subnet (default suanli0, 10.88.0.0/16): a run of its own
 *                     beside other tests that use the defaults
 *   SUANLI_SMOKE_BUILD=1  build the image with mmdebstrap from the host's apt
 *                     sources instead of importing the tarball (minutes) */
#include "../../node/boot.h"
#include "../../node/image.h"
#include "../../node/instance.h"
#include "../../node/net.h"
#include "../../node/runtime.h"
#include "../../lib/buf.h"
#include "../../lib/cleanup.h"
#include "../../lib/crypto.h"
#include "../../lib/id.h"
#include "../../lib/netaddr.h"
#include "../../lib/subprocess.h"
#include "../../lib/xalloc.h"

#include <arpa/inet.h>
#include <crypt.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define IMAGE_NAME    "debian12-smoke"
#define DATA_DISK_GIB 50
#define BANNER_WAIT_S 60

static int failures;
/* the instances' bridge and its subnet (SUANLI_SMOKE_BRIDGE, _SUBNET) */
static const char *bridge = "suanli0";
static const char *subnet = "10.88.0.0/16";

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!ok)
        failures++;
}

static void die_on(int rc, const struct sl_error *err, const char *what)
{
    if (rc >= 0)
        return;
    fprintf(stderr, "node-smoke: %s: %s\n", what, err->message);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static unsigned free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        perror("node-smoke: free port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* Connects to 127.0.0.1:port until an "SSH-" line arrives; returns it. */
static char *wait_banner(unsigned port, double timeout_s)
{
    double deadline = now_s() + timeout_s;
    while (now_s() < deadline) {
        cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            char buf[256];
            if (poll(&p, 1, 2000) > 0) {
                ssize_t n = read(fd, buf, sizeof(buf) - 1);
                if (n > 4 && strncmp(buf, "SSH-", 4) == 0) {
                    buf[strcspn(buf, "\r\n")] = '\0';
                    return xstrdup(buf);
                }
            }
        }
        struct timespec ts = { .tv_nsec = 5 * 1000000L };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int ssh_run(const char *key, unsigned port, const char *cmd, struct sl_buf *out)
{
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%u", port);
    const char *argv[] = { "ssh",
                           "-i",
                           key,
                           "-p",
                           port_s,
                           "-o",
                           "StrictHostKeyChecking=no",
                           "-o",
                           "UserKnownHostsFile=/dev/null",
                           "-o",
                           "BatchMode=yes",
                           "-o",
                           "IdentitiesOnly=yes",
                           "-o",
                           "LogLevel=ERROR",
                           "root@127.0.0.1",
                           cmd,
                           NULL };
    struct sl_error err = SL_ERROR_INIT;
    sl_buf_reset(out);
    int rc = sl_run(argv, out, &err);
    for (size_t i = 0; i < out->len; i++) {
        if (out->data[i] == '\0')
            out->data[i] = ' '; /* /proc/1/cmdline */
    }
    if (rc < 0)
        printf("     ssh: %s\n", err.message);
    return rc;
}

/* Logs in with the root password, through SSH_ASKPASS (no sshpass needed). */
static int ssh_password(const char *dir, const char *password, unsigned port, struct sl_buf *out)
{
    cleanup_free char *askpass = xasprintf("%s/askpass", dir);
    cleanup_fclose FILE *f = fopen(askpass, "we");
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\necho '%s'\n", password);
    fclose(TAKE_PTR(f));
    chmod(askpass, 0700);
    cleanup_free char *e_askpass = xasprintf("SSH_ASKPASS=%s", askpass);
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%u", port);
    const char *envp[] = { e_askpass, "SSH_ASKPASS_REQUIRE=force", "DISPLAY=none",
                           "PATH=/usr/local/bin:/usr/bin:/bin", NULL };
    const char *argv[] = { "setsid",
                           "-w",
                           "ssh",
                           "-p",
                           port_s,
                           "-o",
                           "StrictHostKeyChecking=no",
                           "-o",
                           "UserKnownHostsFile=/dev/null",
                           "-o",
                           "PubkeyAuthentication=no",
                           "-o",
                           "PreferredAuthentications=password",
                           "-o",
                           "LogLevel=ERROR",
                           "-o",
                           "NumberOfPasswordPrompts=1",
                           "root@127.0.0.1",
                           "echo pw-ok",
                           NULL };
    struct sl_subprocess sp = { .argv = argv, .envp = envp, .out = out };
    struct sl_error err = SL_ERROR_INIT;
    sl_buf_reset(out);
    int rc = sl_subprocess_check(&sp, &err);
    if (rc < 0)
        printf("     ssh (password): %s\n", err.message);
    return rc;
}

/* The host's first IPv4 address that is not loopback nor on the bridge. */
static bool host_address(char *out, size_t size)
{
    struct sl_buf buf;
    sl_buf_init(&buf);
    struct sl_error err = SL_ERROR_INIT;
    const char *argv[] = { "hostname", "-I", NULL };
    struct sl_net_list on_bridge = { 0 };
    bool ok = false;
    if (sl_net_list_parse(subnet, &on_bridge, &err) == 0 && sl_run(argv, &buf, &err) == 0) {
        char *save = NULL;
        for (char *w = strtok_r(buf.data, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
            if (strchr(w, ':') || sl_net_list_has_text(&on_bridge, w) || strncmp(w, "127.", 4) == 0)
                continue;
            snprintf(out, size, "%s", w);
            ok = true;
            break;
        }
    }
    sl_net_list_release(&on_bridge);
    sl_buf_release(&buf);
    return ok;
}

static bool banner_at(const char *addr, unsigned port)
{
    cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (inet_pton(AF_INET, addr, &a.sin_addr) != 1 ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        return false;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    char buf[64];
    return poll(&p, 1, 3000) > 0 && read(fd, buf, sizeof(buf)) > 4 && strncmp(buf, "SSH-", 4) == 0;
}

static bool has_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, n) == 0)
            return true;
    }
    return false;
}

static const char *line_with(const char *text, const char *needle, char *line, size_t size)
{
    const char *hit = strstr(text, needle);
    if (!hit)
        return NULL;
    const char *start = hit;
    while (start > text && start[-1] != '\n')
        start--;
    snprintf(line, size, "%.*s", (int)strcspn(start, "\n"), start);
    return line;
}

static void ensure_image(const char *data_dir, const char *tar)
{
    struct sl_error err = SL_ERROR_INIT;
    struct image img;
    if (image_load(data_dir, IMAGE_NAME, &img, &err) == 0) {
        printf("image %s cached: layer %.12s, %s, python %s\n", IMAGE_NAME, img.layers[0], img.os,
               img.python);
        image_release(&img);
        return;
    }
    double t = now_s();
    const char *build = getenv("SUANLI_SMOKE_BUILD");
    /* no tarball at hand (a fresh machine): build the image as a node would */
    if ((build && strcmp(build, "1") == 0) || access(tar, R_OK) != 0) {
        build = "1";
        die_on(image_build_default(data_dir, IMAGE_NAME, "bookworm", &err), &err, "build image");
    } else {
        char digest[IMAGE_DIGEST_HEX];
        die_on(image_layer_import(data_dir, tar, digest, &err), &err, "import base image");
        const char *layers[] = { digest };
        die_on(image_save(data_dir, IMAGE_NAME, layers, 1, &err), &err, "save image");
    }
    die_on(image_load(data_dir, IMAGE_NAME, &img, &err), &err, "load image");
    printf("image %s %s in %.2f s: layer %.12s, %s, python %s\n", IMAGE_NAME,
           build ? "built" : "imported", now_s() - t, img.layers[0], img.os, img.python);
    check(strstr(img.os, "Debian") != NULL, "image os read from os-release: '%s'", img.os);
    check(strncmp(img.python, "3.", 2) == 0, "image python version read: '%s'", img.python);
    image_release(&img);
}

static bool path_mentions(const char *path, const char *needle)
{
    struct sl_error err = SL_ERROR_INIT;
    struct sl_buf out;
    sl_buf_init(&out);
    cleanup_fclose FILE *f = fopen(path, "re");
    char line[4096];
    bool found = false;
    while (f && fgets(line, sizeof(line), f))
        found |= strstr(line, needle) != NULL;
    sl_buf_release(&out);
    (void)err;
    return found;
}

static bool loop_backed_by(const char *needle)
{
    DIR *d = opendir("/sys/block");
    bool found = false;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "loop", 4) != 0)
            continue;
        cleanup_free char *p = xasprintf("/sys/block/%s/loop/backing_file", e->d_name);
        found |= path_mentions(p, needle);
    }
    if (d)
        closedir(d);
    return found;
}

static bool command_mentions(const char *const *argv, const char *needle)
{
    struct sl_buf out;
    sl_buf_init(&out);
    struct sl_error err = SL_ERROR_INIT;
    sl_run(argv, &out, &err);
    bool found = strstr(out.data, needle) != NULL;
    sl_buf_release(&out);
    return found;
}

/* veths on the smoke test's own bridge: other test runs may add theirs to
 * other bridges meanwhile */
static int count_veths(void)
{
    struct sl_buf out;
    sl_buf_init(&out);
    struct sl_error err = SL_ERROR_INIT;
    const char *argv[] = { "ip", "-o", "link", "show", "master", bridge, "type", "veth", NULL };
    sl_run(argv, &out, &err);
    int n = 0;
    for (const char *p = out.data; (p = strchr(p, '\n')); p++)
        n++;
    sl_buf_release(&out);
    return n;
}

static bool cgroup_left(const char *id)
{
    static const char *const controllers[] = { "cpu",   "memory", "pids",    "devices", "freezer",
                                               "blkio", "cpuset", "systemd", "unified" };
    for (size_t i = 0; i < ARRAY_SIZE(controllers); i++) {
        cleanup_free char *p = xasprintf("/sys/fs/cgroup/%s/suanli/%s", controllers[i], id);
        if (access(p, F_OK) == 0)
            return true;
    }
    return false;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tar =
        getenv("SUANLI_BASE_TAR") ? getenv("SUANLI_BASE_TAR") : "/var/tmp/suanli-img/base.tar";
    const char *data_dir =
        getenv("SUANLI_SMOKE_DIR") ? getenv("SUANLI_SMOKE_DIR") : "/var/tmp/suanli-node-test";
    if (getenv("SUANLI_SMOKE_BRIDGE"))
        bridge = getenv("SUANLI_SMOKE_BRIDGE");
    if (getenv("SUANLI_SMOKE_SUBNET"))
        subnet = getenv("SUANLI_SMOKE_SUBNET");
    struct sl_error err = SL_ERROR_INIT;
    die_on(sl_crypto_init(&err), &err, "crypto");
    mkdir(data_dir, 0700);
    ensure_image(data_dir, tar);

    char id[SL_ID_MAX];
    sl_id_new(id, "i-");
    cleanup_free char *runc_root = xasprintf("%s/runc", data_dir);
    cleanup_free char *net_state = xasprintf("%s/net", data_dir);
    struct runtime rt = { .ops = &runtime_runc_ops, .binary = "runc", .root = runc_root };
    struct net_config net = {
        .cni_path = "/usr/lib/cni", .bridge = bridge, .subnet = subnet, .state_dir = net_state
    };
    struct node_host host = { .data_dir = data_dir, .runtime = &rt, .net = &net };

    cleanup_free char *keydir = xasprintf("%s/smoke-keys/%s", data_dir, id);
    cleanup_free char *key = xasprintf("%s/id_ed25519", keydir);
    cleanup_free char *mk = xasprintf("mkdir -p %s", keydir);
    const char *mkdir_argv[] = { "mkdir", "-p", keydir, NULL };
    die_on(sl_run(mkdir_argv, NULL, &err), &err, "key dir");
    const char *keygen[] = { "ssh-keygen", "-q",         "-t", "ed25519", "-N", "",
                             "-C",         "node-smoke", "-f", key,       NULL };
    die_on(sl_run(keygen, NULL, &err), &err, "ssh-keygen");
    cleanup_free char *pub_path = xasprintf("%s.pub", key);
    cleanup_fclose FILE *pf = fopen(pub_path, "re");
    char pub[1024] = "";
    if (!pf || !fgets(pub, sizeof(pub), pf)) {
        fprintf(stderr, "node-smoke: unable to read '%s'\n", pub_path);
        return 1;
    }
    char password[25], salt[CRYPT_GENSALT_OUTPUT_SIZE];
    sl_random_hex(password, 12);
    /* the node gets a crypt(3) hash, as suanlid sends it */
    static struct crypt_data crypt_work;
    const char *hash = crypt_gensalt_rn("$6$", 0, NULL, 0, salt, sizeof(salt))
                           ? crypt_rn(password, salt, &crypt_work, sizeof(crypt_work))
                           : NULL;
    if (!hash) {
        fprintf(stderr, "node-smoke: unable to hash the root password with crypt(3)\n");
        return 1;
    }
    unsigned port = free_port();
    int veths_before = count_veths();
    printf("instance %s, host port %u\n", id, port);

    struct instance_spec spec = { .id = id,
                                  .image = IMAGE_NAME,
                                  .data_disk_gib = DATA_DISK_GIB,
                                  .host_port = port,
                                  .root_password_crypt = hash,
                                  .authorized_keys = pub,
                                  .cpu_millicores = 2000,
                                  .memory_mib = 2048,
                                  .pids_max = 4096 };

    /* create -> banner */
    char ip[64] = "";
    double t0 = now_s();
    die_on(instance_create_disks(&host, &spec, &err), &err, "create disks");
    double t_disks = now_s();
    die_on(instance_start(&host, &spec, ip, &err), &err, "start");
    double t_started = now_s();
    cleanup_free char *banner = wait_banner(port, BANNER_WAIT_S);
    double t1 = now_s();
    check(banner != NULL, "SSH banner on 127.0.0.1:%u: %s", port, banner ? banner : "(none)");
    printf("TIMING create->banner %.3f s (disks %.3f, start %.3f, sshd up %.3f); ip %s\n", t1 - t0,
           t_disks - t0, t_started - t_disks, t1 - t_started, ip);
    if (!banner) {
        cleanup_free char *log = xasprintf("%s/instances/%s/console.log", data_dir, id);
        const char *cat[] = { "tail", "-n", "20", log, NULL };
        struct sl_buf out;
        sl_buf_init(&out);
        sl_run(cat, &out, &err);
        printf("console.log:\n%s\n", out.data);
        sl_buf_release(&out);
    }

    struct sl_buf out;
    sl_buf_init(&out);
    char line[512];
    if (banner) {
        int rc = ssh_run(key, port,
                         "hostname; cat /proc/1/cmdline; echo; df -h / /root/data; "
                         "echo NV=$NVIDIA_VISIBLE_DEVICES; echo CUDA=[$CUDA_VISIBLE_DEVICES]; "
                         "grep -c '^root:\\$' /etc/shadow; "
                         "test -x /usr/lib/openssh/sftp-server && echo sftp-ok",
                         &out);
        check(rc == 0, "ssh with the instance key works");
        printf("%s", out.data);
        check(has_line_starting(out.data, id), "hostname is the instance id");
        check(strstr(out.data, "sshd") != NULL, "pid 1 is sshd");
        check(line_with(out.data, "overlay", line, sizeof(line)) && line[strlen(line) - 1] == '/',
              "/ is overlay");
        check(line_with(out.data, "/root/data", line, sizeof(line)) &&
                  (strstr(line, " 49G ") || strstr(line, " 50G ")),
              "/root/data is the %d GiB data disk", DATA_DISK_GIB);
        check(has_line_starting(out.data, "NV=void"), "NVIDIA_VISIBLE_DEVICES=void without GPUs");
        check(has_line_starting(out.data, "CUDA=[]"), "CUDA_VISIBLE_DEVICES empty without GPUs");
        check(has_line_starting(out.data, "1\n"), "root has a password hash");
        check(has_line_starting(out.data, "sftp-ok"), "sftp-server is there");
        check(ssh_password(keydir, password, port, &out) == 0 && strstr(out.data, "pw-ok"),
              "ssh with the random root password works");
        char addr[64];
        if (host_address(addr, sizeof(addr)))
            check(banner_at(addr, port), "SSH banner on the host's address %s:%u", addr, port);
        rc = ssh_run(key, port,
                     "echo data-survives > /root/data/persist.txt && "
                     "echo root-survives > /root/persist.txt && sync && "
                     "cat /etc/ssh/ssh_host_ed25519_key.pub",
                     &out);
        check(rc == 0, "files written in /root/data and /root");
    }
    cleanup_free char *host_key = xstrdup(out.data);

    /* stop -> start -> banner */
    double t2 = now_s();
    die_on(instance_stop(&host, id, port, 5000, &err), &err, "stop");
    double t3 = now_s();
    check(!loop_backed_by(id), "stopped: no loop device attached");
    die_on(instance_start(&host, &spec, ip, &err), &err, "start again");
    cleanup_free char *banner2 = wait_banner(port, BANNER_WAIT_S);
    double t4 = now_s();
    check(banner2 != NULL, "SSH banner again after stop/start");
    printf("TIMING stop %.3f s; start->banner %.3f s; stop->start->banner %.3f s\n", t3 - t2,
           t4 - t3, t4 - t2);
    if (banner2) {
        int rc = ssh_run(key, port,
                         "cat /root/data/persist.txt /root/persist.txt; "
                         "cat /etc/ssh/ssh_host_ed25519_key.pub",
                         &out);
        check(rc == 0 && strstr(out.data, "data-survives"), "data disk file survived");
        check(rc == 0 && strstr(out.data, "root-survives"), "system disk file survived");
        check(rc == 0 && host_key[0] && strstr(out.data, host_key),
              "SSH host key survived the restart");
        /* No RSA host key: a second of CPU at every first boot (boot.c). */
        check(ssh_run(key, port, "test ! -e /etc/ssh/ssh_host_rsa_key", &out) == 0,
              "no RSA host key made");
    }

    /* release -> nothing left */
    die_on(instance_release(&host, id, port, &err), &err, "release");
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%u", port);
    cleanup_free char *netns = net_netns_path(id);
    cleanup_free char *runc_state = xasprintf("%s/%s", runc_root, id);
    cleanup_free char *inst = instance_dir(&host, id);
    const char *iptables_save[] = { "iptables-save", NULL };
    check(!path_mentions("/proc/self/mountinfo", id), "released: no mount mentions %s", id);
    check(!loop_backed_by(id), "released: no loop device backed by its files");
    check(access(netns, F_OK) < 0, "released: no netns %s", netns);
    check(access(runc_state, F_OK) < 0, "released: no runc state");
    check(!command_mentions(iptables_save, id), "released: no iptables rule mentions the id");
    check(!command_mentions(iptables_save, port_s), "released: no iptables rule has port %s",
          port_s);
    check(count_veths() == veths_before, "released: no veth left (%d before, %d after)",
          veths_before, count_veths());
    check(!cgroup_left(id), "released: no cgroup left");
    check(access(inst, F_OK) < 0, "released: instance dir removed");
    (void)mk;

    sl_buf_release(&out);
    const char *rm[] = { "rm", "-rf", keydir, NULL };
    sl_run(rm, NULL, &err);
    printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
