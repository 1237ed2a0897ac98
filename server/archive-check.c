#include "archive-check.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <lzma.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* As the hosts read it (node/image-import.c): manifest.json at most this
 * big, and past this many entries without a docker or OCI marker, a tar is a
 * root filesystem. */
#define MANIFEST_MAX (8u << 20)
#define SCAN_ENTRIES 4096
/* The entry names kept to check a manifest against: a docker save holds a
 * handful per layer. */
#define NAMES_MAX 65536
/* The memory an xz stream may ask for, as hosts allow it (node/image-layer.h:
 * libarchive's own xz reader sets no limit, and a header may ask for 4 GiB). */
#define XZ_MEMLIMIT (256u << 20)
/* The bytes one entry's headers may take (pax, long names, a sparse file's
 * map, which libarchive keeps in memory at up to eight times its size), as
 * hosts allow them (IMAGE_HEADER_MAX_BYTES). */
#define HEADER_MAX (4u << 20)
/* The bytes of entry names kept, whatever their number. */
#define NAMES_MAX_BYTES (16u << 20)
#define BLOCK           (1u << 16)

/* The decompressed stream under the tar reader: the file itself (a plain
 * tar, skipped through by seeking), libarchive's gzip, bzip2 or zstd reader
 * (format raw), or liblzma for xz. Every byte is counted as it comes, and so
 * are the bytes read for an entry's headers: a bomb or a hostile header
 * stops here, not after it has taken the time or the memory. */
struct stream {
    int fd;
    struct archive *raw; /* gzip, bzip2, zstd */
    lzma_stream *xz;
    bool xz_eof;
    uint8_t *in, *out;
    uint64_t bytes, max, header_bytes;
    bool in_header;
    enum {
        OVER_NONE,
        OVER_BYTES,
        OVER_HEADER
    } over;
};

static la_ssize_t xz_block(struct archive *a, struct stream *s)
{
    lzma_stream *z = s->xz;

    z->next_out = s->out;
    z->avail_out = BLOCK;
    while (z->avail_out == BLOCK) {
        if (z->avail_in == 0 && !s->xz_eof) {
            ssize_t n = read(s->fd, s->in, BLOCK);
            if (n < 0) {
                archive_set_error(a, errno, "unable to read: %s", strerror(errno));
                return -1;
            }
            s->xz_eof = n == 0;
            z->next_in = s->in;
            z->avail_in = (size_t)n;
        }
        lzma_ret rc = lzma_code(z, s->xz_eof ? LZMA_FINISH : LZMA_RUN);
        if (rc == LZMA_STREAM_END)
            break;
        if (rc != LZMA_OK) {
            archive_set_error(a, EIO, "%s",
                              rc == LZMA_MEMLIMIT_ERROR
                                  ? "its xz stream needs more than the 256 MiB of memory hosts "
                                    "allow to decompress it; recompress it with a smaller "
                                    "dictionary"
                              : rc == LZMA_BUF_ERROR ? "truncated xz input"
                                                     : "damaged xz input");
            return -1;
        }
    }
    return (la_ssize_t)(BLOCK - z->avail_out);
}

static la_ssize_t stream_read(struct archive *a, void *data, const void **out)
{
    struct stream *s = data;
    la_ssize_t n;

    if (s->xz) {
        n = xz_block(a, s);
    } else if (s->raw) {
        n = archive_read_data(s->raw, s->out, BLOCK);
        if (n < 0)
            archive_set_error(a, EIO, "%s",
                              archive_error_string(s->raw) ? archive_error_string(s->raw)
                                                           : "damaged compressed data");
    } else {
        n = read(s->fd, s->out, BLOCK);
        if (n < 0)
            archive_set_error(a, errno, "unable to read: %s", strerror(errno));
    }
    if (n <= 0)
        return n;
    s->bytes += (uint64_t)n;
    if (s->bytes > s->max)
        s->over = OVER_BYTES;
    else if (s->in_header && (s->header_bytes += (uint64_t)n) > HEADER_MAX)
        s->over = OVER_HEADER;
    if (s->over) {
        archive_set_error(a, EIO, "over a limit");
        return -1;
    }
    *out = s->out;
    return n;
}

