/* node/image-import.c and node/image-layer.c: every image format built here
 * with libarchive's writer (no downloaded fixtures), whiteouts checked
 * through a real overlay mount (the tests run as root), archives that try to
 * write outside their layer, damaged files, and what is read from an image's
 * files (CUDA, frameworks). Hostile archives are built at run time too:
 * compression bombs (bytes, entries, a sparse file's map), device nodes,
 * entries placed to be written through, lying sizes; each is refused or
 * neutralised, and nothing of it is left. */
#include "harness.h"

#include "../../node/fsutil.h"
#include "../../node/image-import.h"
#include "../../node/image-layer.h"
#include "../../node/image.h"
#include "../../node/rootfs.h"
#include "../../lib/cleanup.h"
#include "../../lib/file.h"
#include "../../lib/json.h"
#include "../../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <lzma.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

/* An archive entry: 'f' file (body), 'd' directory, 'l' symlink (body is the
 * target), 'h' hard link (body is the target), 'c' character device 1:3,
 * 'w' character device 10:130 (a watchdog: opening it arms it), 'z' the
 * character device 0:0 (an overlay whiteout), 'b' block device 8:0, 'p'
 * fifo, 's' socket. */
struct ent {
    char type;
    const char *path;
    const char *body;
    size_t len; /* 0: strlen(body) */
    unsigned mode;
};

#define MTIME 1700000000

static const char *write_archive(const char *name, int filter, const struct ent *ents, size_t n)
{
    const char *path = test_path(name);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (filter != ARCHIVE_FILTER_NONE)
        archive_write_add_filter(a, filter);
    archive_write_open_filename(a, path);
    for (size_t i = 0; i < n; i++) {
        const struct ent *x = &ents[i];
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, x->path);
        archive_entry_set_mtime(e, MTIME, 0);
        archive_entry_set_uid(e, 1234);
        archive_entry_set_gid(e, 5678);
        size_t len = x->type == 'f' ? (x->len ? x->len : strlen(x->body)) : 0;
        switch (x->type) {
        case 'f':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_size(e, (la_int64_t)len);
            break;
        case 'd':
            archive_entry_set_filetype(e, AE_IFDIR);
            break;
        case 'l':
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_symlink(e, x->body);
            break;
        case 'h':
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_hardlink(e, x->body);
            break;
        case 'c':
        case 'w':
        case 'z':
            archive_entry_set_filetype(e, AE_IFCHR);
            archive_entry_set_rdev(e, x->type == 'c'   ? makedev(1, 3)
                                      : x->type == 'w' ? makedev(10, 130)
                                                       : makedev(0, 0));
            break;
        case 'b':
            archive_entry_set_filetype(e, AE_IFBLK);
            archive_entry_set_rdev(e, makedev(8, 0));
            break;
        case 'p':
            archive_entry_set_filetype(e, AE_IFIFO);
            break;
        case 's':
            archive_entry_set_filetype(e, AE_IFSOCK);
            break;
        }
        archive_entry_set_perm(e, x->mode ? x->mode : x->type == 'd' ? 0755 : 0644);
        archive_write_header(a, e);
        if (len)
            archive_write_data(a, x->body, len);
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    return path;
}

static char *slurp(const char *path, size_t *len)
{
    struct sl_error err = SL_ERROR_INIT;
    return fs_read_file(path, 64 << 20, len, &err);
}

static void sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char bin[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(bin, data, len);
    sodium_bin2hex(hex, 65, bin, sizeof(bin));
}

static const char *data_dir(void)
{
    return test_path("data");
}

