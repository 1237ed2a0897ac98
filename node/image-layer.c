#include "image-layer.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define WHITEOUT_PREFIX ".wh."
#define WHITEOUT_OPAQUE ".wh..wh..opq"
#define OVERLAY_XATTRS  "trusted.overlay."

static const char retry_hint[] = "the file is damaged or incomplete: copy it again (compare its "
                                 "sha256 with the original) and retry";

static void cleanup_archivep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
#define cleanup_archive __attribute__((cleanup(cleanup_archivep)))

int image_open_in_root(int root_fd, const char *rel, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    return (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof(how));
}

/* The decompressed bytes of the source, hashed on their way to the tar
 * reader: the layer's digest is that of its uncompressed tar (its diff_id),
 * whatever compression carried it. */
struct hashed_stream {
    struct archive *raw;
    crypto_hash_sha256_state sha;
    uint64_t size;
};

static la_ssize_t hashed_read(struct archive *a, void *data, const void **out)
{
    struct hashed_stream *s = data;
    size_t len = 0;
    la_int64_t offset;
    int rc = archive_read_data_block(s->raw, out, &len, &offset);
    if (rc == ARCHIVE_EOF)
        return 0;
    if (rc != ARCHIVE_OK) {
        archive_set_error(a, archive_errno(s->raw), "%s", archive_error_string(s->raw));
        return -1;
    }
    crypto_hash_sha256_update(&s->sha, *out, len);
    s->size += len;
    return (la_ssize_t)len;
}

/* One extraction: the layer root, where errors point, and the directories
 * whose times are set last (their contents change them). */
struct unpack {
    int root;
    unsigned flags;
    const char *file, *what;
    const char *entry;
    struct dir_time {
        char *path;
        struct timespec ts[2];
    } * dirs;
    size_t n_dirs, cap_dirs;
    struct sl_error *err;
};

static int entry_fail(struct unpack *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int entry_fail(struct unpack *u, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return sl_fail(u->err, SL_E_UNPROCESSABLE, "bad_image", "import '%s': %s, entry '%s': %s",
                   u->file, u->what, u->entry, why);
}

static int entry_fail_errno(struct unpack *u, const char *action)
{
    int e = errno;
    int rc = entry_fail(u, "unable to %s: %s", action, strerror(e));
    u->err->sys_errno = e;
    return rc;
}

/* Normalises an archive path into out: "./a//b/" is "a/b", "." is "".
 * Absolute paths and ".." components are refused: they could only be meant
 * to reach outside the layer. */
static int clean_path(struct unpack *u, const char *name, char *out, size_t out_len)
{
    if (name[0] == '/')
        return entry_fail(u, "absolute path '%s' refused: layers hold relative paths only", name);
    size_t n = 0;
    const char *p = name;
    while (*p) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return entry_fail(u, "path '%s' has a '..' component, refused", name);
        if (len > 0 && !(len == 1 && p[0] == '.')) {
            if (n + len + 2 > out_len)
                return entry_fail(u, "path too long");
            if (n)
                out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len;
        while (*p == '/')
            p++;
    }
    out[n] = '\0';
    return 0;
}

/* Opens the directory holding path's last component, one component at a
 * time from the layer root with O_NOFOLLOW, making missing directories when
 * `create`; *leaf points into path at the last component. */
static int open_parent(struct unpack *u, char *path, const char **leaf, bool create)
{
    int fd = openat(u->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return entry_fail_errno(u, "open the layer root");
    char *p = path, *slash;
    while ((slash = strchr(p, '/'))) {
        *slash = '\0';
        int next = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
                *slash = '/';
                close(fd);
                return entry_fail_errno(u, "make a directory");
            }
            next = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (next < 0) {
            int e = errno;
            close(fd);
            int rc = e == ELOOP || e == ENOTDIR
                         ? entry_fail(u,
                                      "'%s' is a symlink or not a directory: nothing is "
                                      "extracted through it",
                                      path)
                         : entry_fail(u, "unable to open '%s': %s", path, strerror(e));
            *slash = '/';
            return rc;
        }
        *slash = '/';
        close(fd);
        fd = next;
        p = slash + 1;
    }
    *leaf = p;
    return fd;
}

/* Makes room for a new entry: a later entry of the same name replaces an
 * earlier one, as tar does. */
static int remove_leaf(struct unpack *u, int dir, const char *leaf)
{
    if (unlinkat(dir, leaf, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno == EISDIR && unlinkat(dir, leaf, AT_REMOVEDIR) == 0)
        return 0;
    return entry_fail_errno(u, "replace an earlier entry");
}

static int set_xattrs(struct unpack *u, int fd, struct archive_entry *e)
{
    const char *name;
    const void *value;
    size_t len;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &len) == ARCHIVE_OK) {
        /* overlayfs' own attributes (opaque, redirect, metacopy) come only
         * from whiteouts: an image must not forge them */
        if (strncmp(name, OVERLAY_XATTRS, strlen(OVERLAY_XATTRS)) == 0)
            continue;
        if (fsetxattr(fd, name, value, len, 0) < 0 && errno != ENOTSUP)
            return entry_fail(u, "unable to set xattr '%s': %s", name, strerror(errno));
    }
    return 0;
}

