/* An overlay upper directory written as one layer tar (image-capture.h). */
#include "image-capture.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CAPTURE_MAX_DEPTH 256

static void entry_freep(struct archive_entry **e)
{
    if (*e)
        archive_entry_free(*e);
}
#define cleanup_archive_entry __attribute__((cleanup(entry_freep)))

struct link_seen {
    dev_t dev;
    ino_t ino;
    char *path;
};

struct capture {
    struct archive *ar;
    int fd;
    crypto_hash_sha256_state sha;
    struct image_capture_stats *stats;
    struct link_seen *links;
    size_t n_links, cap_links;
    struct sl_error *err;
    char buf[1 << 16];
};

static la_ssize_t write_cb(struct archive *ar, void *p, const void *data, size_t len)
{
    struct capture *c = p;
    const char *d = data;
    size_t done = 0;

    (void)ar;
    while (done < len) {
        ssize_t n = write(c->fd, d + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            archive_set_error(ar, errno, "write: %s", strerror(errno));
            return -1;
        }
        done += (size_t)n;
    }
    crypto_hash_sha256_update(&c->sha, data, len);
    c->stats->bytes += len;
    return (la_ssize_t)len;
}

/* What never leaves the instance (image-capture.h); path is relative to
 * the root ("etc/machine-id"). */
static bool left_out(const char *path)
{
    static const char *const patterns[] = {
        "etc/ssh/ssh_host_*",     "etc/ssh/.suanli-host-keys", "etc/machine-id",
        "*/.ssh/authorized_keys", "*/.ssh/authorized_keys2",
    };
    for (size_t i = 0; i < ARRAY_SIZE(patterns); i++)
        if (fnmatch(patterns[i], path, 0) == 0)
            return true;
    return false;
}

static int entry_out(struct capture *c, struct archive_entry *e, const char *path)
{
    if (archive_write_header(c->ar, e) != ARCHIVE_OK)
        return sl_fail(c->err, SL_E_INTERNAL, "capture_failed", "unable to write '%s': %s", path,
                       archive_error_string(c->ar));
    c->stats->entries++;
    return 0;
}

/* An empty regular file entry: a whiteout marker. */
static int marker(struct capture *c, const char *path, const struct stat *st)
{
    cleanup_archive_entry struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0600);
    archive_entry_set_size(e, 0);
    archive_entry_set_mtime(e, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    return entry_out(c, e, path);
}

static int file_data(struct capture *c, int fd, const char *path)
{
    for (;;) {
        ssize_t n = read(fd, c->buf, sizeof(c->buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sl_fail_errno(c->err, "unable to read '%s'", path);
        if (n == 0)
            return 0;
        if (archive_write_data(c->ar, c->buf, (size_t)n) != n)
            return sl_fail(c->err, SL_E_INTERNAL, "capture_failed", "unable to write '%s': %s",
                           path, archive_error_string(c->ar));
    }
}

static int walk(struct capture *c, int dfd, const char *rel, int depth);

static int one(struct capture *c, int dfd, const char *name, const char *rel, int depth)
{
    struct stat st;
    cleanup_free char *path = rel ? xasprintf("%s/%s", rel, name) : xstrdup(name);

    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return sl_fail_errno(c->err, "unable to read '%s'", path);
    if (left_out(path)) {
        c->stats->skipped++;
        return 0;
    }
    if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) {
        cleanup_free char *wh = rel ? xasprintf("%s/.wh.%s", rel, name) : xasprintf(".wh.%s", name);
        return marker(c, wh, &st);
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        c->stats->skipped++; /* devices, fifos, sockets */
        return 0;
    }
    cleanup_archive_entry struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    archive_entry_set_uid(e, st.st_uid);
    archive_entry_set_gid(e, st.st_gid);
    archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    mode_t perm = st.st_mode & 07777;
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
        if (n < 0)
            return sl_fail_errno(c->err, "unable to read the link '%s'", path);
        target[n] = '\0';
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_perm(e, 0777);
        archive_entry_set_symlink(e, target);
        return entry_out(c, e, path);
    }
    if (S_ISDIR(st.st_mode)) {
        cleanup_close int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        char v[8];
        if (sub < 0)
            return sl_fail_errno(c->err, "unable to open '%s'", path);
        if (fgetxattr(sub, "trusted.overlay.redirect", v, sizeof(v)) >= 0 || errno == ERANGE)
            return sl_fail(c->err, SL_E_UNPROCESSABLE, "capture_unsupported",
                           "'%s' is a renamed directory of the image (overlayfs redirect_dir): "
                           "it cannot be saved",
                           path);
        archive_entry_set_filetype(e, AE_IFDIR);
        archive_entry_set_perm(e, perm);
        if (entry_out(c, e, path) < 0)
            return -1;
        ssize_t n = fgetxattr(sub, "trusted.overlay.opaque", v, sizeof(v));
        if (n == 1 && v[0] == 'y') {
            cleanup_free char *opq = xasprintf("%s/.wh..wh..opq", path);
            if (marker(c, opq, &st) < 0)
                return -1;
        }
        int rc = walk(c, sub, path, depth + 1);
        return rc;
    }
    /* a regular file */
    cleanup_close int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char v[8];
    if (fd < 0)
        return sl_fail_errno(c->err, "unable to open '%s'", path);
    if (fgetxattr(fd, "trusted.overlay.metacopy", v, sizeof(v)) >= 0 || errno == ERANGE)
        return sl_fail(c->err, SL_E_UNPROCESSABLE, "capture_unsupported",
                       "'%s' is a metadata-only copy (overlayfs metacopy): it cannot be saved",
                       path);
    if (perm & (S_ISUID | S_ISGID)) {
        perm &= (mode_t) ~(S_ISUID | S_ISGID);
        c->stats->stripped++;
    }
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, perm);
    if (st.st_nlink > 1) {
        for (size_t i = 0; i < c->n_links; i++)
            if (c->links[i].dev == st.st_dev && c->links[i].ino == st.st_ino) {
                archive_entry_set_hardlink(e, c->links[i].path);
                archive_entry_set_size(e, 0);
                return entry_out(c, e, path);
            }
        if (c->n_links == c->cap_links) {
            c->cap_links = c->cap_links ? c->cap_links * 2 : 16;
            c->links = xrealloc(c->links, c->cap_links * sizeof(*c->links));
        }
        c->links[c->n_links++] =
            (struct link_seen){ .dev = st.st_dev, .ino = st.st_ino, .path = xstrdup(path) };
    }
    archive_entry_set_size(e, st.st_size);
    if (entry_out(c, e, path) < 0)
        return -1;
    return file_data(c, fd, path);
}

