#include "image-layer.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <lzma.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define WHITEOUT_PREFIX ".wh."
#define WHITEOUT_OPAQUE ".wh..wh..opq"
#define OVERLAY_XATTRS  "trusted.overlay."

/* Past this many bytes of directory paths kept for their times, a
 * directory's times are set at once (a later entry may touch them): the list
 * must not grow with an archive that repeats directories by the million. */
#define DIR_TIMES_MAX_BYTES (64u << 20)
/* How often (bytes written) the free space is looked at. */
#define FREE_CHECK_BYTES (64u << 20)

static const char retry_hint[] = "the file is damaged or incomplete: copy it again (compare its "
                                 "sha256 with the original) and retry";

const struct image_limits image_limits_default = {
    .max_bytes = IMAGE_MAX_BYTES_DEFAULT,
    .max_entries = IMAGE_MAX_ENTRIES_DEFAULT,
    .max_file_bytes = IMAGE_MAX_FILE_BYTES_DEFAULT,
    .max_path_depth = IMAGE_MAX_PATH_DEPTH_DEFAULT,
    .min_free_bytes = IMAGE_MIN_FREE_BYTES_DEFAULT,
};

void image_budget_init(struct image_budget *b, const struct image_limits *limits)
{
    *b = (struct image_budget){ .limits = limits ? *limits : image_limits_default };
}

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
    if (flags & O_PATH)
        return (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof(how));
    /* the object is looked at through an O_PATH descriptor, which opens
     * nothing, and only then opened through that descriptor: no race lets
     * another object be opened than the one whose type was checked */
    how.flags = (uint64_t)(O_PATH | O_CLOEXEC | (flags & (O_NOFOLLOW | O_DIRECTORY)));
    cleanup_close int path_fd = (int)syscall(SYS_openat2, root_fd, rel, &how, sizeof(how));
    struct stat st;
    if (path_fd < 0 || fstat(path_fd, &st) < 0)
        return -1;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        errno = S_ISLNK(st.st_mode)                      ? ELOOP
                : S_ISCHR(st.st_mode) && st.st_rdev == 0 ? ENXIO /* a whiteout */
                                                         : EPERM;
        return -1;
    }
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", path_fd);
    return open(proc, (flags & ~O_NOFOLLOW) | O_CLOEXEC);
}

/* Human sizes for messages: "8.0 MiB". */
static const char *human(uint64_t n, char buf[32])
{
    static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, 32, "%llu bytes", (unsigned long long)n);
    else
        snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

/* Which bound stopped the decompressed stream (the tar reader sees only
 * "read error": the stream remembers why). */
enum over {
    OVER_NONE,
    OVER_BYTES,     /* images.max_bytes */
    OVER_HEADER,    /* IMAGE_HEADER_MAX_BYTES in one entry's headers */
    OVER_XZ_MEMORY, /* IMAGE_XZ_MEMLIMIT */
};

/* An xz stream, decoded here rather than by libarchive, whose 3.6 reader
 * gives liblzma no memory limit: a 244 KB .xz whose header asks for a
 * 1.5 GiB dictionary made it resident. */
struct xz_source {
    int fd;
    lzma_stream z;
    bool eof, done;
    uint8_t in[1 << 16], out[1 << 16];
};

/* The decompressed bytes of the source, hashed and counted on their way to
 * the tar reader: the layer's digest is that of its uncompressed tar (its
 * diff_id), whatever compression carried it, and the count stops a
 * compression bomb as it inflates, whatever the headers claim. */
struct hashed_stream {
    struct archive *raw;  /* gzip, bzip2, zstd or none, by libarchive */
    struct xz_source *xz; /* or xz, by liblzma */
    crypto_hash_sha256_state sha;
    uint64_t size;
    uint64_t max;         /* what is left of the image's images.max_bytes */
    bool in_header;       /* the tar reader is reading an entry's headers */
    uint64_t header_size; /* bytes read for the current entry's headers */
    enum over over;
    uint64_t xz_memory; /* what the xz stream asked for */
    char why[256];      /* the decompressor's error */
};

