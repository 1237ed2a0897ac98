/* Disk copies between agents (node/transfer.c), on loopback: a copy is
 * exact and stays sparse, the source's SSH host keys stay behind, a copy
 * resumes from its recorded block (and a stale block after it is fetched
 * again), and the server gives nothing to a missing or wrong token, to
 * another export's token, through a symbolic link or for a name that is
 * not a disk. Needs root (mkfs, loop devices): as the other disk tests. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/crypto.h"
#include "../../lib/file.h"
#include "../../lib/xalloc.h"
#include "../../node/disk.h"
#include "../../node/fsutil.h"
#include "../../node/transfer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKEN "sl_test-transfer-token-0123456789abcdefghijklmn"

static char *root;
static unsigned port; /* a free one of loopback's, found at setup */
static char url[64];

static unsigned free_port(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unsigned p = 0;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        p = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return p;
}

static char *path_of(const char *fmt, const char *a, const char *b)
{
    return xasprintf("%s/%s/instances/%s/%s", root, fmt, a, b);
}

static void write_at(const char *path, off_t off, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        CHECK(pwrite(fd, text, strlen(text), off) == (ssize_t)strlen(text));
        close(fd);
    }
}

/* DATA/instances/i-src: a 21 MiB + 5 bytes data disk with data in blocks
 * 0 and 3 and in its last bytes, and a 1 GiB system disk (ext4) holding
 * upper/etc/ssh with host keys and a file of the renter's. */
static bool make_source(void)
{
    cleanup_free char *dir = xasprintf("%s/src/instances/i-src", root);
    cleanup_free char *data = path_of("src", "i-src", "data.img");
    cleanup_free char *system = path_of("src", "i-src", "system.img");
    cleanup_free char *mnt = xasprintf("%s/mnt", root);
    struct sl_error err = SL_ERROR_INIT;

    if (!CHECK(fs_mkdir_p(dir, 0700, &err) == 0))
        return false;
    int fd = open(data, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (!CHECK(fd >= 0) || !CHECK(ftruncate(fd, (21 << 20) + 5) == 0))
        return false;
    close(fd);
    write_at(data, 0, "block zero");
    write_at(data, 3 * TRANSFER_BLOCK_SIZE + 77, "block three");
    write_at(data, (21 << 20), "tail!");
    if (!CHECK(disk_create(system, 1, &err) == 0) || !CHECK(disk_mount(system, mnt, &err) == 0))
        return false;
    cleanup_free char *ssh = xasprintf("%s/upper/etc/ssh", mnt);
    CHECK(fs_mkdir_p(ssh, 0755, &err) == 0);
    static const char *const files[] = { "ssh_host_ed25519_key", "ssh_host_ed25519_key.pub",
                                         ".suanli-host-keys", "sshd_config" };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        cleanup_free char *f = xasprintf("%s/%s", ssh, files[i]);
        CHECK(sl_file_write(f, "source's\n", 9, 0600, 0, &err) == 0);
    }
    return CHECK(disk_unmount(mnt, &err) == 0);
}

