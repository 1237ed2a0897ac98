/* node/image-import.c and node/image-layer.c: every image format built here
 * with libarchive's writer (no downloaded fixtures), whiteouts checked
 * through a real overlay mount (the tests run as root), archives that try to
 * write outside their layer, damaged files, and what is read from an image's
 * files (CUDA, frameworks). */
#include "harness.h"

#include "../../node/fsutil.h"
#include "../../node/image-import.h"
#include "../../node/image.h"
#include "../../node/rootfs.h"
#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

/* An archive entry: 'f' file (body), 'd' directory, 'l' symlink (body is the
 * target), 'h' hard link (body is the target), 'c' character device. */
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
            archive_entry_set_filetype(e, AE_IFCHR);
            archive_entry_set_rdev(e, makedev(1, 3));
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

    if (!CHECK_EQ_INT(image_import(data_dir(), gz, "deb-gz", &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    CHECK_EQ_INT(image_import(data_dir(), zst, "deb-zst", &err), 0);
    CHECK_EQ_INT(image_import(data_dir(), xz, "deb-xz", &err), 0);
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
    CHECK(lstat(null, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
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
    if (!CHECK_EQ_INT(image_import(data_dir(), file, "dock", &err), 0)) {
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
    CHECK_EQ_INT(image_import(data_dir(), file, "dock2", &err), 0);
    cleanup_free char *layers = xasprintf("%s/layers/sha256", data_dir());
    CHECK_EQ_INT(count_dir(layers), 2);
}

TEST(docker_save_with_a_wrong_layer_leaves_nothing)
{
    struct sl_error err = SL_ERROR_INIT;
    char lower[65], upper[65];
    const char *file = write_docker_save("image.tar", true, lower, upper);
    CHECK_EQ_INT(image_import(data_dir(), file, "dock", &err), -1);
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
    fs_write_file(path, data, len, 0644, &err);
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
    fs_write_file(index_path, index, strlen(index), 0644, &err);
    const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
    fs_write_file(layout_path, layout, strlen(layout), 0644, &err);
    release_blob(&plain);
    release_blob(&zst);
}

TEST(oci_layout_directory_and_tar)
{
    struct sl_error err = SL_ERROR_INIT;
    char want[65];
    const char *dir = test_path("layout");
    write_oci_layout(dir, want);
    if (!CHECK_EQ_INT(image_import(data_dir(), dir, "ubuntu-cuda", &err), 0)) {
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
    if (!CHECK_EQ_INT(image_import(data_dir(), test_path("layout.tar"), "ubuntu-tar", &e2), 0))
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
        if (!CHECK_EQ_INT(image_import(data_dir(), tar, "evil", &e), -1))
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
    fs_write_file(cut, data, len / 2, 0644, &err);
    CHECK_EQ_INT(image_import(data_dir(), cut, "cut", &err), -1);
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
    fs_write_file(bad, tar, len, 0644, &err);
    sl_error_clear(&err);
    CHECK_EQ_INT(image_import(data_dir(), bad, "bad", &err), -1);
    CHECK_STR(err.code, "bad_image");
    CHECK_CONTAINS(err.message, bad);
    check_nothing_left("bad");

    CHECK_EQ_INT(image_import(data_dir(), test_write_file("junk", "not an archive"), "junk", &err),
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
    if (!CHECK_EQ_INT(image_import(data_dir(), tar, "meta", &err), 0)) {
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
    CHECK_EQ_INT(image_import(data_dir(), "/nonexistent", "Bad/Name", &err), -1);
    CHECK_STR(err.code, "invalid_image_name");
    sl_error_clear(&err);
    const char *dir = test_path("empty-dir");
    CHECK_EQ_INT(fs_mkdir_p(dir, 0755, &err), 0);
    CHECK_EQ_INT(image_import(data_dir(), dir, "x", &err), -1);
    CHECK_STR(err.code, "unknown_format");
}