static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
    ts[1] = (struct timespec){ .tv_nsec = UTIME_OMIT };
    if (archive_entry_mtime_is_set(e))
        ts[1] = (struct timespec){ archive_entry_mtime(e), archive_entry_mtime_nsec(e) };
    ts[0] = ts[1];
    if (archive_entry_atime_is_set(e))
        ts[0] = (struct timespec){ archive_entry_atime(e), archive_entry_atime_nsec(e) };
}

/* Owner, then mode (chown clears set-id bits), xattrs and times of an open
 * regular file or directory. */
static int set_attrs_fd(struct unpack *u, int fd, struct archive_entry *e, bool times)
{
    if (fchown(fd, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e)) < 0)
        return entry_fail_errno(u, "set the owner");
    if (fchmod(fd, archive_entry_perm(e) & 07777) < 0)
        return entry_fail_errno(u, "set the mode");
    if (set_xattrs(u, fd, e) < 0)
        return -1;
    struct timespec ts[2];
    entry_times(e, ts);
    if (times && futimens(fd, ts) < 0)
        return entry_fail_errno(u, "set the times");
    return 0;
}

static int write_file(struct unpack *u, struct archive *a, int dir, const char *leaf,
                      struct archive_entry *e)
{
    if (remove_leaf(u, dir, leaf) < 0)
        return -1;
    cleanup_close int fd =
        openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return entry_fail_errno(u, "create the file");
    for (;;) {
        const void *block;
        size_t len;
        la_int64_t offset;
        int rc = archive_read_data_block(a, &block, &len, &offset);
        if (rc == ARCHIVE_EOF)
            break;
        if (rc != ARCHIVE_OK)
            return entry_fail(u, "%s; %s", archive_error_string(a), retry_hint);
        const char *b = block;
        while (len > 0) {
            ssize_t w = pwrite(fd, b, len, (off_t)offset);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return entry_fail_errno(u, "write the file");
            b += w;
            offset += w;
            len -= (size_t)w;
        }
    }
    /* sparse files end in a hole the blocks do not cover */
    if (archive_entry_size_is_set(e) && ftruncate(fd, (off_t)archive_entry_size(e)) < 0)
        return entry_fail_errno(u, "size the file");
    return set_attrs_fd(u, fd, e, true);
}