static int walk(struct capture *c, int dfd, const char *rel, int depth)
{
    if (depth > CAPTURE_MAX_DEPTH)
        return sl_fail(c->err, SL_E_UNPROCESSABLE, "capture_too_deep",
                       "'%s' is more than %d directories deep: it cannot be saved", rel,
                       CAPTURE_MAX_DEPTH);
    int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    cleanup_dir DIR *d = dup < 0 ? NULL : fdopendir(dup);
    struct dirent *de;

    if (!d) {
        if (dup >= 0)
            close(dup);
        return sl_fail_errno(c->err, "unable to list '%s'", rel ? rel : "/");
    }
    while ((errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (one(c, dirfd(d), de->d_name, rel, depth) < 0)
            return -1;
    }
    if (errno)
        return sl_fail_errno(c->err, "unable to list '%s'", rel ? rel : "/");
    return 0;
}

int image_capture(const char *upper, const char *out, char digest[IMAGE_DIGEST_HEX],
                  struct image_capture_stats *stats, struct sl_error *err)
{
    struct capture *c = xzalloc(sizeof(*c));
    int rc = -1;

    *stats = (struct image_capture_stats){ 0 };
    c->stats = stats;
    c->err = err;
    crypto_hash_sha256_init(&c->sha);
    cleanup_close int root = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0) {
        sl_fail_errno(err, "unable to open '%s'", upper);
        goto out;
    }
    c->fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (c->fd < 0) {
        sl_fail_errno(err, "unable to create '%s'", out);
        goto out;
    }
    c->ar = archive_write_new();
    if (archive_write_set_format_pax_restricted(c->ar) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(c->ar, 1) != ARCHIVE_OK ||
        archive_write_open2(c->ar, c, NULL, write_cb, NULL, NULL) != ARCHIVE_OK) {
        sl_fail(err, SL_E_INTERNAL, "capture_failed", "unable to start '%s': %s", out,
                archive_error_string(c->ar));
        goto out;
    }
    if (walk(c, root, NULL, 0) < 0)
        goto out;
    if (archive_write_close(c->ar) != ARCHIVE_OK) {
        sl_fail(err, SL_E_INTERNAL, "capture_failed", "unable to finish '%s': %s", out,
                archive_error_string(c->ar));
        goto out;
    }
    if (fsync(c->fd) < 0) {
        sl_fail_errno(err, "unable to write '%s'", out);
        goto out;
    }
    unsigned char raw[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&c->sha, raw);
    sodium_bin2hex(digest, IMAGE_DIGEST_HEX, raw, sizeof(raw));
    rc = 0;
out:
    if (c->ar)
        archive_write_free(c->ar);
    if (c->fd > 0)
        close(c->fd);
    if (rc < 0)
        unlink(out);
    for (size_t i = 0; i < c->n_links; i++)
        free(c->links[i].path);
    free(c->links);
    free(c);
    return rc;
}