/* A plain tar's data is skipped by seeking. */
static la_int64_t stream_skip(struct archive *a, void *data, la_int64_t request)
{
    struct stream *s = data;
    struct stat st;
    off_t at = lseek(s->fd, 0, SEEK_CUR);
    (void)a;

    if (s->raw || s->xz || at < 0 || fstat(s->fd, &st) < 0 || request <= 0)
        return 0;
    la_int64_t n = request < st.st_size - at ? request : st.st_size - at;
    if (n <= 0 || lseek(s->fd, (off_t)n, SEEK_CUR) < 0)
        return 0;
    return n;
}

/* Sets up s on fd by the file's first bytes: xz, another compression (the
 * raw reader tells which; twice is refused, as hosts refuse it), or plain. */
static int stream_open(struct stream *s, int fd, struct sl_error *err)
{
    static const uint8_t xz_magic[6] = { 0xfd, '7', 'z', 'X', 'Z', 0 };
    static const uint8_t gzip_magic[2] = { 0x1f, 0x8b }, zstd_magic[4] = { 0x28, 0xb5, 0x2f, 0xfd };
    uint8_t magic[6] = { 0 };
    ssize_t n = pread(fd, magic, sizeof(magic), 0);

    s->fd = fd;
    s->out = xmalloc(BLOCK);
    if (n == (ssize_t)sizeof(magic) && memcmp(magic, xz_magic, sizeof(magic)) == 0) {
        s->in = xmalloc(BLOCK);
        s->xz = xzalloc(sizeof(*s->xz));
        *s->xz = (lzma_stream)LZMA_STREAM_INIT;
        if (lzma_stream_decoder(s->xz, XZ_MEMLIMIT, LZMA_CONCATENATED) != LZMA_OK) {
            free(TAKE_PTR(s->xz));
            return sl_fail(err, SL_E_INTERNAL, "internal", "unable to start an xz decoder");
        }
        return 0;
    }
    if (!(n >= 2 && memcmp(magic, gzip_magic, 2) == 0) &&
        !(n >= 3 && memcmp(magic, "BZh", 3) == 0) && !(n >= 4 && memcmp(magic, zstd_magic, 4) == 0))
        return 0;
    struct archive_entry *e;
    s->raw = archive_read_new();
    archive_read_support_filter_gzip(s->raw);
    archive_read_support_filter_bzip2(s->raw);
    archive_read_support_filter_zstd(s->raw);
    archive_read_support_format_raw(s->raw);
    if (archive_read_open_fd(s->raw, fd, BLOCK) != ARCHIVE_OK ||
        archive_read_next_header(s->raw, &e) != ARCHIVE_OK)
        return sl_fail(err, SL_E_INVALID, "bad_archive",
                       "not a tar archive (give a rootfs tarball, plain or compressed with gzip, "
                       "zstd, xz or bzip2; a docker save tarball; or a tarred OCI layout): %s",
                       archive_error_string(s->raw) ? archive_error_string(s->raw) : "unreadable");
    if (archive_filter_count(s->raw) > 2)
        return sl_fail(err, SL_E_INVALID, "bad_archive",
                       "the archive is compressed more than once (%s inside %s): hosts refuse "
                       "it; decompress it and upload the result",
                       archive_filter_name(s->raw, 1), archive_filter_name(s->raw, 0));
    return 0;
}

static void stream_release(struct stream *s)
{
    if (s->raw)
        archive_read_free(s->raw);
    if (s->xz) {
        lzma_end(s->xz);
        free(s->xz);
    }
    free(s->in);
    free(s->out);
}

struct check {
    struct archive *a;
    const char *entry; /* the current entry, for messages */
    char after[200];   /* "in entry 'x'", "after entry 'x'": where damage was found */
    uint64_t entries, max_bytes;
    la_int64_t data_end; /* where the last entry's data (and padding) ended */
    bool docker, oci;
    json_t *names;     /* {name: true} of the entries, while all are kept */
    bool names_whole;  /* names holds every entry's */
    size_t names_size; /* their bytes */
    json_t *manifest;  /* manifest.json of a docker save */
    struct stream s;
    struct sl_error *err;
};