static size_t count_dir(const char *path)
{
    DIR *d = opendir(path);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static char *layer_file(const char *digest, const char *rel)
{
    return xasprintf("%s/layers/sha256/%s/rootfs/%s", data_dir(), digest, rel);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Nothing of a failed import is left: no layer, no temporary directory, no
 * image file. */
static void check_nothing_left(const char *name)
{
    cleanup_free char *layers = xasprintf("%s/layers/sha256", data_dir());
    cleanup_free char *tmp = xasprintf("%s/layers/tmp", data_dir());
    cleanup_free char *json = xasprintf("%s/images/%s.json", data_dir(), name);
    CHECK_EQ_INT(count_dir(layers), 0);
    CHECK(!exists(tmp));
    CHECK(!exists(json));
}

static const struct ent rootfs_ents[] = {
    { 'd', "./", NULL, 0, 0755 },
    { 'd', "./etc", NULL, 0, 0755 },
    { 'f', "./etc/os-release", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n", 0, 0644 },
    { 'f', "./usr/bin/sudo", "#!/bin/sh\n", 0, 04755 },
    { 'l', "./usr/bin/python3", "python3.11", 0, 0777 },
    { 'd', "./usr/lib/python3.11", NULL, 0, 0755 },
    { 'h', "./usr/bin/sudo-again", "./usr/bin/sudo", 0, 0 },
    { 'c', "./dev/null", NULL, 0, 0666 },
    { 'd', "./root", NULL, 0, 0700 },
};

TEST(rootfs_gzip_and_zstd_share_a_layer)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *plain =
        write_archive("rootfs.tar", ARCHIVE_FILTER_NONE, rootfs_ents, ARRAY_SIZE(rootfs_ents));
    const char *gz =
        write_archive("rootfs.tar.gz", ARCHIVE_FILTER_GZIP, rootfs_ents, ARRAY_SIZE(rootfs_ents));
    const char *zst =
        write_archive("rootfs.tar.zst", ARCHIVE_FILTER_ZSTD, rootfs_ents, ARRAY_SIZE(rootfs_ents));
    const char *xz =
        write_archive("rootfs.tar.xz", ARCHIVE_FILTER_XZ, rootfs_ents, ARRAY_SIZE(rootfs_ents));
    size_t len;
    cleanup_free char *tar = slurp(plain, &len);
    char want[65];
    sha256_hex(tar, len, want);

    if (!CHECK_EQ_INT(image_import(data_dir(), gz, "deb-gz", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    CHECK_EQ_INT(image_import(data_dir(), zst, "deb-zst", NULL, &err), 0);
    CHECK_EQ_INT(image_import(data_dir(), xz, "deb-xz", NULL, &err), 0);
    cleanup_free char *layers = xasprintf("%s/layers/sha256", data_dir());
    CHECK_EQ_INT(count_dir(layers), 1);

    struct image img;
    if (!CHECK_EQ_INT(image_load(data_dir(), "deb-zst", &img, &err), 0))
        return;
    CHECK_EQ_INT(img.n_layers, 1);
    CHECK_STR(img.layers[0], want);
    CHECK_EQ_INT(img.size_bytes, len);
    CHECK_STR(img.os, "Debian GNU/Linux 12 (bookworm)");
    CHECK_STR(img.python, "3.11");
    CHECK_STR(img.cuda, "");
    CHECK_STR(img.framework, "");

    struct stat st, st2;
    cleanup_free char *sudo = layer_file(want, "usr/bin/sudo");
    cleanup_free char *again = layer_file(want, "usr/bin/sudo-again");
    cleanup_free char *py = layer_file(want, "usr/bin/python3");
    cleanup_free char *null = layer_file(want, "dev/null");
    cleanup_free char *root = layer_file(want, "root");
    if (CHECK(lstat(sudo, &st) == 0 && lstat(again, &st2) == 0)) {
        CHECK_EQ_INT(st.st_mode & 07777, 04755);
        CHECK_EQ_INT(st.st_uid, 1234);
        CHECK_EQ_INT(st.st_gid, 5678);
        CHECK_EQ_INT(st.st_mtime, MTIME);
        CHECK_EQ_INT(st.st_ino, st2.st_ino);
    }
    char target[64] = "";
    CHECK(readlink(py, target, sizeof(target) - 1) > 0);
    CHECK_STR(target, "python3.11");
    CHECK(!exists(null)); /* device nodes are not extracted */
    CHECK(lstat(root, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700 &&
          st.st_mtime == MTIME);
    image_release(&img);

    /* an image saved before cuda, framework and env existed still loads */
    test_write_file("data/images/old.json",
                    "{\"name\":\"old\",\"layers\":[\"" /* */
                    "0000000000000000000000000000000000000000000000000000000000000000\"],"
                    "\"os\":\"Debian\",\"python\":\"3.11\",\"size_bytes\":5}\n");
    if (CHECK_EQ_INT(image_load(data_dir(), "old", &img, &err), 0)) {
        CHECK_STR(img.cuda, "");
        CHECK_STR(img.framework, "");
        CHECK_EQ_INT(img.n_env, 0);
        image_release(&img);
    }
}

/* A layer tar and its diff_id. */
struct blob {
    char *data;
    size_t len;
    char sha[65];
};

static void make_blob(struct blob *b, const char *name, int filter, const struct ent *ents,
                      size_t n)
{
    b->data = slurp(write_archive(name, filter, ents, n), &b->len);
    sha256_hex(b->data, b->len, b->sha);
}

static void release_blob(struct blob *b)
{
    free(b->data);
}

static const struct ent lower_ents[] = {
    { 'f', "etc/keep", "kept\n", 0, 0 },   { 'f', "etc/gone", "deleted above\n", 0, 0 },
    { 'd', "opt/d", NULL, 0, 0 },          { 'f', "opt/d/old", "hidden by opaque\n", 0, 0 },
    { 'f', "opt/other", "stays\n", 0, 0 },
};
static const struct ent upper_ents[] = {
    { 'f', "etc/.wh.gone", "", 0, 0 },
    { 'd', "opt/d", NULL, 0, 0 },
    { 'f', "opt/d/.wh..wh..opq", "", 0, 0 },
    { 'f', "opt/d/new", "new\n", 0, 0 },
};

/* docker save: <id>/layer.tar, a config, manifest.json; bad_diff_id makes the
 * config promise a digest layer 2 does not have. */
static const char *write_docker_save(const char *name, bool bad_diff_id, char lower_sha[65],
                                     char upper_sha[65])
{
    struct blob lower, upper;
    make_blob(&lower, "lower.tar", ARCHIVE_FILTER_NONE, lower_ents, ARRAY_SIZE(lower_ents));
    make_blob(&upper, "upper.tar", ARCHIVE_FILTER_NONE, upper_ents, ARRAY_SIZE(upper_ents));
    memcpy(lower_sha, lower.sha, 65);
    memcpy(upper_sha, upper.sha, 65);
    cleanup_free char *config =
        xasprintf("{\"config\":{\"Env\":[\"PATH=/usr/bin\",\"CUDA_VERSION=11.8.0\"]},"
                  "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:%s\",\"sha256:%s\"]}}",
                  lower.sha, bad_diff_id ? lower.sha : upper.sha);
    const char *manifest = "[{\"Config\":\"cfg.json\",\"RepoTags\":[\"x:latest\"],"
                           "\"Layers\":[\"l1/layer.tar\",\"l2/layer.tar\"]}]";
    struct ent outer[] = {
        { 'd', "l1", NULL, 0, 0 },         { 'f', "l1/layer.tar", lower.data, lower.len, 0 },
        { 'd', "l2", NULL, 0, 0 },         { 'f', "l2/layer.tar", upper.data, upper.len, 0 },
        { 'f', "cfg.json", config, 0, 0 }, { 'f', "manifest.json", manifest, 0, 0 },
    };
    const char *path = write_archive(name, ARCHIVE_FILTER_NONE, outer, ARRAY_SIZE(outer));
    release_blob(&lower);
    release_blob(&upper);
    return path;
}

TEST(docker_save_whiteouts_through_overlay)
{
    struct sl_error err = SL_ERROR_INIT;
    char lower[65], upper[65];
    const char *file = write_docker_save("image.tar", false, lower, upper);
    if (!CHECK_EQ_INT(image_import(data_dir(), file, "dock", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    struct image img;
    if (!CHECK_EQ_INT(image_load(data_dir(), "dock", &img, &err), 0))
        return;
    CHECK_EQ_INT(img.n_layers, 2);
    CHECK_STR(img.layers[0], upper); /* top first */
    CHECK_STR(img.layers[1], lower);
    CHECK_STR(img.cuda, "11.8.0"); /* from the config's env */
    CHECK(img.n_env == 2 && strcmp(img.env[1], "CUDA_VERSION=11.8.0") == 0);

    /* whiteouts as overlayfs wants them in a lower layer */
    cleanup_free char *wh = layer_file(upper, "etc/gone");
    cleanup_free char *opq = layer_file(upper, "opt/d");
    struct stat st;
    CHECK(lstat(wh, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
    char v[4] = "";
    CHECK_EQ_INT(getxattr(opq, "trusted.overlay.opaque", v, sizeof(v)), 1);
    CHECK(v[0] == 'y');

    cleanup_free char *l0 = image_layer_rootfs(data_dir(), img.layers[0]);
    cleanup_free char *l1 = image_layer_rootfs(data_dir(), img.layers[1]);
    const char *lowers[] = { l0, l1 };
    const char *target = test_path("merged");
    if (CHECK_EQ_INT(rootfs_mount(lowers, 2, test_path("upper"), test_path("work"), target, &err),
                     0)) {
        cleanup_free char *keep = xasprintf("%s/etc/keep", target);
        cleanup_free char *gone = xasprintf("%s/etc/gone", target);
        cleanup_free char *old = xasprintf("%s/opt/d/old", target);
        cleanup_free char *fresh = xasprintf("%s/opt/d/new", target);
        cleanup_free char *other = xasprintf("%s/opt/other", target);
        CHECK(exists(keep));
        CHECK(!exists(gone));
        CHECK(!exists(old));
        CHECK(exists(fresh));
        CHECK(exists(other));
        CHECK_EQ_INT(rootfs_unmount(target, &err), 0);
    } else {
        fprintf(stderr, "%s\n", err.message);
    }
    image_release(&img);

    /* a second image of the same layers shares them */
    CHECK_EQ_INT(image_import(data_dir(), file, "dock2", NULL, &err), 0);
    cleanup_free char *layers = xasprintf("%s/layers/sha256", data_dir());
    CHECK_EQ_INT(count_dir(layers), 2);
}

TEST(docker_save_with_a_wrong_layer_leaves_nothing)
{
    struct sl_error err = SL_ERROR_INIT;
    char lower[65], upper[65];
    const char *file = write_docker_save("image.tar", true, lower, upper);
    CHECK_EQ_INT(image_import(data_dir(), file, "dock", NULL, &err), -1);
    CHECK_STR(err.code, "bad_image");
    CHECK_CONTAINS(err.message, "layer 2 of 2");
    CHECK_CONTAINS(err.message, "damaged");
    check_nothing_left("dock");
}

static void write_blob(const char *dir, const char *data, size_t len, char sha[65])
{
    sha256_hex(data, len, sha);
    cleanup_free char *path = xasprintf("%s/blobs/sha256/%s", dir, sha);
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *blobs = xasprintf("%s/blobs/sha256", dir);
    fs_mkdir_p(blobs, 0755, &err);
    sl_file_write(path, data, len, 0644, 0, &err);
}

/* An OCI layout in dir: a zstd layer (its diff_id written to want). */
static void write_oci_layout(const char *dir, char want[65])
{
    static const struct ent ents[] = {
        { 'f', "etc/os-release", "PRETTY_NAME=\"Ubuntu 22.04.4 LTS\"\n", 0, 0 },
        { 'f', "usr/local/cuda/version.json",
          "{\"cuda\":{\"name\":\"CUDA SDK\",\"version\":\"12.4.1\"}}", 0, 0 },
    };
    struct blob plain, zst;
    make_blob(&plain, "oci-layer.tar", ARCHIVE_FILTER_NONE, ents, ARRAY_SIZE(ents));
    make_blob(&zst, "oci-layer.tar.zst", ARCHIVE_FILTER_ZSTD, ents, ARRAY_SIZE(ents));
    memcpy(want, plain.sha, 65);
    char layer[65], config[65], manifest[65];
    write_blob(dir, zst.data, zst.len, layer);
    cleanup_free char *cfg = xasprintf("{\"architecture\":\"amd64\",\"os\":\"linux\","
                                       "\"config\":{\"Env\":[\"LANG=C.UTF-8\"]},"
                                       "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":"
                                       "[\"sha256:%s\"]}}",
                                       plain.sha);
    write_blob(dir, cfg, strlen(cfg), config);
    cleanup_free char *man = xasprintf(
        "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
        "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
        "\"digest\":\"sha256:%s\",\"size\":%zu},"
        "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+zstd\","
        "\"digest\":\"sha256:%s\",\"size\":%zu}]}",
        config, strlen(cfg), layer, zst.len);
    write_blob(dir, man, strlen(man), manifest);
    cleanup_free char *index = xasprintf(
        "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":"
        "\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:%s\",\"size\":%zu,"
        "\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"}}]}",
        manifest, strlen(man));
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *index_path = xasprintf("%s/index.json", dir);
    cleanup_free char *layout_path = xasprintf("%s/oci-layout", dir);
    sl_file_write(index_path, index, strlen(index), 0644, 0, &err);
    const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
    sl_file_write(layout_path, layout, strlen(layout), 0644, 0, &err);
    release_blob(&plain);
    release_blob(&zst);
}

TEST(oci_layout_directory_and_tar)
{
    struct sl_error err = SL_ERROR_INIT;
    char want[65];
    const char *dir = test_path("layout");
    write_oci_layout(dir, want);
    if (!CHECK_EQ_INT(image_import(data_dir(), dir, "ubuntu-cuda", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    struct image img;
    if (CHECK_EQ_INT(image_load(data_dir(), "ubuntu-cuda", &img, &err), 0)) {
        CHECK_EQ_INT(img.n_layers, 1);
        CHECK_STR(img.layers[0], want);
        CHECK_STR(img.os, "Ubuntu 22.04.4 LTS");
        CHECK_STR(img.cuda, "12.4.1");
        image_release(&img);
    }

    /* the same layout as a tar: read from its files, not the directory */
    cleanup_free char *cmd = xasprintf("tar -C '%s' -cf '%s' .", dir, test_path("layout.tar"));
    CHECK_EQ_INT(system(cmd), 0);
    struct sl_error e2 = SL_ERROR_INIT;
    cleanup_free char *rm = xasprintf("rm -rf '%s'", dir);
    CHECK_EQ_INT(system(rm), 0);
    if (!CHECK_EQ_INT(image_import(data_dir(), test_path("layout.tar"), "ubuntu-tar", NULL, &e2),
                      0))
        fprintf(stderr, "%s\n", e2.message);
    cleanup_free char *layers = xasprintf("%s/layers/sha256", data_dir());
    cleanup_free char *tmp = xasprintf("%s/layers/tmp", data_dir());
    CHECK_EQ_INT(count_dir(layers), 1);
    CHECK(!exists(tmp));
}

/* Each archive tries to write outside its layer; the import fails with an
 * error naming the entry, nothing lands at the would-be target, and nothing
 * is left of the import. */
TEST(escapes_are_refused)
{
    const char *outside = test_path("outside");
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(fs_mkdir_p(outside, 0755, &err), 0);
    cleanup_free char *abs_target = xasprintf("%s/abs-evil", outside);
    cleanup_free char *link_target = xasprintf("%s/pwned", outside);
    /* enough ".." to reach "/" from any layer directory */
    cleanup_free char *dotdot =
        xasprintf("../../../../../../../../../../../../../../..%s/dotdot-evil", outside);
    cleanup_free char *dotdot_target = xasprintf("%s/dotdot-evil", outside);
    struct stat passwd_before, passwd_after;
    CHECK(stat("/etc/passwd", &passwd_before) == 0);

    const struct {
        const char *name, *expect;
        struct ent ents[4];
        size_t n;
    } cases[] = {
        { "dotdot", "'..' component", { { 'f', dotdot, "x", 0, 0 } }, 1 },
        { "absolute", "absolute path", { { 'f', abs_target, "x", 0, 0 } }, 1 },
        { "symlink",
          "symlink or not a directory",
          { { 'l', "link", outside, 0, 0 }, { 'f', "link/pwned", "x", 0, 0 } },
          2 },
        { "hardlink", "absolute path", { { 'h', "passwd", "/etc/passwd", 0, 0 } }, 1 },
        { "hardlink-dotdot",
          "'..' component",
          { { 'h', "passwd", "../../../../../../../../../etc/passwd", 0, 0 } },
          1 },
        { "chain",
          "symlink or not a directory",
          { { 'l', "a", "b", 0, 0 }, { 'l', "b", outside, 0, 0 }, { 'f', "a/pwned", "x", 0, 0 } },
          3 },
        { "hardlink-through-symlink",
          "symlink or not a directory",
          { { 'l', "etc", "/etc", 0, 0 }, { 'h', "passwd", "etc/passwd", 0, 0 } },
          2 },
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        cleanup_free char *tar_name = xasprintf("%s.tar", cases[i].name);
        const char *tar = write_archive(tar_name, ARCHIVE_FILTER_NONE, cases[i].ents, cases[i].n);
        struct sl_error e = SL_ERROR_INIT;
        if (!CHECK_EQ_INT(image_import(data_dir(), tar, "evil", NULL, &e), -1))
            fprintf(stderr, "case %s was imported\n", cases[i].name);
        CHECK_STR(e.code, "bad_image");
        CHECK_CONTAINS(e.message, cases[i].expect);
        CHECK_CONTAINS(e.message, tar);
        CHECK(!exists(abs_target));
        CHECK(!exists(link_target));
        CHECK(!exists(dotdot_target));
        check_nothing_left("evil");
    }
    CHECK(stat("/etc/passwd", &passwd_after) == 0);
    CHECK_EQ_INT(passwd_after.st_nlink, passwd_before.st_nlink);
}

TEST(damaged_files_leave_nothing)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *gz =
        write_archive("rootfs.tar.gz", ARCHIVE_FILTER_GZIP, rootfs_ents, ARRAY_SIZE(rootfs_ents));
    size_t len;
    cleanup_free char *data = slurp(gz, &len);
    const char *cut = test_path("cut.tar.gz");
    sl_file_write(cut, data, len / 2, 0644, 0, &err);
    CHECK_EQ_INT(image_import(data_dir(), cut, "cut", NULL, &err), -1);
    CHECK_STR(err.code, "bad_image");
    CHECK_CONTAINS(err.message, cut);
    CHECK_CONTAINS(err.message, "retry");
    check_nothing_left("cut");

    /* a tar damaged after its first entry: extraction has begun when the
     * damage is found */
    static const struct ent ents[] = {
        { 'f', "first", "1", 0, 0 },
        { 'f', "second", "2", 0, 0 },
        { 'f', "third", "3", 0, 0 },
    };
    const char *plain = write_archive("plain.tar", ARCHIVE_FILTER_NONE, ents, ARRAY_SIZE(ents));
    cleanup_free char *tar = slurp(plain, &len);
    /* pax_restricted: first's header at 0, data at 512; second's header at
     * 1024: spoil its checksum */
    memset(tar + 1024 + 148, 'z', 8);
    const char *bad = test_path("bad.tar");
    sl_file_write(bad, tar, len, 0644, 0, &err);
    sl_error_clear(&err);
    CHECK_EQ_INT(image_import(data_dir(), bad, "bad", NULL, &err), -1);
    CHECK_STR(err.code, "bad_image");
    CHECK_CONTAINS(err.message, bad);
    check_nothing_left("bad");

    CHECK_EQ_INT(
        image_import(data_dir(), test_write_file("junk", "not an archive"), "junk", NULL, &err),
        -1);
    CHECK_STR(err.code, "bad_image");
    check_nothing_left("junk");
}

TEST(metadata_from_planted_files)
{
    struct sl_error err = SL_ERROR_INIT;
    static const struct ent ents[] = {
        { 'f', "usr/lib/os-release", "PRETTY_NAME='Ubuntu 20.04.6 LTS'\n", 0, 0 },
        { 'l', "etc/os-release", "/usr/lib/os-release", 0, 0 },
        { 'l', "usr/bin/python3", "/usr/bin/python3.10", 0, 0 },
        { 'f', "usr/local/cuda-11.0/version.txt", "CUDA Version 11.0.228\n", 0, 0 },
        { 'l', "usr/local/cuda", "/usr/local/cuda-11.0", 0, 0 },
        { 'f', "usr/local/lib/python3.10/dist-packages/torch/version.py",
          "from typing import Optional\n__version__ = '2.1.0+cu118'\ndebug = False\n", 0, 0 },
        { 'd', "usr/local/lib/python3.10/dist-packages/tensorflow-2.15.0.dist-info", NULL, 0, 0 },
        { 'f', "usr/lib/python3/dist-packages/paddle/version/__init__.py",
          "full_version    = '2.6.0'\nmajor = '2'\n", 0, 0 },
        /* a symlink out of the image must not be read from the host */
        { 'l', "opt/conda", "/", 0, 0 },
    };
    const char *tar = write_archive("meta.tar.gz", ARCHIVE_FILTER_GZIP, ents, ARRAY_SIZE(ents));
    if (!CHECK_EQ_INT(image_import(data_dir(), tar, "meta", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    struct image img;
    if (!CHECK_EQ_INT(image_load(data_dir(), "meta", &img, &err), 0))
        return;
    CHECK_STR(img.os, "Ubuntu 20.04.6 LTS");
    CHECK_STR(img.python, "3.10");
    CHECK_STR(img.cuda, "11.0.228");
    CHECK_STR(img.framework, "torch 2.1.0+cu118, tensorflow 2.15.0, paddle 2.6.0");
    image_release(&img);
}

TEST(bad_names_and_formats)
{
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(image_import(data_dir(), "/nonexistent", "Bad/Name", NULL, &err), -1);
    CHECK_STR(err.code, "invalid_image_name");
    sl_error_clear(&err);
    const char *dir = test_path("empty-dir");
    CHECK_EQ_INT(fs_mkdir_p(dir, 0755, &err), 0);
    CHECK_EQ_INT(image_import(data_dir(), dir, "x", NULL, &err), -1);
    CHECK_STR(err.code, "unknown_format");
}

/* ---- hostile archives ------------------------------------------------- */

static struct image_limits small_limits(void)
{
    struct image_limits l = image_limits_default;
    l.max_bytes = 8 << 20;
    l.min_free_bytes = 0;
    return l;
}

static void check_limit_error(const struct sl_error *err, const char *option)
{
    CHECK_STR(err->code, "image_limit");
    CHECK_CONTAINS(err->message, option);
    if (strcmp(option, "images.min_free_bytes") != 0)
        CHECK_CONTAINS(err->message, "raise");
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* A tar with one file of `size` zero bytes, written block by block (the
 * test never holds it whole), compressed with `filter`. */
static const char *write_zero_bomb(const char *name, int filter, uint64_t size)
{
    const char *path = test_path(name);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_add_filter(a, filter);
    archive_write_open_filename(a, path);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "zero");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)size);
    archive_write_header(a, e);
    static const char zeros[1 << 16];
    for (uint64_t done = 0; done < size; done += sizeof(zeros))
        archive_write_data(a, zeros, sizeof(zeros));
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
    return path;
}

TEST(compression_bomb_by_bytes_is_refused)
{
    static const struct {
        const char *name;
        int filter;
    } bombs[] = {
        { "bomb.tar.gz", ARCHIVE_FILTER_GZIP },
        { "bomb.tar.zst", ARCHIVE_FILTER_ZSTD },
        { "bomb.tar.xz", ARCHIVE_FILTER_XZ },
    };
    struct image_limits lim = small_limits();
    for (size_t i = 0; i < ARRAY_SIZE(bombs); i++) {
        /* 64 MiB of zeros in a few KiB; the limit is 8 MiB */
        const char *bomb = write_zero_bomb(bombs[i].name, bombs[i].filter, 64 << 20);
        CHECK(file_size(bomb) < (1 << 20));
        struct sl_error err = SL_ERROR_INIT;
        if (!CHECK_EQ_INT(image_import(data_dir(), bomb, "bomb", &lim, &err), -1))
            continue;
        check_limit_error(&err, "images.max_bytes");
        CHECK_CONTAINS(err.message, "8.0 MiB");
        check_nothing_left("bomb");
    }
    /* the same file within the limit is an image */
    lim.max_bytes = 128 << 20;
    struct sl_error err = SL_ERROR_INIT;
    const char *gz = test_path("bomb.tar.gz");
    if (!CHECK_EQ_INT(image_import(data_dir(), gz, "big", &lim, &err), 0))
        fprintf(stderr, "%s\n", err.message);
}

/* Raw bytes, compressed by libarchive's writer with no archive format of
 * its own around them: for archives whose headers the test writes itself. */
struct raw_writer {
    struct archive *a;
    struct archive_entry *e;
};

static const char *raw_open(struct raw_writer *w, const char *name, int filter)
{
    const char *path = test_path(name);
    w->a = archive_write_new();
    archive_write_set_format_raw(w->a);
    if (filter != ARCHIVE_FILTER_NONE)
        archive_write_add_filter(w->a, filter);
    archive_write_set_bytes_in_last_block(w->a, 1);
    archive_write_open_filename(w->a, path);
    w->e = archive_entry_new();
    archive_entry_set_pathname(w->e, "raw");
    archive_entry_set_filetype(w->e, AE_IFREG);
    archive_write_header(w->a, w->e);
    return path;
}

static void raw_write(struct raw_writer *w, const void *data, size_t len)
{
    archive_write_data(w->a, data, len);
}

static void raw_close(struct raw_writer *w)
{
    archive_entry_free(w->e);
    archive_write_close(w->a);
    archive_write_free(w->a);
}

/* A ustar header block. */
static void tar_header(struct raw_writer *w, const char *name, char type, uint64_t size)
{
    char h[512] = { 0 };
    snprintf(h, 100, "%s", name);
    snprintf(h + 100, 8, "%07o", 0644);
    snprintf(h + 108, 8, "%07o", 0);
    snprintf(h + 116, 8, "%07o", 0);
    snprintf(h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf(h + 136, 12, "%011o", MTIME);
    h[156] = type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof(h); i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    raw_write(w, h, sizeof(h));
}

static void tar_pad(struct raw_writer *w, uint64_t len)
{
    static const char zeros[512];
    if (len % 512)
        raw_write(w, zeros, 512 - len % 512);
}

/* A pax extended header ('x') with these "key=value" records. */
static void pax_header(struct raw_writer *w, const char *const *records, size_t n)
{
    char body[2048];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = strlen(records[i]) + 2; /* " " and "\n" */
        size_t digits = 1;
        while (snprintf(NULL, 0, "%zu", r + digits) > (int)digits)
            digits++;
        len += (size_t)snprintf(body + len, sizeof(body) - len, "%zu %s\n", r + digits, records[i]);
    }
    tar_header(w, "./PaxHeaders/x", 'x', len);
    raw_write(w, body, len);
    tar_pad(w, len);
}

static void tar_end(struct raw_writer *w)
{
    static const char zeros[1024];
    raw_write(w, zeros, sizeof(zeros));
}

/* A GNU sparse 1.0 file (the format GNU tar and libarchive write for sparse
 * files): its real size and one data block, as the map says. */
static const char *write_sparse(const char *name, const char *realsize, uint64_t offset, size_t len)
{
    struct raw_writer w;
    const char *path = raw_open(&w, name, ARCHIVE_FILTER_GZIP);
    char size_rec[64];
    snprintf(size_rec, sizeof(size_rec), "GNU.sparse.realsize=%s", realsize);
    const char *recs[] = { "GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=sparse",
                           size_rec };
    pax_header(&w, recs, ARRAY_SIZE(recs));
    char map[512] = { 0 };
    snprintf(map, sizeof(map), "1\n%llu\n%zu\n", (unsigned long long)offset, len);
    tar_header(&w, "./GNUSparseFile.0/sparse", '0', sizeof(map) + len);
    raw_write(&w, map, sizeof(map));
    char *data = xmalloc(len);
    memset(data, 'A', len);
    raw_write(&w, data, len);
    free(data);
    tar_pad(&w, len);
    tar_end(&w);
    raw_close(&w);
    return path;
}

TEST(lying_sizes_are_refused)
{
    struct image_limits lim = small_limits();
    lim.max_file_bytes = 1 << 20;

    /* the header says 1 KiB; the sparse map puts a block at 2 GiB */
    const char *liar = write_sparse("liar.tar.gz", "1024", 2ULL << 30, 512);
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), liar, "liar", &lim, &err), -1)) {
        check_limit_error(&err, "images.max_file_bytes");
        CHECK_CONTAINS(err.message, "grows past");
    }
    check_nothing_left("liar");

    /* a sparse file claiming a terabyte of holes, with the default limits */
    const char *tera = write_sparse("tera.tar.gz", "1099511627776", 0, 512);
    sl_error_clear(&err);
    if (CHECK_EQ_INT(image_import(data_dir(), tera, "tera", NULL, &err), -1)) {
        check_limit_error(&err, "images.max_file_bytes");
        CHECK_CONTAINS(err.message, "1.0 TiB");
    }
    check_nothing_left("tera");

    /* a plain file over the limit is refused from its header, before a
     * byte is written */
    const char *big = write_zero_bomb("big.tar.gz", ARCHIVE_FILTER_GZIP, 2 << 20);
    sl_error_clear(&err);
    if (CHECK_EQ_INT(image_import(data_dir(), big, "big", &lim, &err), -1))
        check_limit_error(&err, "images.max_file_bytes");
    check_nothing_left("big");

    /* within the limit, a sparse file keeps its holes */
    const char *fine = write_sparse("fine.tar.gz", "65536", 4096, 512);
    sl_error_clear(&err);
    if (!CHECK_EQ_INT(image_import(data_dir(), fine, "fine", &lim, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    struct image img;
    if (CHECK_EQ_INT(image_load(data_dir(), "fine", &img, &err), 0)) {
        cleanup_free char *f = layer_file(img.layers[0], "sparse");
        struct stat st;
        CHECK(stat(f, &st) == 0 && st.st_size == 65536 && st.st_blocks * 512 < 65536);
        image_release(&img);
    }
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A sparse file's map of 20 million empty blocks: 80 MB of text, 80 KB
 * gzip'd, which libarchive would keep as 20 million list nodes (~1 GB). The
 * entry's headers are bounded instead, so memory stays small. */
TEST(sparse_map_bomb_keeps_memory_bounded)
{
    struct raw_writer w;
    const char *path = raw_open(&w, "map-bomb.tar.gz", ARCHIVE_FILTER_GZIP);
    const char *recs[] = { "GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=f",
                           "GNU.sparse.realsize=0" };
    pax_header(&w, recs, ARRAY_SIZE(recs));
    const uint64_t n = 20000000;
    char head[32];
    int head_len = snprintf(head, sizeof(head), "%llu\n", (unsigned long long)n);
    uint64_t map_len = (uint64_t)head_len + 4 * n;
    map_len += (512 - map_len % 512) % 512;
    tar_header(&w, "./GNUSparseFile.0/f", '0', map_len);
    raw_write(&w, head, (size_t)head_len);
    static char chunk[1 << 16];
    for (size_t i = 0; i < sizeof(chunk); i += 4)
        memcpy(chunk + i, "0\n0\n", 4);
    uint64_t left = 4 * n;
    while (left > 0) {
        size_t len = left < sizeof(chunk) ? (size_t)left : sizeof(chunk);
        raw_write(&w, chunk, len);
        left -= len;
    }
    tar_pad(&w, (uint64_t)head_len + 4 * n);
    tar_end(&w);
    raw_close(&w);
    CHECK(file_size(path) < (1 << 20));

    long before = max_rss_kib();
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), path, "map", NULL, &err), -1)) {
        CHECK_STR(err.code, "image_limit");
        CHECK_CONTAINS(err.message, "headers");
    }
    long grew_mib = (max_rss_kib() - before) / 1024;
#if defined(__SANITIZE_ADDRESS__)
    const long bound_mib = 700; /* ASan's redzones and quarantine */
#else
    const long bound_mib = 160;
#endif
    if (!CHECK(grew_mib < bound_mib))
        fprintf(stderr, "memory grew by %ld MiB\n", grew_mib);
    check_nothing_left("map");
}

TEST(bomb_hidden_after_the_end_is_refused)
{
    /* a valid tar of one file, its end marker, then 64 MiB of zeros in the
     * same gzip stream: the digest reads them, so the limit counts them */
    struct raw_writer w;
    const char *path = raw_open(&w, "tail.tar.gz", ARCHIVE_FILTER_GZIP);
    tar_header(&w, "hello", '0', 3);
    raw_write(&w, "hi\n", 3);
    tar_pad(&w, 3);
    static const char zeros[1 << 16];
    for (size_t i = 0; i < (64u << 20) / sizeof(zeros); i++)
        raw_write(&w, zeros, sizeof(zeros));
    raw_close(&w);
    struct image_limits lim = small_limits();
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), path, "tail", &lim, &err), -1))
        check_limit_error(&err, "images.max_bytes");
    check_nothing_left("tail");
}

TEST(entries_bomb_is_refused)
{
    /* 5000 empty files against a limit of 1000 */
    const char *path = test_path("many.tar.gz");
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_add_filter(a, ARCHIVE_FILTER_GZIP);
    archive_write_open_filename(a, path);
    for (int i = 0; i < 5000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "d%d/f%d", i % 10, i);
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, 0);
        archive_write_header(a, e);
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);

    struct image_limits lim = small_limits();
    lim.max_entries = 1000;
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), path, "many", &lim, &err), -1)) {
        check_limit_error(&err, "images.max_entries");
        CHECK_CONTAINS(err.message, "more than 1000 entries");
    }
    check_nothing_left("many");

    /* 5000 headers are 2.5 MiB: over a 1 MiB limit while a header is read */
    lim = small_limits();
    lim.max_bytes = 1 << 20;
    sl_error_clear(&err);
    if (CHECK_EQ_INT(image_import(data_dir(), path, "many", &lim, &err), -1))
        check_limit_error(&err, "images.max_bytes");
    check_nothing_left("many");
}

