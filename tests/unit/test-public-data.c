/* node/public-data.c: a dataset's tar unpacked whole or not at all, links
 * that leave it refused, fifos and set-id bits dropped, a host directory
 * bound read-only (the tests run as root) and unbound without touching its
 * files, and the host's root or the data directory refused. */
#include "harness.h"

#include "../../node/disk.h"
#include "../../node/fsutil.h"
#include "../../node/public-data.h"
#include "../../lib/cleanup.h"
#include "../../lib/file.h"
#include "../../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* 'f' file (body), 'd' directory, 'l' symlink (body: target), 'p' fifo. */
struct ent {
    char type;
    const char *path;
    const char *body;
    unsigned mode;
};

static const char *write_tar(const char *name, const struct ent *ents, size_t n)
{
    const char *path = test_path(name);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_add_filter(a, ARCHIVE_FILTER_GZIP);
    archive_write_open_filename(a, path);
    for (size_t i = 0; i < n; i++) {
        const struct ent *x = &ents[i];
        struct archive_entry *e = archive_entry_new();
        size_t len = x->type == 'f' ? strlen(x->body) : 0;
        archive_entry_set_pathname(e, x->path);
        archive_entry_set_filetype(e, x->type == 'f'   ? AE_IFREG
                                      : x->type == 'd' ? AE_IFDIR
                                      : x->type == 'l' ? AE_IFLNK
                                                       : AE_IFIFO);
        if (x->type == 'l')
            archive_entry_set_symlink(e, x->body);
        archive_entry_set_size(e, (la_int64_t)len);
        archive_entry_set_perm(e, x->mode ? x->mode : (x->type == 'd' ? 0755 : 0644));
        archive_write_header(a, e);
        if (len)
            archive_write_data(a, x->body, len);
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    return path;
}

static const char *data_dir(void)
{
    const char *d = test_path("data");
    struct sl_error err = SL_ERROR_INIT;
    fs_mkdir_p(d, 0700, &err);
    return d;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Nothing half-made is left in DATA/public-tmp. */
static size_t tmp_entries(void)
{
    cleanup_free char *tmp = xasprintf("%s/public-tmp", data_dir());
    cleanup_dir DIR *d = opendir(tmp);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    return n;
}

static const struct ent good[] = {
    { 'd', "train", NULL, 0 },
    { 'f', "train/a.txt", "hello", 0 },
    { 'f', "tool", "#!/bin/sh\n", 04755 },
    { 'l', "train/link", "../tool", 0 },
    { 'l', "here", "train/./a.txt", 0 },
    { 'p', "train/pipe", NULL, 0 },
};

TEST(public_unpack_a_tar_and_remove_it)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *tar = write_tar("good.tar.gz", good, ARRAY_SIZE(good));

    CHECK(public_init(data_dir(), &err) == 0);
    if (!CHECK_EQ_INT(public_unpack(data_dir(), "mnist", tar, "sha256:x", NULL, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    cleanup_free char *a = xasprintf("%s/public/mnist/train/a.txt", data_dir());
    cleanup_free char *pipe = xasprintf("%s/public/mnist/train/pipe", data_dir());
    cleanup_free char *tool = xasprintf("%s/public/mnist/tool", data_dir());
    cleanup_free char *top = xasprintf("%s/public/mnist", data_dir());
    struct stat st;
    CHECK(exists(a));
    CHECK(!exists(pipe)); /* no channel between instances through a fifo */
    CHECK(stat(tool, &st) == 0 && (st.st_mode & 07777) == 0755); /* set-uid dropped */
    CHECK(stat(top, &st) == 0 && (st.st_mode & 0777) == 0755);
    char source[64];
    uint64_t size = 0;
    CHECK_EQ_INT(public_present(data_dir(), "mnist", source, sizeof(source), &size), 1);
    CHECK_STR(source, "sha256:x");
    CHECK_EQ_INT(size, 5 + 10);
    CHECK_EQ_INT(tmp_entries(), 0);

    CHECK_EQ_INT(public_remove(data_dir(), "mnist", &err), 0);
    CHECK(!exists(top));
    CHECK_EQ_INT(public_present(data_dir(), "mnist", NULL, 0, NULL), 0);
    CHECK_EQ_INT(tmp_entries(), 0);
}

TEST(public_links_out_of_the_dataset_are_refused)
{
    static const struct ent absolute[] = { { 'f', "x", "x", 0 }, { 'l', "etc", "/etc", 0 } };
    static const struct ent climbing[] = { { 'd', "a", NULL, 0 },
                                           { 'l', "a/up", "../../../etc/shadow", 0 } };
    static const struct ent sneaky[] = { { 'l', "s", "a/../../x", 0 } };
    static const struct ent dotdot[] = { { 'f', "../evil", "x", 0 } };
    static const struct ent rooted[] = { { 'f', "/evil", "x", 0 } };
    static const struct ent through[] = { { 'l', "d", ".", 0 }, { 'f', "d/x", "x", 0 } };
    struct {
        const char *name;
        const struct ent *ents;
        size_t n;
        const char *says;
    } cases[] = {
        { "absolute", absolute, ARRAY_SIZE(absolute), "absolute path '/etc'" },
        { "climbing", climbing, ARRAY_SIZE(climbing), "leaves the dataset" },
        { "sneaky", sneaky, ARRAY_SIZE(sneaky), "leaves the dataset" },
        { "dotdot", dotdot, ARRAY_SIZE(dotdot), "'..' component" },
        { "rooted", rooted, ARRAY_SIZE(rooted), "absolute path" },
        { "through", through, ARRAY_SIZE(through), "symlink or not a directory" },
    };
    struct sl_error err = SL_ERROR_INIT;
    const char *tar = write_tar("keep.tar.gz", good, ARRAY_SIZE(good));

    /* an existing dataset of the name stays when its replacement fails */
    CHECK_EQ_INT(public_unpack(data_dir(), "keep", tar, "sha256:old", NULL, &err), 0);
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        cleanup_free char *file = xasprintf("%s.tar.gz", cases[i].name);
        const char *bad = write_tar(file, cases[i].ents, cases[i].n);
        err = (struct sl_error)SL_ERROR_INIT;
        if (!CHECK_EQ_INT(public_unpack(data_dir(), "keep", bad, "sha256:new", NULL, &err), -1))
            continue;
        CHECK_STR(err.code, "bad_image");
        if (!strstr(err.message, cases[i].says))
            test_fail(__FILE__, __LINE__, "%s: '%s' does not say '%s'", cases[i].name, err.message,
                      cases[i].says);
        CHECK_EQ_INT(tmp_entries(), 0);
    }
    char source[64];
    CHECK_EQ_INT(public_present(data_dir(), "keep", source, sizeof(source), NULL), 1);
    CHECK_STR(source, "sha256:old");
    cleanup_free char *evil = xasprintf("%s/public/evil", data_dir());
    CHECK(!exists(evil));
    public_remove(data_dir(), "keep", &err);
}

TEST(public_bind_is_read_only_and_unbinds_without_touching_the_files)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *src = test_path("host-dataset");
    CHECK(fs_mkdir_p(src, 0755, &err) == 0);
    cleanup_free char *file = xasprintf("%s/labels.csv", src);
    CHECK(sl_file_write(file, "1,2\n", 4, 0644, 0, &err) == 0);

    if (!CHECK_EQ_INT(public_bind(data_dir(), "coco", src, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    cleanup_free char *inside = xasprintf("%s/public/coco/labels.csv", data_dir());
    cleanup_free char *mp = xasprintf("%s/public/coco", data_dir());
    CHECK(exists(inside));
    int fd = open(inside, O_WRONLY | O_APPEND | O_CLOEXEC);
    CHECK_EQ_INT(fd < 0 ? errno : 0, EROFS);
    if (fd >= 0)
        close(fd);
    uint64_t size = 0;
    CHECK_EQ_INT(public_present(data_dir(), "coco", NULL, 0, &size), 1);
    CHECK_EQ_INT(size, 4);

    CHECK_EQ_INT(public_remove(data_dir(), "coco", &err), 0);
    CHECK_EQ_INT(disk_mounted(mp, NULL, 0, NULL, 0, &err), 0);
    CHECK(!exists(mp));
    CHECK(exists(file)); /* the operator's files stay */

    /* the host's root, the data directory and what holds it are refused */
    const char *refused[] = { "/", data_dir(), test_tmpdir(), "relative/path" };
    for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
        err = (struct sl_error)SL_ERROR_INIT;
        CHECK_EQ_INT(public_bind(data_dir(), "bad", refused[i], &err), -1);
        CHECK_STR(err.code, "invalid_path");
    }
    cleanup_free char *bad = xasprintf("%s/public/bad", data_dir());
    CHECK(!exists(bad));
}

TEST(public_names)
{
    CHECK(public_name_valid("mnist"));
    CHECK(public_name_valid("coco-2017_v1.0"));
    CHECK(!public_name_valid(""));
    CHECK(!public_name_valid(".hidden"));
    CHECK(!public_name_valid("a/b"));
    CHECK(!public_name_valid(".."));
    CHECK(!public_name_valid("Upper"));
}