static int xz_block(struct hashed_stream *s, const void **out, size_t *len)
{
    struct xz_source *x = s->xz;
    while (!x->done) {
        if (x->z.avail_in == 0 && !x->eof) {
            ssize_t n = read(x->fd, x->in, sizeof(x->in));
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                snprintf(s->why, sizeof(s->why), "read error: %s", strerror(errno));
                return -1;
            }
            x->eof = n == 0;
            x->z.next_in = x->in;
            x->z.avail_in = (size_t)n;
        }
        x->z.next_out = x->out;
        x->z.avail_out = sizeof(x->out);
        lzma_ret r = lzma_code(&x->z, x->eof ? LZMA_FINISH : LZMA_RUN);
        size_t produced = sizeof(x->out) - x->z.avail_out;
        if (r == LZMA_STREAM_END) {
            x->done = true;
        } else if (r == LZMA_MEMLIMIT_ERROR) {
            s->over = OVER_XZ_MEMORY;
            s->xz_memory = lzma_memusage(&x->z);
            snprintf(s->why, sizeof(s->why), "xz needs too much memory");
            return -1;
        } else if (r != LZMA_OK) {
            snprintf(s->why, sizeof(s->why), "%s",
                     r == LZMA_BUF_ERROR       ? "truncated xz input"
                     : r == LZMA_OPTIONS_ERROR ? "unsupported xz options"
                     : r == LZMA_MEM_ERROR     ? "out of memory decoding xz"
                                               : "damaged xz data");
            return -1;
        }
        if (produced) {
            *out = x->out;
            *len = produced;
            return 1;
        }
    }
    return 0;
}

/* The next block of the decompressed stream: 1, 0 at its end, -1 with s->why
 * or s->over set. */
static int stream_block(struct hashed_stream *s, const void **out, size_t *len)
{
    if (s->xz)
        return xz_block(s, out, len);
    la_int64_t offset;
    int rc = archive_read_data_block(s->raw, out, len, &offset);
    if (rc == ARCHIVE_EOF)
        return 0;
    if (rc != ARCHIVE_OK) {
        const char *why = archive_error_string(s->raw);
        snprintf(s->why, sizeof(s->why), "%s", why ? why : "read error");
        return -1;
    }
    return 1;
}

/* libarchive's read callback for the tar reader (a); a NULL a reads for
 * the digest alone. */
static la_ssize_t hashed_read(struct archive *a, void *data, const void **out)
{
    struct hashed_stream *s = data;
    size_t len = 0;
    int rc = stream_block(s, out, &len);
    if (rc == 0)
        return 0;
    if (rc > 0) {
        s->size += len;
        if (s->size > s->max)
            s->over = OVER_BYTES;
        else if (s->in_header && (s->header_size += len) > IMAGE_HEADER_MAX_BYTES)
            s->over = OVER_HEADER;
        if (s->over)
            snprintf(s->why, sizeof(s->why), "over a limit");
    }
    if (s->over || rc < 0) {
        if (a)
            archive_set_error(a, EIO, "%s", s->why);
        return -1;
    }
    crypto_hash_sha256_update(&s->sha, *out, len);
    return (la_ssize_t)len;
}

static void stream_release(struct hashed_stream *s)
{
    if (s->xz) {
        lzma_end(&s->xz->z);
        free(s->xz);
        s->xz = NULL;
    }
}

/* One extraction (or scan, or hash): the layer root, the stream, where
 * errors point, the budget it charges, and the directories whose times are
 * set last (their contents change them). */