static int make_dir(struct unpack *u, int dir, const char *leaf, const char *path,
                    struct archive_entry *e)
{
    cleanup_close int fd = -1;
    if (leaf[0] == '\0') {
        fd = openat(u->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else {
        if (mkdirat(dir, leaf, 0755) < 0 && errno != EEXIST)
            return entry_fail_errno(u, "make the directory");
        fd = openat(dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && (errno == ENOTDIR || errno == ELOOP)) {
            if (remove_leaf(u, dir, leaf) < 0)
                return -1;
            if (mkdirat(dir, leaf, 0755) < 0)
                return entry_fail_errno(u, "make the directory");
            fd = openat(dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
    }
    if (fd < 0)
        return entry_fail_errno(u, "open the directory");
    if (set_attrs_fd(u, fd, e, false) < 0)
        return -1;
    if (u->n_dirs == u->cap_dirs) {
        u->cap_dirs = u->cap_dirs ? 2 * u->cap_dirs : 64;
        u->dirs = xrealloc(u->dirs, u->cap_dirs * sizeof(*u->dirs));
    }
    u->dirs[u->n_dirs].path = xstrdup(path);
    entry_times(e, u->dirs[u->n_dirs++].ts);
    return 0;
}

/* Symlinks, devices and fifos: made by name in their parent, which is ours,
 * and never opened (a symlink is never followed). */
static int make_node(struct unpack *u, int dir, const char *leaf, struct archive_entry *e)
{
    mode_t type = archive_entry_filetype(e);
    if (remove_leaf(u, dir, leaf) < 0)
        return -1;
    if (type == AE_IFLNK) {
        const char *target = archive_entry_symlink_utf8(e);
        if (!target)
            target = archive_entry_symlink(e);
        if (!target || !target[0])
            return entry_fail(u, "symlink without a target");
        if (symlinkat(target, dir, leaf) < 0)
            return entry_fail_errno(u, "make the symlink");
    } else {
        if (mknodat(dir, leaf, type | 0600, archive_entry_rdev(e)) < 0)
            return entry_fail_errno(u, "make the device node");
        if (fchmodat(dir, leaf, archive_entry_perm(e) & 07777, 0) < 0)
            return entry_fail_errno(u, "set the mode");
    }
    if (fchownat(dir, leaf, (uid_t)archive_entry_uid(e), (gid_t)archive_entry_gid(e),
                 AT_SYMLINK_NOFOLLOW) < 0)
        return entry_fail_errno(u, "set the owner");
    if (type != AE_IFLNK && fchmodat(dir, leaf, archive_entry_perm(e) & 07777, 0) < 0)
        return entry_fail_errno(u, "set the mode");
    struct timespec ts[2];
    entry_times(e, ts);
    if (utimensat(dir, leaf, ts, AT_SYMLINK_NOFOLLOW) < 0)
        return entry_fail_errno(u, "set the times");
    return 0;
}

/* A hard link must name an earlier entry of this layer: its target is
 * cleaned and walked like any path, so "/etc/passwd" or "../x" is refused
 * and no symlink on the way is followed. */
static int make_hardlink(struct unpack *u, int dir, const char *leaf, const char *target)
{
    char clean[PATH_MAX];
    if (clean_path(u, target, clean, sizeof(clean)) < 0) {
        sl_error_prefix(u->err, "hard link target");
        return -1;
    }
    if (!clean[0])
        return entry_fail(u, "hard link to the layer root refused");
    const char *tleaf;
    cleanup_close int tdir = open_parent(u, clean, &tleaf, false);
    if (tdir < 0)
        return -1;
    if (remove_leaf(u, dir, leaf) < 0)
        return -1;
    if (linkat(tdir, tleaf, dir, leaf, 0) < 0) {
        if (errno == ENOENT)
            return entry_fail(u, "hard link target '%s' is not in this layer", target);
        return entry_fail_errno(u, "make the hard link");
    }
    return 0;
}

static int whiteout(struct unpack *u, int dir, const char *leaf)
{
    if (strcmp(leaf, WHITEOUT_OPAQUE) == 0) {
        if (fsetxattr(dir, "trusted.overlay.opaque", "y", 1, 0) < 0)
            return entry_fail_errno(u, "mark the directory opaque");
        return 0;
    }
    const char *name = leaf + strlen(WHITEOUT_PREFIX);
    /* .wh..wh.* other than the opaque marker are aufs bookkeeping */
    if (strncmp(name, WHITEOUT_PREFIX, strlen(WHITEOUT_PREFIX)) == 0)
        return 0;
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return entry_fail(u, "whiteout of nothing");
    if (remove_leaf(u, dir, name) < 0)
        return -1;
    if (mknodat(dir, name, S_IFCHR | 0, makedev(0, 0)) < 0)
        return entry_fail_errno(u, "make the whiteout");
    return 0;
}

static int unpack_entry(struct unpack *u, struct archive *a, struct archive_entry *e)
{
    char path[PATH_MAX];
    if (clean_path(u, u->entry, path, sizeof(path)) < 0)
        return -1;
    mode_t type = archive_entry_filetype(e);
    const char *hardlink = archive_entry_hardlink_utf8(e);
    if (!hardlink)
        hardlink = archive_entry_hardlink(e);
    if (!path[0]) {
        if (hardlink || type != AE_IFDIR)
            return entry_fail(u, "the layer root must be a directory");
        return make_dir(u, -1, "", "", e);
    }

    char walk[PATH_MAX];
    memcpy(walk, path, strlen(path) + 1);
    const char *leaf;
    cleanup_close int dir = open_parent(u, walk, &leaf, true);
    if (dir < 0)
        return -1;
    if ((u->flags & IMAGE_LAYER_WHITEOUTS) &&
        strncmp(leaf, WHITEOUT_PREFIX, strlen(WHITEOUT_PREFIX)) == 0)
        return whiteout(u, dir, leaf);
    if (hardlink)
        return make_hardlink(u, dir, leaf, hardlink);
    switch (type) {
    case AE_IFREG:
        return write_file(u, a, dir, leaf, e);
    case AE_IFDIR:
        return make_dir(u, dir, leaf, path, e);
    case AE_IFLNK:
    case AE_IFCHR:
    case AE_IFBLK:
    case AE_IFIFO:
        return make_node(u, dir, leaf, e);
    default:
        return 0; /* sockets and the unknown: nothing an image needs */
    }
}

/* Directory times last, deepest first. */
static int set_dir_times(struct unpack *u)
{
    for (size_t i = u->n_dirs; i-- > 0;) {
        char *path = u->dirs[i].path;
        u->entry = path;
        if (!path[0]) {
            if (utimensat(u->root, ".", u->dirs[i].ts, 0) < 0)
                return entry_fail_errno(u, "set the times");
            continue;
        }
        const char *leaf;
        cleanup_close int dir = open_parent(u, path, &leaf, false);
        if (dir < 0)
            return -1;
        if (utimensat(dir, leaf, u->dirs[i].ts, AT_SYMLINK_NOFOLLOW) < 0)
            return entry_fail_errno(u, "set the times");
    }
    return 0;
}

static int archive_fail(struct unpack *u, struct archive *a, const char *stage)
{
    const char *why = archive_error_string(a);
    return sl_fail(u->err, SL_E_UNPROCESSABLE, "bad_image", "import '%s': %s, %s: %s; %s", u->file,
                   u->what, stage, why ? why : "unreadable", retry_hint);
}

static int unpack_stream(struct unpack *u, struct archive *tar)
{
    struct archive_entry *e;
    char after[PATH_MAX + 32] = "at the start";
    for (;;) {
        int rc = archive_read_next_header(tar, &e);
        if (rc == ARCHIVE_EOF)
            return 0;
        if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
            return archive_fail(u, tar, after);
        u->entry = archive_entry_pathname_utf8(e);
        if (!u->entry)
            u->entry = archive_entry_pathname(e);
        if (!u->entry)
            return archive_fail(u, tar, "an entry without a name");
        if (unpack_entry(u, tar, e) < 0)
            return -1;
        snprintf(after, sizeof(after), "after entry '%s'", u->entry);
    }
}

int image_layer_unpack(int fd, const char *dir, unsigned flags, const char *file, const char *what,
                       char digest[IMAGE_DIGEST_HEX], uint64_t *size, struct sl_error *err)
{
    struct unpack u = { .flags = flags, .file = file, .what = what, .entry = "", .err = err };
    u.root = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (u.root < 0)
        return sl_fail_errno(err, "unable to open '%s'", dir);

    struct hashed_stream s = { 0 };
    crypto_hash_sha256_init(&s.sha);
    cleanup_archive struct archive *raw = archive_read_new();
    cleanup_archive struct archive *tar = archive_read_new();
    archive_read_support_filter_all(raw);
    archive_read_support_format_raw(raw);
    archive_read_support_format_tar(tar);
    s.raw = raw;
    int rc = -1;
    struct archive_entry *e;
    if (archive_read_open_fd(raw, fd, 1 << 16) != ARCHIVE_OK ||
        archive_read_next_header(raw, &e) != ARCHIVE_OK) {
        archive_fail(&u, raw, "unable to read");
        goto out;
    }
    if (archive_read_open(tar, &s, NULL, hashed_read, NULL) != ARCHIVE_OK) {
        archive_fail(&u, tar, "not a tar archive");
        goto out;
    }
    if (unpack_stream(&u, tar) < 0 || set_dir_times(&u) < 0)
        goto out;
    /* the zero blocks after the end marker, and the compressed stream's
     * trailer: both belong to the digest, and a truncated one fails here */
    const void *out;
    while ((rc = (int)hashed_read(tar, &s, &out)) > 0)
        ;
    if (rc < 0) {
        archive_fail(&u, raw, "at the end");
        goto out;
    }
    unsigned char bin[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&s.sha, bin);
    sodium_bin2hex(digest, IMAGE_DIGEST_HEX, bin, sizeof(bin));
    *size = s.size;
    rc = 0;
out:
    for (size_t i = 0; i < u.n_dirs; i++)
        free(u.dirs[i].path);
    free(u.dirs);
    close(u.root);
    return rc < 0 ? -1 : 0;
}

int image_layer_digest(int fd, const char *file, char digest[IMAGE_DIGEST_HEX],
                       struct sl_error *err)
{
    cleanup_archive struct archive *raw = archive_read_new();
    archive_read_support_filter_all(raw);
    archive_read_support_format_raw(raw);
    struct hashed_stream s = { .raw = raw };
    crypto_hash_sha256_init(&s.sha);
    struct archive_entry *e;
    const void *out;
    la_ssize_t n = -1;
    if (archive_read_open_fd(raw, fd, 1 << 16) == ARCHIVE_OK &&
        archive_read_next_header(raw, &e) == ARCHIVE_OK)
        while ((n = hashed_read(raw, &s, &out)) > 0)
            ;
    if (n < 0) {
        const char *why = archive_error_string(raw);
        return sl_fail(err, SL_E_UNPROCESSABLE, "bad_image", "import '%s': %s; %s", file,
                       why ? why : "unreadable", retry_hint);
    }
    unsigned char bin[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&s.sha, bin);
    sodium_bin2hex(digest, IMAGE_DIGEST_HEX, bin, sizeof(bin));
    return 0;
}

static char *layers_tmp(const char *data_dir)
{
    return xasprintf("%s/layers/tmp", data_dir);
}

int image_layer_extract(const char *data_dir, int fd, unsigned flags, const char *file,
                        const char *what, struct image_layer *layer, struct sl_error *err)
{
    *layer = (struct image_layer){ 0 };
    cleanup_free char *tmp_root = layers_tmp(data_dir);
    if (fs_mkdir_p(tmp_root, 0700, err) < 0)
        return -1;
    char *tmp = xasprintf("%s/layer-XXXXXX", tmp_root);
    if (!mkdtemp(tmp)) {
        sl_fail_errno(err, "unable to make a directory in '%s'", tmp_root);
        free(tmp);
        return -1;
    }
    layer->tmp = tmp;
    cleanup_free char *rootfs = xasprintf("%s/rootfs", tmp);
    if (mkdir(rootfs, 0755) < 0) {
        sl_fail_errno(err, "unable to make '%s'", rootfs);
        image_layer_discard(data_dir, layer);
        return -1;
    }
    if (image_layer_unpack(fd, rootfs, flags, file, what, layer->digest, &layer->size_bytes, err) <
        0) {
        image_layer_discard(data_dir, layer);
        return -1;
    }
    return 0;
}

bool image_layer_present(const char *data_dir, const char *digest)
{
    cleanup_free char *done = xasprintf("%s/layers/sha256/%s/layer.json", data_dir, digest);
    return access(done, F_OK) == 0;
}

void image_layer_discard(const char *data_dir, struct image_layer *layer)
{
    if (layer->tmp) {
        struct sl_error ignored = SL_ERROR_INIT;
        fs_remove_tree(layer->tmp, &ignored);
        free(layer->tmp);
        layer->tmp = NULL;
    }
    /* the last one out leaves no empty tmp directory behind */
    cleanup_free char *tmp_root = layers_tmp(data_dir);
    rmdir(tmp_root);
}

int image_layer_commit(const char *data_dir, struct image_layer *layer, const char *source,
                       struct sl_error *err)
{
    cleanup_free char *store = xasprintf("%s/layers/sha256", data_dir);
    cleanup_free char *final = xasprintf("%s/%s", store, layer->digest);
    if (image_layer_present(data_dir, layer->digest)) {
        image_layer_discard(data_dir, layer);
        return 0;
    }
    cleanup_json json_t *meta = json_pack("{s:s, s:I, s:s, s:I}", "digest", layer->digest,
                                          "size_bytes", (json_int_t)layer->size_bytes, "source",
                                          source, "imported_at", (json_int_t)time(NULL));
    cleanup_free char *text = json_dumps(meta, JSON_INDENT(2) | JSON_SORT_KEYS);
    cleanup_free char *meta_path = xasprintf("%s/layer.json", layer->tmp);
    if (!text)
        return sl_fail(err, SL_E_INTERNAL, "internal", "BUG: unable to encode '%s'", meta_path);
    size_t len = strlen(text);
    text[len] = '\n';
    if (fs_mkdir_p(store, 0700, err) < 0 || fs_write_file(meta_path, text, len + 1, 0644, err) < 0)
        return -1;
    if (chmod(layer->tmp, 0555) < 0)
        return sl_fail_errno(err, "unable to make '%s' read-only", layer->tmp);
    if (rename(layer->tmp, final) < 0) {
        /* someone else imported the same layer meanwhile */
        if ((errno == EEXIST || errno == ENOTEMPTY) &&
            image_layer_present(data_dir, layer->digest)) {
            image_layer_discard(data_dir, layer);
            return 0;
        }
        return sl_fail_errno(err, "unable to move layer into '%s'", final);
    }
    free(layer->tmp);
    layer->tmp = NULL;
    image_layer_discard(data_dir, layer);
    return 0;
}
