/* node/image-capture.c and node/image-save.c: an overlay upper directory
 * written as a layer tar, read back by the image-layer extractor (whiteouts,
 * opaque directories, hard links), what never leaves the instance (device
 * nodes, fifos, host keys, authorized_keys, set-id bits), a saved image
 * stacked on its parent, and dropped once no longer wanted. Runs as root
 * (mknod, trusted.* xattrs). */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/file.h"
#include "../../lib/xalloc.h"
#include "../../node/fsutil.h"
#include "../../node/image-capture.h"
#include "../../node/image-layer.h"
#include "../../node/image-save.h"
#include "../../node/image.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

static void put(const char *root, const char *rel, const char *text, mode_t mode)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *path = xasprintf("%s/%s", root, rel);
    cleanup_free char *dir = xstrdup(path);
    *strrchr(dir, '/') = '\0';
    CHECK_EQ_INT(fs_mkdir_p(dir, 0755, &err), 0);
    CHECK_EQ_INT(sl_file_write(path, text, strlen(text), 0644, 0, &err), 0);
    CHECK_EQ_INT(chmod(path, mode), 0);
}

static char *in(const char *root, const char *rel)
{
    return xasprintf("%s/%s", root, rel);
}

static bool absent(const char *root, const char *rel)
{
    struct stat st;
    cleanup_free char *p = in(root, rel);
    return lstat(p, &st) < 0;
}

/* An upper directory as an instance leaves it, with what a renter might
 * try to pass to whoever starts the image. */
static void make_upper(const char *u)
{
    struct sl_error err = SL_ERROR_INIT;
    put(u, "root/hello.txt", "hi\n", 0644);
    put(u, "root/suid-shell", "#!/bin/sh\n", 04755 | S_ISGID);
    put(u, "root/hard1", "linked\n", 0644);
    cleanup_free char *h1 = in(u, "root/hard1"), *h2 = in(u, "root/hard2");
    CHECK_EQ_INT(link(h1, h2), 0);
    cleanup_free char *lnk = in(u, "root/shadow-link");
    CHECK_EQ_INT(symlink("/etc/shadow", lnk), 0);
    cleanup_free char *fifo = in(u, "root/fifo");
    CHECK_EQ_INT(mkfifo(fifo, 0600), 0);
    cleanup_free char *etc = in(u, "etc"), *dev = in(u, "dev");
    CHECK_EQ_INT(fs_mkdir_p(etc, 0755, &err), 0);
    CHECK_EQ_INT(fs_mkdir_p(dev, 0755, &err), 0);
    cleanup_free char *gone = in(u, "etc/motd"), *mem = in(u, "dev/mem");
    CHECK_EQ_INT(mknod(gone, S_IFCHR | 0000, makedev(0, 0)), 0); /* a whiteout */
    CHECK_EQ_INT(mknod(mem, S_IFCHR | 0666, makedev(1, 1)), 0);  /* /dev/mem */
    put(u, "opt/fresh/only.txt", "new\n", 0644);
    cleanup_free char *opq = in(u, "opt/fresh");
    CHECK_EQ_INT(setxattr(opq, "trusted.overlay.opaque", "y", 1, 0), 0);
    put(u, "etc/ssh/ssh_host_ed25519_key", "SECRET\n", 0600);
    put(u, "etc/ssh/sshd_config", "Port 22\n", 0644);
    put(u, "etc/machine-id", "0123\n", 0444);
    put(u, "root/.ssh/authorized_keys", "ssh-ed25519 AAAA saver\n", 0600);
    put(u, "home/bob/.ssh/authorized_keys2", "ssh-ed25519 AAAA saver\n", 0600);
}