static int too_large(struct check *c)
{
    return sl_fail(c->err, SL_E_TOO_LARGE, "archive_too_large",
                   "the archive unpacks to more than %.1f GiB (images.max_unpacked_bytes = %llu): "
                   "refused as a likely archive bomb; if the image is genuine, raise "
                   "images.max_unpacked_bytes in suanlid's configuration and upload it again",
                   (double)c->max_bytes / (1u << 30), (unsigned long long)c->max_bytes);
}

static const char *strip_dot_slash(const char *name)
{
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    return name;
}

static int damaged(struct check *c)
{
    const char *why = archive_error_string(c->a);

    if (c->s.over == OVER_BYTES)
        return too_large(c);
    if (c->s.over == OVER_HEADER)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "entry headers %s (pax, long names, a sparse file's map) take more than "
                       "%u MiB, which no real archive needs: hosts refuse it as hostile",
                       c->after, HEADER_MAX >> 20);
    if (c->entries == 0)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "not a tar archive (give a rootfs tarball, plain or compressed with gzip, "
                       "zstd, xz or bzip2; a docker save tarball; or a tarred OCI layout): %s",
                       why ? why : "unreadable");
    return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                   "the archive is damaged or cut short, %s: %s: copy it again and upload it "
                   "again",
                   c->after, why ? why : "unreadable");
}

/* A path every host refuses (node/image-layer.c): absolute, or with a ".."
 * component. */
static int check_path(struct check *c, const char *what, const char *path)
{
    if (path[0] == '/')
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "entry '%.160s' %s the absolute path '%.160s': hosts refuse it, as it "
                       "could write outside the image; pack the files with relative paths "
                       "(tar -C DIR -cf FILE .)",
                       c->entry, what, path);
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                           "entry '%.160s' %s a path with a '..' component ('%.160s'): hosts "
                           "refuse it, as it could write outside the image",
                           c->entry, what, path);
        p += n;
        p += *p == '/';
    }
    return 0;
}

/* Reads manifest.json's data into c->manifest. */
static int read_manifest(struct check *c, struct archive_entry *e)
{
    la_int64_t size = archive_entry_size(e);

    if (size < 0 || (uint64_t)size > MANIFEST_MAX)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "manifest.json is over %u bytes: not a docker save", MANIFEST_MAX);
    cleanup_free char *buf = xmalloc((size_t)size + 1);
    size_t got = 0;
    while (got < (size_t)size) {
        la_ssize_t n = archive_read_data(c->a, buf + got, (size_t)size - got);
        if (n < 0)
            return damaged(c);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (archive_read_data_skip(c->a) != ARCHIVE_OK)
        return damaged(c);
    json_error_t jerr;
    json_decref(c->manifest);
    c->manifest = json_loadb(buf, got, 0, &jerr);
    if (!c->manifest)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "manifest.json is not valid JSON: %s (line %d)", jerr.text, jerr.line);
    return 0;
}

/* The data of the current entry: skipped (a seek in a plain tar; read and
 * counted in a compressed one, where a bomb hides). */
static int pass_data(struct check *c)
{
    return archive_read_data_skip(c->a) == ARCHIVE_OK ? 0 : damaged(c);
}

static int check_entry(struct check *c, struct archive_entry *e)
{
    const char *name = strip_dot_slash(c->entry);
    const char *link = archive_entry_hardlink(e);

    if (check_path(c, "has", c->entry) < 0 || (link && check_path(c, "links to", link) < 0))
        return -1;
    if (c->names) {
        c->docker |= strcmp(name, "manifest.json") == 0;
        c->oci |= strcmp(name, "oci-layout") == 0;
    }
    if (c->names && c->names_whole) {
        c->names_size += strlen(name);
        c->names_whole = json_object_size(c->names) < NAMES_MAX && c->names_size < NAMES_MAX_BYTES;
        if (c->names_whole)
            json_object_set_new(c->names, name, json_true());
    }
    /* as hosts tell them apart: a root filesystem, whatever comes later */
    if (c->entries == SCAN_ENTRIES && !c->docker && !c->oci) {
        json_decref(c->names);
        c->names = NULL;
    }
    if (c->names && strcmp(name, "manifest.json") == 0 && archive_entry_filetype(e) == AE_IFREG)
        return read_manifest(c, e);
    return pass_data(c);
}