static bool same_file(const char *a, const char *b)
{
    cleanup_free char *cmd = xasprintf("cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static void export(const char *instance, const char *token)
{
    char hash[SL_HASH_HEX_MAX];
    sl_sha256_hex(token, strlen(token), hash);
    json_t *d = json_pack("{s:[{s:s, s:s}], s:[]}", "exports", "instance", instance, "token_sha256",
                          hash, "instances");
    transfer_sync(d);
    json_decref(d);
}

static int copy(const char *into, const char *token, const char *source, struct sl_error *err)
{
    volatile bool cancel = false;
    cleanup_free char *data = xasprintf("%s/dst", root);
    return transfer_copy(data, into, url, token, source, 1, &cancel, NULL, NULL, err);
}

static void setup(void)
{
    char tmpl[] = "/var/tmp/test-transfer-XXXXXX";
    root = xstrdup(mkdtemp(tmpl));
    cleanup_free char *src = xasprintf("%s/src", root);
    port = free_port();
    snprintf(url, sizeof(url), "http://127.0.0.1:%u", port);
    transfer_server_start(src, "127.0.0.1", port);
}

static void teardown(void)
{
    cleanup_free char *cmd = xasprintf("rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    free(root);
}

static void a_copy_is_exact_sparse_and_without_the_source_host_keys_body(void)
{
    struct sl_error err = SL_ERROR_INIT;

    if (!CHECK(port > 0 && transfer_server_port() == port) || !make_source())
        return;
    export("i-src", TOKEN);
    if (!CHECK(copy("i-new", TOKEN, "i-src", &err) == 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    cleanup_free char *a = path_of("src", "i-src", "data.img");
    cleanup_free char *b = path_of("dst", "i-new", "data.img");
    CHECK(same_file(a, b));
    struct stat st;
    /* sparse: three blocks of data, not 21 MiB */
    if (CHECK(stat(b, &st) == 0))
        CHECK(st.st_blocks * 512 <= 3 * TRANSFER_BLOCK_SIZE);
    cleanup_free char *part = path_of("dst", "i-new", "data.img.part");
    cleanup_free char *progress = path_of("dst", "i-new", "data.img.progress");
    CHECK(access(part, F_OK) < 0 && access(progress, F_OK) < 0);
    /* the system disk: the renter's files, not the host keys */
    cleanup_free char *system = path_of("dst", "i-new", "system.img");
    cleanup_free char *mnt = xasprintf("%s/mnt", root);
    if (CHECK(disk_mount(system, mnt, &err) == 0)) {
        cleanup_free char *keep = xasprintf("%s/upper/etc/ssh/sshd_config", mnt);
        cleanup_free char *key = xasprintf("%s/upper/etc/ssh/ssh_host_ed25519_key", mnt);
        cleanup_free char *pub = xasprintf("%s/upper/etc/ssh/ssh_host_ed25519_key.pub", mnt);
        cleanup_free char *mark = xasprintf("%s/upper/etc/ssh/.suanli-host-keys", mnt);
        CHECK(access(keep, F_OK) == 0);
        CHECK(access(key, F_OK) < 0 && access(pub, F_OK) < 0 && access(mark, F_OK) < 0);
        CHECK(disk_unmount(mnt, &err) == 0);
    }
}

static void a_copy_resumes_from_its_recorded_block_body(void)
{
    struct sl_error err = SL_ERROR_INIT;

    if (!make_source())
        return;
    export("i-src", TOKEN);
    cleanup_free char *dir = xasprintf("%s/dst/instances/i-res", root);
    cleanup_free char *part = path_of("dst", "i-res", "data.img.part");
    cleanup_free char *progress = path_of("dst", "i-res", "data.img.progress");
    CHECK(fs_mkdir_p(dir, 0700, &err) == 0);
    /* blocks 0..3 recorded; block 4 holds what a killed copy left */
    int fd = open(part, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, (21 << 20) + 5) == 0);
    close(fd);
    write_at(part, 0, "block zero");
    write_at(part, 3 * TRANSFER_BLOCK_SIZE + 77, "block three");
    write_at(part, 4 * TRANSFER_BLOCK_SIZE + 1, "stale bytes of an unrecorded block");
    char text[64];
    snprintf(text, sizeof(text), "%d 4\n", (21 << 20) + 5);
    CHECK(sl_file_write(progress, text, strlen(text), 0600, 0, &err) == 0);
    if (!CHECK(copy("i-res", TOKEN, "i-src", &err) == 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    cleanup_free char *a = path_of("src", "i-src", "data.img");
    cleanup_free char *b = path_of("dst", "i-res", "data.img");
    CHECK(same_file(a, b));
}

static void nothing_is_served_without_the_export_token_body(void)
{
    struct sl_error err = SL_ERROR_INIT;

    if (!make_source())
        return;
    /* a link to a file of the host, and a link for a whole instance */
    cleanup_free char *evil = xasprintf("%s/src/instances/i-evil", root);
    cleanup_free char *evil_disk = path_of("src", "i-evil", "data.img");
    cleanup_free char *linked = xasprintf("%s/src/instances/i-linked", root);
    cleanup_free char *real = xasprintf("%s/src/instances/i-src", root);
    CHECK(fs_mkdir_p(evil, 0700, &err) == 0);
    CHECK(symlink("/etc/shadow", evil_disk) == 0);
    CHECK(symlink(real, linked) == 0);

    export("i-src", TOKEN);
    CHECK(copy("i-a", "sl_wrong", "i-src", &err) < 0);
    CHECK_STR(err.code, "copy_refused");
    CHECK(copy("i-b", "", "i-src", &err) < 0);
    CHECK_STR(err.code, "copy_refused");
    /* this export's token opens no other instance */
    CHECK(copy("i-c", TOKEN, "i-other", &err) < 0);
    CHECK_STR(err.code, "copy_refused");
    export("i-evil", TOKEN);
    CHECK(copy("i-d", TOKEN, "i-evil", &err) < 0);
    export("i-linked", TOKEN);
    CHECK(copy("i-e", TOKEN, "i-linked", &err) < 0);
    /* withdrawn: the token opens nothing */
    json_t *none = json_pack("{s:[], s:[]}", "exports", "instances");
    transfer_sync(none);
    json_decref(none);
    CHECK(copy("i-f", TOKEN, "i-src", &err) < 0);
    CHECK_STR(err.code, "copy_refused");
    /* nothing half-made is left of the refused copies */
    static const char *const ids[] = { "i-a", "i-b", "i-c", "i-d", "i-e", "i-f" };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        cleanup_free char *p = path_of("dst", ids[i], "system.img");
        CHECK(access(p, F_OK) < 0);
    }
}

TEST(a_copy_is_exact_sparse_and_without_the_source_host_keys)
{
    setup();
    a_copy_is_exact_sparse_and_without_the_source_host_keys_body();
    transfer_server_stop();
    teardown();
}

TEST(a_copy_resumes_from_its_recorded_block)
{
    setup();
    a_copy_resumes_from_its_recorded_block_body();
    transfer_server_stop();
    teardown();
}

TEST(nothing_is_served_without_the_export_token)
{
    setup();
    nothing_is_served_without_the_export_token_body();
    transfer_server_stop();
    teardown();
}