TEST(capture_reads_back_through_the_layer_extractor)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *upper = test_path("upper");
    const char *data = test_path("data");
    cleanup_free char *tar = xstrdup(test_path("layer.tar"));
    char digest[IMAGE_DIGEST_HEX];
    struct image_capture_stats stats;

    make_upper(upper);
    if (!CHECK_EQ_INT(image_capture(upper, tar, digest, &stats, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    CHECK_EQ_INT(stats.stripped, 1);
    CHECK_EQ_INT(stats.skipped, 6); /* mem, fifo, host key, machine-id, 2 authorized_keys */
    struct stat st;
    CHECK(stat(tar, &st) == 0 && (uint64_t)st.st_size == stats.bytes);

    struct image_budget budget;
    struct image_layer layer;
    image_budget_init(&budget, NULL);
    cleanup_close int fd = open(tar, O_RDONLY | O_CLOEXEC);
    if (!CHECK_EQ_INT(image_layer_extract(data, fd, IMAGE_LAYER_WHITEOUTS, tar, "saved", &budget,
                                          &layer, &err),
                      0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    CHECK_STR(layer.digest, digest); /* the layer's digest is the tar's SHA-256 */
    CHECK_EQ_INT(layer.size_bytes, stats.bytes);
    cleanup_free char *r = xasprintf("%s/rootfs", layer.tmp);
    size_t len;
    cleanup_free char *hello = in(r, "root/hello.txt");
    cleanup_free char *text = fs_read_file(hello, 100, &len, &err);
    CHECK_STR(text, "hi\n");
    cleanup_free char *suid = in(r, "root/suid-shell");
    CHECK(stat(suid, &st) == 0 && (st.st_mode & 07777) == 0755);
    cleanup_free char *lnk = in(r, "root/shadow-link");
    char target[64] = "";
    CHECK(readlink(lnk, target, sizeof(target) - 1) > 0);
    CHECK_STR(target, "/etc/shadow");
    struct stat a, b;
    cleanup_free char *h1 = in(r, "root/hard1"), *h2 = in(r, "root/hard2");
    CHECK(stat(h1, &a) == 0 && stat(h2, &b) == 0 && a.st_ino == b.st_ino);
    cleanup_free char *gone = in(r, "etc/motd");
    CHECK(lstat(gone, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
    cleanup_free char *opq = in(r, "opt/fresh");
    char v[4] = "";
    CHECK_EQ_INT(getxattr(opq, "trusted.overlay.opaque", v, sizeof(v)), 1);
    CHECK(v[0] == 'y');
    CHECK(!absent(r, "opt/fresh/only.txt"));
    CHECK(!absent(r, "etc/ssh/sshd_config"));
    CHECK(absent(r, "dev/mem"));
    CHECK(absent(r, "root/fifo"));
    CHECK(absent(r, "etc/ssh/ssh_host_ed25519_key"));
    CHECK(absent(r, "etc/machine-id"));
    CHECK(absent(r, "root/.ssh/authorized_keys"));
    CHECK(absent(r, "home/bob/.ssh/authorized_keys2"));
    image_layer_discard(data, &layer);
}

TEST(capture_refuses_a_redirected_directory)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *upper = test_path("upper");
    char digest[IMAGE_DIGEST_HEX];
    struct image_capture_stats stats;

    put(upper, "srv/moved/x", "x", 0644);
    cleanup_free char *dir = in(upper, "srv/moved");
    CHECK_EQ_INT(setxattr(dir, "trusted.overlay.redirect", "/old", 4, 0), 0);
    cleanup_free char *tar = xstrdup(test_path("layer.tar"));
    CHECK_EQ_INT(image_capture(upper, tar, digest, &stats, &err), -1);
    CHECK_STR(err.code, "capture_unsupported");
    CHECK(access(tar, F_OK) < 0); /* nothing half-written left */
}

/* A parent image of one layer, made from a captured directory. */
static void make_parent(const char *data, char base[IMAGE_DIGEST_HEX])
{
    struct sl_error err = SL_ERROR_INIT;
    const char *dir = test_path("base");
    cleanup_free char *tar = xstrdup(test_path("base.tar"));
    struct image_capture_stats stats;

    put(dir, "etc/motd", "welcome\n", 0644);
    put(dir, "bin/true", "", 0755);
    CHECK_EQ_INT(image_capture(dir, tar, base, &stats, &err), 0);
    CHECK_EQ_INT(image_layer_import(data, tar, base, &err), 0);
    const char *layers[] = { base };
    CHECK_EQ_INT(image_save(data, "debian-12", layers, 1, &err), 0);
}

static bool keep_none(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return false;
}

TEST(a_saved_image_stacks_on_its_parent_and_goes_when_unwanted)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *data = test_path("data");
    const char *upper = test_path("upper");
    cleanup_free char *tar = xstrdup(test_path("layer.tar"));
    char base[IMAGE_DIGEST_HEX], digest[IMAGE_DIGEST_HEX];
    struct image_capture_stats stats;

    make_parent(data, base);
    put(upper, "root/work.py", "print(1)\n", 0644);
    CHECK_EQ_INT(image_capture(upper, tar, digest, &stats, &err), 0);
    /* a layer that is not what suanlid said is refused */
    char wrong[IMAGE_DIGEST_HEX];
    memset(wrong, 'a', 64);
    wrong[64] = '\0';
    CHECK_EQ_INT(image_save_stack(data, "mine", tar, wrong, "debian-12", NULL, &err), -1);
    CHECK_STR(err.code, "bad_digest");
    CHECK(!image_layer_present(data, wrong) && !image_layer_present(data, digest));
    sl_error_clear(&err);
    /* a parent this host lacks */
    CHECK_EQ_INT(image_save_stack(data, "mine", tar, digest, "nope", NULL, &err), -1);
    sl_error_clear(&err);
    if (!CHECK_EQ_INT(image_save_stack(data, "mine", tar, digest, "debian-12", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    struct image img;
    CHECK_EQ_INT(image_load(data, "mine", &img, &err), 0);
    CHECK_EQ_INT(img.n_layers, 2);
    if (img.n_layers == 2) {
        CHECK_STR(img.layers[0], digest);
        CHECK_STR(img.layers[1], base);
    }
    image_release(&img);
    CHECK(!image_saved_other(data, "mine", digest));
    CHECK(image_saved_other(data, "mine", wrong));
    CHECK(!image_saved_other(data, "debian-12", NULL)); /* not a saved image */
    /* gone from the desired state: the image and its own layer go, the
     * parent stays */
    image_saved_gc(data, keep_none, NULL);
    CHECK_EQ_INT(image_load(data, "mine", &img, &err), -1);
    sl_error_clear(&err);
    CHECK(!image_layer_present(data, digest));
    CHECK_EQ_INT(image_load(data, "debian-12", &img, &err), 0);
    image_release(&img);
    CHECK(image_layer_present(data, base));
}