/* What a docker save's manifest names is in the archive. */
static int check_manifest(struct check *c)
{
    json_t *m = json_array_get(c->manifest, 0);
    const char *config = json_string_value(json_object_get(m, "Config"));
    json_t *layers = json_object_get(m, "Layers");
    size_t i;
    json_t *l;

    if (!config || !json_is_array(layers) || json_array_size(layers) == 0)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "manifest.json names no Config and Layers: not a docker save tarball");
    if (!c->names_whole)
        return 0;
    if (!json_object_get(c->names, strip_dot_slash(config)))
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "manifest.json names the config '%.160s', which the archive does not "
                       "hold: it is incomplete; save the image again",
                       config);
    json_array_foreach(layers, i, l)
    {
        const char *path = json_string_value(l);
        if (!path || !json_object_get(c->names, strip_dot_slash(path)))
            return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                           "manifest.json names layer %zu ('%.160s'), which the archive does not "
                           "hold: it is incomplete; save the image again",
                           i + 1, path ? path : "(not a path)");
    }
    return 0;
}

static int check_run(struct check *c, int fd, enum archive_kind *kind)
{
    struct archive_entry *e;
    int rc;

    snprintf(c->after, sizeof(c->after), "at its start");
    c->s.max = c->max_bytes;
    if (stream_open(&c->s, fd, c->err) < 0)
        return -1;
    archive_read_support_format_tar(c->a);
    archive_read_set_callback_data(c->a, &c->s);
    archive_read_set_read_callback(c->a, stream_read);
    archive_read_set_skip_callback(c->a, stream_skip);
    c->s.in_header = true;
    rc = archive_read_open1(c->a);
    c->s.in_header = false;
    if (rc != ARCHIVE_OK)
        return damaged(c);
    for (;;) {
        c->s.in_header = true;
        c->s.header_bytes = 0;
        rc = archive_read_next_header(c->a, &e);
        c->s.in_header = false;
        if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
            break;
        c->entries++;
        c->entry = archive_entry_pathname(e);
        if (!c->entry)
            return damaged(c);
        snprintf(c->after, sizeof(c->after), "in entry '%.160s'", c->entry);
        if (check_entry(c, e) < 0)
            return -1;
        c->data_end = archive_filter_bytes(c->a, 0);
        snprintf(c->after, sizeof(c->after), "after entry '%.160s'", c->entry);
    }
    if (rc != ARCHIVE_EOF)
        return damaged(c);
    /* libarchive takes a tar that stops right after an entry, without the
     * zero blocks that end one: the cut hosts would not see */
    if (c->entries && archive_filter_bytes(c->a, 0) < c->data_end + 512)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "the archive is cut short %s: it ends without the blocks that end a tar "
                       "archive; copy it again and upload it again",
                       c->after);
    if (c->entries == 0)
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "the archive holds no files: give a rootfs tarball, a docker save "
                       "tarball or a tarred OCI layout");
    if (c->names && c->docker && check_manifest(c) < 0)
        return -1;
    if (c->names && !c->docker && c->oci && c->names_whole &&
        !json_object_get(c->names, "index.json"))
        return sl_fail(c->err, SL_E_INVALID, "bad_archive",
                       "the OCI layout has no index.json: it is incomplete; save it again");
    *kind = c->docker ? ARCHIVE_DOCKER : c->oci ? ARCHIVE_OCI : ARCHIVE_ROOTFS;
    return 0;
}

int archive_check(const char *path, uint64_t max_unpacked_bytes, enum archive_kind *kind,
                  struct sl_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s'", path);
    struct check c = {
        .a = archive_read_new(),
        .entry = "",
        .max_bytes = max_unpacked_bytes,
        .names = json_object(),
        .names_whole = true,
        .err = err,
    };
    int rc = check_run(&c, fd, kind);
    archive_read_free(c.a); /* the tar reader reads through the stream: it goes first */
    stream_release(&c.s);
    json_decref(c.names);
    json_decref(c.manifest);
    return rc;
}

const char *archive_kind_text(enum archive_kind kind)
{
    switch (kind) {
    case ARCHIVE_DOCKER:
        return "a docker save tarball";
    case ARCHIVE_OCI:
        return "a tarred OCI layout";
    case ARCHIVE_ROOTFS:
        break;
    }
    return "a root filesystem tarball";
}