TEST(deep_paths_are_refused)
{
    char deep[256] = "";
    for (int i = 0; i < 20; i++)
        strcat(deep, "d/");
    strcat(deep, "f");
    const struct ent ents[] = { { 'f', deep, "x", 0, 0 } };
    const char *tar = write_archive("deep.tar", ARCHIVE_FILTER_NONE, ents, ARRAY_SIZE(ents));
    struct image_limits lim = small_limits();
    lim.max_path_depth = 16;
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), tar, "deep", &lim, &err), -1))
        check_limit_error(&err, "images.max_path_depth");
    check_nothing_left("deep");
}

TEST(too_little_free_space_is_refused)
{
    static const struct ent ents[] = { { 'f', "f", "x", 0, 0 } };
    const char *tar = write_archive("small.tar", ARCHIVE_FILTER_NONE, ents, ARRAY_SIZE(ents));
    struct image_limits lim = small_limits();
    lim.min_free_bytes = 1ULL << 60; /* no disk has that much */
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), tar, "small", &lim, &err), -1)) {
        check_limit_error(&err, "images.min_free_bytes");
        CHECK_CONTAINS(err.message, "free space on the node");
    }
    check_nothing_left("small");
}

TEST(compressed_twice_is_refused)
{
    static const struct ent ents[] = { { 'f', "f", "x", 0, 0 } };
    const char *path = test_path("twice.tar.gz.gz");
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_add_filter(a, ARCHIVE_FILTER_GZIP);
    archive_write_add_filter(a, ARCHIVE_FILTER_GZIP);
    archive_write_open_filename(a, path);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, ents[0].path);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, 1);
    archive_write_header(a, e);
    archive_write_data(a, "x", 1);
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), path, "twice", NULL, &err), -1)) {
        CHECK_STR(err.code, "bad_image");
        CHECK_CONTAINS(err.message, "compressed more than once");
    }
    check_nothing_left("twice");
}