struct unpack {
    int root;
    unsigned flags;
    const char *file, *what;
    const char *entry;
    struct image_budget *budget;
    struct hashed_stream s;
    uint64_t written, next_free_check;
    struct dir_time {
        char *path;
        struct timespec ts[2];
    } * dirs;
    size_t n_dirs, cap_dirs, dirs_bytes;
    uint64_t skipped;
    char first_skipped[160];
    bool has_entry; /* an entry's header was read */
    bool scanning;  /* image_layer_scan(): telling the format */
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
    return sl_fail(u->err, SL_E_UNPROCESSABLE, "bad_image", "import '%s': %s, entry '%.160s': %s",
                   u->file, u->what, u->entry, why);
}

static int entry_fail_errno(struct unpack *u, const char *action)
{
    int e = errno;
    int rc = entry_fail(u, "unable to %s: %s", action, strerror(e));
    u->err->sys_errno = e;
    return rc;
}

static int limit_fail(struct unpack *u, const char *option, uint64_t value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Over one of the image's limits: what was exceeded, the option that sets
 * it (and its value), and what to do. */
static int limit_fail(struct unpack *u, const char *option, uint64_t value, const char *fmt, ...)
{
    char why[200], at[200] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (u->entry && u->entry[0])
        snprintf(at, sizeof(at), ", entry '%.120s'", u->entry);
    if (strcmp(option, "images.min_free_bytes") == 0)
        return sl_fail(u->err, SL_E_TOO_LARGE, "image_limit",
                       "import '%s': %s%s: %s (%s = %llu); nothing was kept: free space on the "
                       "node and import it again",
                       u->file, u->what, at, why, option, (unsigned long long)value);
    return sl_fail(u->err, SL_E_TOO_LARGE, "image_limit",
                   "import '%s': %s%s: %s (%s = %llu): refused as a likely archive bomb, nothing "
                   "was kept; if the image is genuine, raise %s in the agent's configuration and "
                   "import it again",
                   u->file, u->what, at, why, option, (unsigned long long)value, option);
}

/* The failure of a libarchive call: a limit the stream hit, else the
 * archive's own error (damage). */
static int stream_fail(struct unpack *u, struct archive *a, const char *stage)
{
    char n[32], m[32];
    const struct image_limits *lim = &u->budget->limits;
    if (u->s.over == OVER_BYTES)
        return limit_fail(u, "images.max_bytes", lim->max_bytes,
                          "the image unpacks to more than %s", human(lim->max_bytes, n));
    if (u->s.over == OVER_HEADER)
        return sl_fail(u->err, SL_E_TOO_LARGE, "image_limit",
                       "import '%s': %s, %s: an entry's headers (pax, long names, a sparse "
                       "file's map) take more than %s, which no real archive needs: refused as "
                       "hostile, nothing was kept (this limit is not configurable)",
                       u->file, u->what, stage, human(IMAGE_HEADER_MAX_BYTES, n));
    if (u->s.over == OVER_XZ_MEMORY)
        return sl_fail(u->err, SL_E_TOO_LARGE, "image_limit",
                       "import '%s': %s: its xz stream needs %s of memory to decompress, more "
                       "than the %s allowed (xz -9 needs 65 MiB): refused, nothing was kept; "
                       "recompress it with a smaller dictionary (this limit is not configurable)",
                       u->file, u->what, human(u->s.xz_memory, n), human(IMAGE_XZ_MEMLIMIT, m));
    const char *why = u->s.why[0] ? u->s.why : a ? archive_error_string(a) : NULL;
    if (u->scanning)
        return sl_fail(u->err, SL_E_UNPROCESSABLE, "bad_image",
                       "import '%s': not a readable tar archive (a rootfs tarball, plain, gzip, "
                       "zstd, xz or bzip2; a docker save tarball; or an OCI layout), %.200s: %s; "
                       "if it is one, it is damaged or incomplete: copy it again and retry",
                       u->file, stage, why ? why : "unreadable");
    return sl_fail(u->err, SL_E_UNPROCESSABLE, "bad_image", "import '%s': %s, %.200s: %s; %s",
                   u->file, u->what, stage, why ? why : "unreadable", retry_hint);
}

static int check_free(struct unpack *u)
{
    struct statvfs st;
    uint64_t min = u->budget->limits.min_free_bytes;
    u->next_free_check = u->written + FREE_CHECK_BYTES;
    if (min == 0 || fstatvfs(u->root, &st) < 0)
        return 0;
    uint64_t avail = (uint64_t)st.f_bavail * st.f_frsize;
    char a[32], m[32];
    if (avail < min)
        return limit_fail(u, "images.min_free_bytes", min,
                          "the data directory's file system has %s free, less than the %s it "
                          "keeps free",
                          human(avail, a), human(min, m));
    return 0;
}

/* Normalises an archive path into out: "./a//b/" is "a/b", "." is "".
 * Absolute paths and ".." components are refused: they could only be meant
 * to reach outside the layer. So is a path deeper than images.max_path_depth
 * (each component costs a walk) or longer than PATH_MAX. */
static int clean_path(struct unpack *u, const char *name, char *out, size_t out_len)
{
    if (name[0] == '/')
        return entry_fail(u, "absolute path '%.160s' refused: layers hold relative paths only",
                          name);
    size_t n = 0;
    uint64_t depth = 0, max_depth = u->budget->limits.max_path_depth;
    const char *p = name;
    while (*p) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return entry_fail(u, "path '%.160s' has a '..' component, refused", name);
        if (len > 0 && !(len == 1 && p[0] == '.')) {
            if (++depth > max_depth)
                return limit_fail(u, "images.max_path_depth", max_depth,
                                  "a path more than %llu directories deep",
                                  (unsigned long long)max_depth);
            if (n + len + 2 > out_len)
                return entry_fail(u, "path longer than %zu bytes, refused", out_len - 1);
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
 * `create`; *leaf points into path at the last component. O_DIRECTORY fails
 * on anything but a directory before it is opened: a fifo or a device on
 * the way is never opened, a symlink never followed. */
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
            /* a directory the archive does not list: 0755 whatever the
             * agent's umask (077, lib/private.h) */
            if (mkdirat(fd, p, 0755) == 0)
                fchmodat(fd, p, 0755, 0);
            else if (errno != EEXIST) {
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
                                      "'%.160s' is a symlink or not a directory: nothing is "
                                      "extracted through it",
                                      path)
                     : e == ENOENT
                         ? entry_fail(u, "'%.160s' is not in this layer", path)
                         : entry_fail(u, "unable to open '%.160s': %s", path, strerror(e));
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
 * earlier one, as tar does. The earlier one (a symlink, a hard link, a fifo)
 * is unlinked, never opened or written through. */
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
        /* a dataset keeps its user.* attributes only: no file capabilities */
        if ((u->flags & IMAGE_LAYER_DATASET) && strncmp(name, "user.", 5) != 0)
            continue;
        if (fsetxattr(fd, name, value, len, 0) < 0 && errno != ENOTSUP)
            return entry_fail(u, "unable to set xattr '%.64s': %s", name, strerror(errno));
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
    mode_t keep = (u->flags & IMAGE_LAYER_DATASET) ? 01777 : 07777; /* a dataset: no set-id */
    if (fchmod(fd, archive_entry_perm(e) & keep) < 0)
        return entry_fail_errno(u, "set the mode");
    if (set_xattrs(u, fd, e) < 0)
        return -1;
    struct timespec ts[2];
    entry_times(e, ts);
    if (times && futimens(fd, ts) < 0)
        return entry_fail_errno(u, "set the times");
    return 0;
}

/* A regular file, created anew (O_EXCL | O_NOFOLLOW after whatever held the
 * name was unlinked: nothing earlier is written through) and bounded as its
 * bytes arrive: the size a header claims is checked first, but a sparse
 * file's blocks can land past it, so every block's end is checked too. */
static int write_file(struct unpack *u, struct archive *a, int dir, const char *leaf,
                      struct archive_entry *e)
{
    uint64_t max = u->budget->limits.max_file_bytes;
    char n1[32], n2[32];
    la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (size < 0)
        return entry_fail(u, "a negative size; %s", retry_hint);
    if ((uint64_t)size > max)
        return limit_fail(u, "images.max_file_bytes", max, "a file of %s, larger than %s",
                          human((uint64_t)size, n1), human(max, n2));
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
            return stream_fail(u, a, "reading the file");
        if (offset < 0 || (uint64_t)offset > max || len > max - (uint64_t)offset)
            return limit_fail(u, "images.max_file_bytes", max,
                              "a file that grows past %s (its header said %s)", human(max, n1),
                              human((uint64_t)size, n2));
        if (u->written + len >= u->next_free_check && check_free(u) < 0)
            return -1;
        u->written += len;
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
    if (archive_entry_size_is_set(e) && ftruncate(fd, (off_t)size) < 0)
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
    size_t cost = sizeof(*u->dirs) + strlen(path) + 1;
    if (u->dirs_bytes + cost > DIR_TIMES_MAX_BYTES) {
        struct timespec ts[2];
        entry_times(e, ts);
        if (futimens(fd, ts) < 0)
            return entry_fail_errno(u, "set the times");
        return 0;
    }
    if (u->n_dirs == u->cap_dirs) {
        u->cap_dirs = u->cap_dirs ? 2 * u->cap_dirs : 64;
        u->dirs = xrealloc(u->dirs, u->cap_dirs * sizeof(*u->dirs));
    }
    u->dirs_bytes += cost;
    u->dirs[u->n_dirs].path = xstrdup(path);
    entry_times(e, u->dirs[u->n_dirs++].ts);
    return 0;
}

/* Symlinks, fifos and whiteouts (0/0 character devices): made by name in
 * their parent, which is ours, and never opened (a symlink is never
 * followed). */
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
        dev_t rdev = type == AE_IFCHR ? makedev(0, 0) : 0;
        if (mknodat(dir, leaf, type | 0600, rdev) < 0)
            return entry_fail_errno(u, "make the node");
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
 * and no symlink on the way is followed; and it must be a file, a symlink or
 * a fifo this layer made. */
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
    struct stat st;
    if (fstatat(tdir, tleaf, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return entry_fail(u, "hard link target '%.160s' is not in this layer", target);
        return entry_fail_errno(u, "look at the hard link's target");
    }
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISFIFO(st.st_mode))
        return entry_fail(u, "hard link to '%.160s', which is not a file, refused", target);
    if (remove_leaf(u, dir, leaf) < 0)
        return -1;
    if (linkat(tdir, tleaf, dir, leaf, 0) < 0)
        return entry_fail_errno(u, "make the hard link");
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

/* Device nodes and sockets are not extracted: a node in a layer is a node
 * on the host's file system (DATA is not mounted nodev), where a host
 * process could open it, and inside an instance it is useless (the overlay
 * is nodev, runc makes /dev). Counted, and the first one named, for the
 * log. */
static int skip_entry(struct unpack *u, struct archive_entry *e, const char *kind)
{
    if (u->skipped++ == 0) {
        dev_t rdev = archive_entry_rdev(e);
        snprintf(u->first_skipped, sizeof(u->first_skipped), "%s '%.100s' %u:%u", kind, u->entry,
                 major(rdev), minor(rdev));
    }
    u->budget->skipped++;
    return 0;
}

/* A dataset's symlink must stay inside the dataset, read as written: an
 * absolute target, or one whose ".." climb above the tree's top from where
 * the link is, fails the entry. (Inside an instance a link resolves in the
 * instance's own root anyway; this keeps the tree closed for host code too.)
 * True when it failed. */
static bool symlink_escapes(struct unpack *u, const char *path, struct archive_entry *e)
{
    const char *target = archive_entry_symlink_utf8(e);
    if (!target)
        target = archive_entry_symlink(e);
    if (!target || !target[0])
        return false; /* make_node refuses it */
    if (target[0] == '/') {
        entry_fail(u,
                   "symlink to the absolute path '%.160s' refused: a dataset's links stay "
                   "inside it (make it relative)",
                   target);
        return true;
    }
    long depth = 0;
    for (const char *p = path; *p; p++)
        depth += *p == '/';
    for (const char *p = target; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0) {
                entry_fail(u, "symlink to '%.160s' leaves the dataset, refused", target);
                return true;
            }
        } else if (len > 0 && !(len == 1 && p[0] == '.')) {
            depth++;
        }
        p += len;
        while (*p == '/')
            p++;
    }
    return false;
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
    /* decided from the header alone, before anything is made */
    if (!hardlink) {
        if ((u->flags & IMAGE_LAYER_DATASET) && (type == AE_IFIFO || type == AE_IFCHR))
            return skip_entry(u, e, type == AE_IFIFO ? "fifo" : "character device");
        if ((u->flags & IMAGE_LAYER_DATASET) && type == AE_IFLNK && symlink_escapes(u, path, e))
            return -1;
        if ((type == AE_IFCHR && archive_entry_rdev(e) != makedev(0, 0)) || type == AE_IFBLK)
            return skip_entry(u, e, type == AE_IFCHR ? "character device" : "block device");
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO &&
            type != AE_IFCHR)
            return skip_entry(u, e, type == AE_IFSOCK ? "socket" : "entry of unknown type");
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
    default: /* symlink, fifo, whiteout */
        return make_node(u, dir, leaf, e);
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

/* The next entry's header, read with the stream counting header bytes, and
 * charged to the image's entries. 1: an entry, 0: the end, -1: failed. */
static int next_entry(struct unpack *u, struct archive *tar, struct archive_entry **e,
                      const char *after)
{
    /* what the previous entry left unread is data, not header */
    if (u->has_entry && archive_read_data_skip(tar) != ARCHIVE_OK)
        return stream_fail(u, tar, after);
    u->has_entry = false;
    /* libarchive reuses the entry: its name goes with the next header */
    u->entry = "";
    u->s.in_header = true;
    u->s.header_size = 0;
    int rc = archive_read_next_header(tar, e);
    u->s.in_header = false;
    if (rc == ARCHIVE_EOF)
        return 0;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
        return stream_fail(u, tar, after);
    u->entry = archive_entry_pathname_utf8(*e);
    if (!u->entry)
        u->entry = archive_entry_pathname(*e);
    if (!u->entry) {
        u->entry = "";
        return stream_fail(u, tar, "an entry without a name");
    }
    u->has_entry = true;
    uint64_t max = u->budget->limits.max_entries;
    if (++u->budget->entries > max)
        return limit_fail(u, "images.max_entries", max, "the image has more than %llu entries",
                          (unsigned long long)max);
    return 1;
}

static int unpack_stream(struct unpack *u, struct archive *tar)
{
    struct archive_entry *e;
    char after[200] = "at the start";
    int rc;
    while ((rc = next_entry(u, tar, &e, after)) > 0) {
        if (unpack_entry(u, tar, e) < 0)
            return -1;
        snprintf(after, sizeof(after), "after entry '%.160s'", u->entry);
    }
    return rc;
}

/* The decompressing reader under the tar reader: xz (ours, bounded), or
 * gzip, bzip2 or zstd (libarchive's), once. libarchive's other filters run
 * external programs (lrzip, lzop, grzip) or decode what no image is
 * (uuencode, rpm); and a compressed stream inside another is refused, as
 * nothing but a bomb needs it. */
static int open_raw(struct unpack *u, int fd, struct archive **raw)
{
    static const uint8_t xz_magic[6] = { 0xfd, '7', 'z', 'X', 'Z', 0 };
    uint8_t magic[6];
    off_t at = lseek(fd, 0, SEEK_CUR);
    u->s.max = u->budget->bytes < u->budget->limits.max_bytes
                   ? u->budget->limits.max_bytes - u->budget->bytes
                   : 0;
    crypto_hash_sha256_init(&u->s.sha);
    if (at >= 0 && pread(fd, magic, sizeof(magic), at) == (ssize_t)sizeof(magic) &&
        memcmp(magic, xz_magic, sizeof(magic)) == 0) {
        struct xz_source *x = xzalloc(sizeof(*x));
        x->fd = fd;
        x->z = (lzma_stream)LZMA_STREAM_INIT;
        if (lzma_stream_decoder(&x->z, IMAGE_XZ_MEMLIMIT, LZMA_CONCATENATED) != LZMA_OK) {
            free(x);
            return sl_fail(u->err, SL_E_INTERNAL, "internal",
                           "import '%s': unable to start an xz decoder", u->file);
        }
        u->s.xz = x;
        return 0;
    }
    *raw = archive_read_new();
    archive_read_support_filter_gzip(*raw);
    archive_read_support_filter_bzip2(*raw);
    archive_read_support_filter_zstd(*raw);
    archive_read_support_format_raw(*raw);
    struct archive_entry *e;
    if (archive_read_open_fd(*raw, fd, 1 << 16) != ARCHIVE_OK ||
        archive_read_next_header(*raw, &e) != ARCHIVE_OK)
        return stream_fail(u, *raw, "unable to read");
    if (archive_filter_count(*raw) > 2)
        return sl_fail(u->err, SL_E_UNPROCESSABLE, "bad_image",
                       "import '%s': %s is compressed more than once (%s inside %s): refused; "
                       "decompress it and import the result",
                       u->file, u->what, archive_filter_name(*raw, 1),
                       archive_filter_name(*raw, 0));
    u->s.raw = *raw;
    return 0;
}

/* open_raw() and a tar reader on its decompressed, counted bytes. */
static int open_tar(struct unpack *u, int fd, struct archive **raw, struct archive **tar)
{
    if (open_raw(u, fd, raw) < 0)
        return -1;
    *tar = archive_read_new();
    archive_read_support_format_tar(*tar);
    u->s.in_header = true;
    int rc = archive_read_open(*tar, &u->s, NULL, hashed_read, NULL);
    u->s.in_header = false;
    if (rc != ARCHIVE_OK)
        return stream_fail(u, *tar, "not a tar archive");
    return 0;
}

/* Reads the rest of the stream: the zero blocks after the end marker and
 * the compressed stream's trailer belong to the digest, a truncated one
 * fails here, and a bomb hidden after the end is still counted. */
static int read_to_end(struct unpack *u, struct archive *a)
{
    const void *out;
    la_ssize_t n;
    while ((n = hashed_read(a, &u->s, &out)) > 0)
        ;
    return n < 0 ? stream_fail(u, a, "at its end") : 0;
}

static void unpack_release(struct unpack *u)
{
    for (size_t i = 0; i < u->n_dirs; i++)
        free(u->dirs[i].path);
    free(u->dirs);
    if (u->root >= 0)
        close(u->root);
    stream_release(&u->s);
}

int image_layer_unpack(int fd, const char *dir, unsigned flags, const char *file, const char *what,
                       struct image_budget *budget, char digest[IMAGE_DIGEST_HEX], uint64_t *size,
                       struct sl_error *err)
{
    struct unpack u = {
        .flags = flags, .file = file, .what = what, .entry = "", .budget = budget, .err = err
    };
    u.root = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (u.root < 0)
        return sl_fail_errno(err, "unable to open '%s'", dir);
    cleanup_archive struct archive *raw = NULL;
    cleanup_archive struct archive *tar = NULL;
    int rc = -1;
    if (check_free(&u) < 0 || open_tar(&u, fd, &raw, &tar) < 0 || unpack_stream(&u, tar) < 0 ||
        set_dir_times(&u) < 0)
        goto out;
    u.entry = "";
    if (read_to_end(&u, tar) < 0)
        goto out;
    unsigned char bin[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&u.s.sha, bin);
    sodium_bin2hex(digest, IMAGE_DIGEST_HEX, bin, sizeof(bin));
    *size = u.s.size;
    rc = 0;
out:
    budget->bytes += u.s.size;
    if (u.skipped && (flags & IMAGE_LAYER_DATASET))
        log_warn("import '%s': %s: %llu device node%s, fifo%s or socket%s not extracted (the "
                 "first: %s): a dataset holds files, directories and links",
                 file, what, (unsigned long long)u.skipped, u.skipped == 1 ? "" : "s",
                 u.skipped == 1 ? "" : "s", u.skipped == 1 ? "" : "s", u.first_skipped);
    else if (u.skipped)
        log_warn("import '%s': %s: %llu device node%s or socket%s not extracted (the first: %s): "
                 "an image holds none, runc makes /dev",
                 file, what, (unsigned long long)u.skipped, u.skipped == 1 ? "" : "s",
                 u.skipped == 1 ? "" : "s", u.first_skipped);
    unpack_release(&u);
    return rc;
}

int image_layer_digest(int fd, const char *file, const struct image_budget *budget,
                       char digest[IMAGE_DIGEST_HEX], struct sl_error *err)
{
    struct image_budget b = *budget;
    struct unpack u = {
        .root = -1, .file = file, .what = "rootfs tarball", .entry = "", .budget = &b, .err = err
    };
    cleanup_archive struct archive *raw = NULL;
    int rc = open_raw(&u, fd, &raw) < 0 || read_to_end(&u, NULL) < 0 ? -1 : 0;
    if (rc == 0) {
        unsigned char bin[crypto_hash_sha256_BYTES];
        crypto_hash_sha256_final(&u.s.sha, bin);
        sodium_bin2hex(digest, IMAGE_DIGEST_HEX, bin, sizeof(bin));
    }
    unpack_release(&u);
    return rc;
}

int image_layer_scan(int fd, const char *file, const struct image_budget *budget,
                     int (*visit)(void *ctx, const char *name), void *ctx, struct sl_error *err)
{
    struct image_budget b = *budget;
    struct unpack u = { .root = -1,
                        .file = file,
                        .what = "the archive",
                        .entry = "",
                        .budget = &b,
                        .scanning = true,
                        .err = err };
    cleanup_archive struct archive *raw = NULL;
    cleanup_archive struct archive *tar = NULL;
    struct archive_entry *e;
    char after[200] = "at the start";
    int rc = open_tar(&u, fd, &raw, &tar);
    while (rc >= 0 && (rc = next_entry(&u, tar, &e, after)) > 0) {
        if (visit(ctx, u.entry)) {
            rc = 0;
            break;
        }
        snprintf(after, sizeof(after), "after entry '%.160s'", u.entry);
    }
    /* the tar reader reads through the stream: it goes first */
    archive_read_free(TAKE_PTR(tar));
    unpack_release(&u);
    return rc < 0 ? -1 : 0;
}

static char *layers_tmp(const char *data_dir)
{
    return xasprintf("%s/layers/tmp", data_dir);
}

int image_layer_extract(const char *data_dir, int fd, unsigned flags, const char *file,
                        const char *what, struct image_budget *budget, struct image_layer *layer,
                        struct sl_error *err)
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
    if (mkdir(rootfs, 0755) < 0 || chmod(rootfs, 0755) < 0) {
        sl_fail_errno(err, "unable to make '%s'", rootfs);
        image_layer_discard(data_dir, layer);
        return -1;
    }
    if (image_layer_unpack(fd, rootfs, flags, file, what, budget, layer->digest, &layer->size_bytes,
                           err) < 0) {
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
        struct sl_error e = SL_ERROR_INIT;
        sl_error_warn(fs_remove_tree(layer->tmp, &e), &e, "discard an image layer");
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
    if (fs_mkdir_p(store, 0700, err) < 0 ||
        sl_file_write(meta_path, text, len + 1, 0600, 0, err) < 0)
        return -1;
    /* read-only, and the agent's alone (the rootfs inside keeps the image's modes) */
    if (chmod(layer->tmp, 0500) < 0)
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