/* Device nodes and sockets are left out (and logged); fifos and whiteouts
 * stay. */
TEST(device_nodes_are_not_extracted)
{
    static const struct ent ents[] = {
        { 'f', "etc/keep", "kept\n", 0, 0 }, { 'c', "dev/null", NULL, 0, 0666 },
        { 'b', "dev/sda", NULL, 0, 0666 },   { 'w', "etc/os-release", NULL, 0, 0666 },
        { 's', "run/sock", NULL, 0, 0666 },  { 'p', "run/fifo", NULL, 0, 0644 },
        { 'z', "etc/gone", NULL, 0, 0 },
    };
    const char *tar = write_archive("devs.tar.gz", ARCHIVE_FILTER_GZIP, ents, ARRAY_SIZE(ents));
    struct sl_error err = SL_ERROR_INIT;
    if (!CHECK_EQ_INT(image_import(data_dir(), tar, "devs", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    struct image img;
    if (!CHECK_EQ_INT(image_load(data_dir(), "devs", &img, &err), 0))
        return;
    const char *digest = img.layers[0];
    cleanup_free char *keep = layer_file(digest, "etc/keep");
    cleanup_free char *null = layer_file(digest, "dev/null");
    cleanup_free char *sda = layer_file(digest, "dev/sda");
    cleanup_free char *osr = layer_file(digest, "etc/os-release");
    cleanup_free char *sock = layer_file(digest, "run/sock");
    cleanup_free char *fifo = layer_file(digest, "run/fifo");
    cleanup_free char *gone = layer_file(digest, "etc/gone");
    struct stat st;
    CHECK(exists(keep));
    CHECK(!exists(null));
    CHECK(!exists(sda));
    CHECK(!exists(osr));
    CHECK(!exists(sock));
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(lstat(gone, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
    CHECK_STR(img.os, ""); /* its os-release was a device: not read */
    image_release(&img);
}

/* A host-side reader of an image's files checks what it opens first: a
 * fifo would block it, a device's driver would run its open. */
TEST(open_in_root_checks_types_before_opening)
{
    const char *dir = test_path("types");
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(fs_mkdir_p(dir, 0755, &err), 0);
    cleanup_close int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(mkfifoat(root, "fifo", 0644) == 0);
    CHECK(mknodat(root, "null", S_IFCHR | 0666, makedev(1, 3)) == 0);
    CHECK(mknodat(root, "wh", S_IFCHR | 0, makedev(0, 0)) == 0);
    CHECK(symlinkat("/etc/passwd", root, "link") == 0);
    int fd = image_open_in_root(root, "fifo", O_RDONLY | O_NONBLOCK);
    CHECK(fd < 0 && errno == EPERM);
    fd = image_open_in_root(root, "null", O_RDONLY | O_NONBLOCK);
    CHECK(fd < 0 && errno == EPERM);
    fd = image_open_in_root(root, "wh", O_RDONLY | O_NONBLOCK);
    CHECK(fd < 0 && errno == ENXIO); /* a whiteout: image-meta's "hidden" */
    fd = image_open_in_root(root, "link", O_RDONLY | O_NOFOLLOW);
    CHECK(fd < 0 && errno == ELOOP);
    /* the symlink resolves inside root, where there is no etc/passwd */
    fd = image_open_in_root(root, "link", O_RDONLY);
    CHECK(fd < 0 && errno == ENOENT);
    CHECK(test_write_file("types/file", "text") != NULL);
    fd = image_open_in_root(root, "file", O_RDONLY);
    char buf[8] = "";
    if (CHECK(fd >= 0)) {
        CHECK_EQ_INT(read(fd, buf, sizeof(buf) - 1), 4);
        CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
        close(fd);
    }
    fd = image_open_in_root(root, ".", O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
}

static char *read_text(const char *path)
{
    size_t len;
    return slurp(path, &len);
}

/* Entries placed so that a later one would write through them: the later
 * entry replaces the earlier object, nothing outside changes. */
TEST(nothing_is_written_through_an_earlier_entry)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *outside = test_path("outside");
    CHECK_EQ_INT(fs_mkdir_p(outside, 0755, &err), 0);
    const char *victim = test_write_file("outside/victim", "orig\n");
    CHECK(chmod(outside, 0755) == 0);
    const struct ent ents[] = {
        /* a symlink, then a file of its name */
        { 'l', "x", victim, 0, 0 },
        { 'f', "x", "new\n", 0, 0 },
        /* a hard link, then a file of its name */
        { 'f', "a", "first\n", 0, 0 },
        { 'h', "b", "a", 0, 0 },
        { 'f', "b", "second\n", 0, 0 },
        /* a fifo, then a file of its name (opening it would block) */
        { 'p', "q", NULL, 0, 0 },
        { 'f', "q", "data\n", 0, 0 },
        /* a symlink to a directory outside, then a directory of its name */
        { 'l', "d", outside, 0, 0 },
        { 'd', "d", NULL, 0, 0777 },
        { 'f', "d/inside", "in\n", 0, 0 },
    };
    const char *tar = write_archive("through.tar", ARCHIVE_FILTER_NONE, ents, ARRAY_SIZE(ents));
    if (!CHECK_EQ_INT(image_import(data_dir(), tar, "through", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    cleanup_free char *v = read_text(victim);
    CHECK_STR(v, "orig\n");
    struct stat st;
    CHECK(stat(outside, &st) == 0 && (st.st_mode & 07777) == 0755 && st.st_uid == 0);
    cleanup_free char *inside = xasprintf("%s/inside", outside);
    CHECK(!exists(inside));

    struct image img;
    if (!CHECK_EQ_INT(image_load(data_dir(), "through", &img, &err), 0))
        return;
    const char *digest = img.layers[0];
    cleanup_free char *x = layer_file(digest, "x");
    cleanup_free char *a = layer_file(digest, "a");
    cleanup_free char *b = layer_file(digest, "b");
    cleanup_free char *q = layer_file(digest, "q");
    cleanup_free char *d = layer_file(digest, "d");
    cleanup_free char *tx = read_text(x);
    cleanup_free char *ta = read_text(a);
    cleanup_free char *tb = read_text(b);
    cleanup_free char *tq = read_text(q);
    CHECK(lstat(x, &st) == 0 && S_ISREG(st.st_mode));
    CHECK_STR(tx, "new\n");
    CHECK_STR(ta, "first\n");
    CHECK_STR(tb, "second\n");
    CHECK(lstat(q, &st) == 0 && S_ISREG(st.st_mode));
    CHECK_STR(tq, "data\n");
    CHECK(lstat(d, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0777);
    image_release(&img);
}

/* docker save with two layers: limits count the whole image, and a hard link
 * reaches only the layer being built. */
static const char *write_docker_two(const char *name, const struct ent *upper, size_t n_upper,
                                    const struct ent *lower, size_t n_lower, int filter)
{
    struct blob l1, l2;
    make_blob(&l1, "l1.tar", filter, lower, n_lower);
    make_blob(&l2, "l2.tar", filter, upper, n_upper);
    const char *config = "{\"config\":{\"Env\":[]},\"rootfs\":{\"type\":\"layers\"}}";
    const char *manifest = "[{\"Config\":\"cfg.json\",\"Layers\":[\"l1.tar\",\"l2.tar\"]}]";
    struct ent outer[] = {
        { 'f', "l1.tar", l1.data, l1.len, 0 },
        { 'f', "l2.tar", l2.data, l2.len, 0 },
        { 'f', "cfg.json", config, 0, 0 },
        { 'f', "manifest.json", manifest, 0, 0 },
    };
    const char *path = write_archive(name, ARCHIVE_FILTER_NONE, outer, ARRAY_SIZE(outer));
    release_blob(&l1);
    release_blob(&l2);
    return path;
}

TEST(limits_count_the_whole_image)
{
    /* each layer holds 5 MiB, under the 8 MiB limit; together they do not */
    static char five[5 << 20];
    const struct ent lower[] = { { 'f', "one", five, sizeof(five), 0 } };
    const struct ent upper[] = { { 'f', "two", five, sizeof(five), 0 } };
    const char *file = write_docker_two("two.tar", upper, 1, lower, 1, ARCHIVE_FILTER_GZIP);
    struct image_limits lim = small_limits();
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), file, "two", &lim, &err), -1)) {
        check_limit_error(&err, "images.max_bytes");
        CHECK_CONTAINS(err.message, "layer 2 of 2");
    }
    check_nothing_left("two");
}

TEST(hard_links_stay_in_their_layer)
{
    const struct ent lower[] = { { 'f', "etc/shadow", "root:x\n", 0, 0 },
                                 { 'f', "etc/gone", "y\n", 0, 0 } };
    const struct ent to_lower[] = { { 'h', "stolen", "etc/shadow", 0, 0 } };
    const char *file = write_docker_two("lower.tar", to_lower, 1, lower, 2, ARCHIVE_FILTER_NONE);
    struct sl_error err = SL_ERROR_INIT;
    if (CHECK_EQ_INT(image_import(data_dir(), file, "hl", NULL, &err), -1)) {
        CHECK_STR(err.code, "bad_image");
        CHECK_CONTAINS(err.message, "not in this layer");
        CHECK_CONTAINS(err.message, "layer 2 of 2");
    }
    check_nothing_left("hl");

    /* a hard link to a whiteout (a device node) of its own layer */
    const struct ent to_whiteout[] = { { 'f', "etc/.wh.gone", "", 0, 0 },
                                       { 'h', "etc/dev", "etc/gone", 0, 0 } };
    file = write_docker_two("wh.tar", to_whiteout, 2, lower, 2, ARCHIVE_FILTER_NONE);
    sl_error_clear(&err);
    if (CHECK_EQ_INT(image_import(data_dir(), file, "hl", NULL, &err), -1)) {
        CHECK_STR(err.code, "bad_image");
        CHECK_CONTAINS(err.message, "not a file");
    }
    check_nothing_left("hl");
}

/* An .xz whose block header asks for a 4 GiB dictionary: libarchive's own
 * xz reader sets liblzma no memory limit and would make as much resident as
 * the stream decodes. Made with libarchive's writer, then the dictionary
 * size of the first block's LZMA2 filter is raised (the compressed data does
 * not depend on it) and the header's CRC32 computed again. */
TEST(xz_asking_for_gigabytes_is_refused)
{
    const char *path = write_zero_bomb("dict.tar.xz", ARCHIVE_FILTER_XZ, 256 << 20);
    size_t len;
    cleanup_free char *xz = slurp(path, &len);
    if (!CHECK(xz && len > 32))
        return;
    unsigned char *h = (unsigned char *)xz + 12; /* after the stream header */
    size_t hsize = ((size_t)h[0] + 1) * 4, i = 2;
    if (h[1] & 0x40) /* compressed size present */
        while (h[i++] & 0x80)
            ;
    if (h[1] & 0x80) /* uncompressed size present */
        while (h[i++] & 0x80)
            ;
    if (!CHECK(h[i] == 0x21 && h[i + 1] == 1)) /* LZMA2, one byte of properties */
        return;
    h[i + 2] = 40; /* dictionary: 4 GiB - 1 */
    uint32_t crc = lzma_crc32(h, hsize - 4, 0);
    for (int k = 0; k < 4; k++)
        h[hsize - 4 + (size_t)k] = (unsigned char)(crc >> (8 * k));
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(sl_file_write(path, xz, len, 0644, 0, &err), 0);

    long before = max_rss_kib();
    if (CHECK_EQ_INT(image_import(data_dir(), path, "dict", NULL, &err), -1)) {
        CHECK_STR(err.code, "image_limit");
        CHECK_CONTAINS(err.message, "xz stream needs 4.0 GiB");
    }
    long grew_mib = (max_rss_kib() - before) / 1024;
    if (!CHECK(grew_mib < 128))
        fprintf(stderr, "memory grew by %ld MiB\n", grew_mib);
    check_nothing_left("dict");
}
