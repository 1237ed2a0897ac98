/* server/archive-check.c: what suanlid refuses of an uploaded image archive
 * before any host fetches it. Archives are built here with libarchive's
 * writer: the formats hosts take, and damaged, cut short, hostile (paths out
 * of the image, a compression bomb, compression twice) and incomplete ones. */
#include "harness.h"

#include "../../server/archive-check.h"
#include "../../lib/cleanup.h"
#include "../../lib/xalloc.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <lzma.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define GIB (1ull << 30)

/* An entry: 'f' file (body; len bytes of zeros when body is NULL), 'd'
 * directory, 'h' hard link to body. */
struct ent {
    char type;
    const char *path;
    const char *body;
    size_t len;
};

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
        size_t len = x->type == 'f' ? (x->body ? strlen(x->body) : x->len) : 0;
        archive_entry_set_pathname(e, x->path);
        archive_entry_set_perm(e, 0644);
        if (x->type == 'd') {
            archive_entry_set_filetype(e, AE_IFDIR);
        } else if (x->type == 'h') {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_hardlink(e, x->body);
        } else {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_size(e, (la_int64_t)len);
        }
        archive_write_header(a, e);
        if (x->type == 'f' && x->body) {
            archive_write_data(a, x->body, len);
        } else if (x->type == 'f') {
            static char zeros[1 << 16];
            for (size_t done = 0; done < len; done += sizeof(zeros))
                archive_write_data(a, zeros,
                                   len - done < sizeof(zeros) ? len - done : sizeof(zeros));
        }
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    return path;
}

/* The first `keep` bytes of src, as a new file. */
static const char *cut(const char *src, const char *name, off_t keep)
{
    const char *path = test_path(name);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "head -c %lld '%s' > '%s'", (long long)keep, src, path);
    if (system(cmd) != 0)
        test_fail(__FILE__, __LINE__, "unable to cut '%s'", src);
    return path;
}

static off_t size_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

static int check(const char *path, uint64_t max, enum archive_kind *kind, struct sl_error *err)
{
    sl_error_clear(err);
    return archive_check(path, max, kind, err);
}

static const struct ent docker[] = {
    { 'f', "l1/layer.tar", NULL, 20480 },
    { 'f', "config.json", "{\"rootfs\": {\"diff_ids\": []}}", 0 },
    { 'f', "manifest.json", "[{\"Config\": \"config.json\", \"Layers\": [\"l1/layer.tar\"]}]", 0 },
};

TEST(archive_formats_hosts_take_pass)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind = ARCHIVE_OCI;
    const struct ent rootfs[] = {
        { 'd', "./", NULL, 0 },
        { 'd', "./etc", NULL, 0 },
        { 'f', "./etc/hostname", "box\n", 0 },
        { 'h', "./etc/alias", "./etc/hostname", 0 },
    };
    CHECK_EQ_INT(check(write_archive("root.tar", ARCHIVE_FILTER_NONE, rootfs, 4), GIB, &kind, &err),
                 0);
    CHECK_EQ_INT(kind, ARCHIVE_ROOTFS);
    CHECK_EQ_INT(check(write_archive("root.tgz", ARCHIVE_FILTER_GZIP, rootfs, 4), GIB, &kind, &err),
                 0);
    CHECK_EQ_INT(kind, ARCHIVE_ROOTFS);
    CHECK_EQ_INT(
        check(write_archive("root.tzst", ARCHIVE_FILTER_ZSTD, rootfs, 4), GIB, &kind, &err), 0);
    CHECK_EQ_INT(check(write_archive("root.txz", ARCHIVE_FILTER_XZ, rootfs, 4), GIB, &kind, &err),
                 0);
    CHECK_EQ_INT(
        check(write_archive("docker.tar", ARCHIVE_FILTER_NONE, docker, 3), GIB, &kind, &err), 0);
    CHECK_EQ_INT(kind, ARCHIVE_DOCKER);
    const struct ent oci[] = {
        { 'f', "oci-layout", "{\"imageLayoutVersion\": \"1.0.0\"}", 0 },
        { 'f', "index.json", "{\"manifests\": []}", 0 },
    };
    CHECK_EQ_INT(check(write_archive("oci.tar", ARCHIVE_FILTER_NONE, oci, 2), GIB, &kind, &err), 0);
    CHECK_EQ_INT(kind, ARCHIVE_OCI);
}

TEST(archive_cut_short_or_damaged_is_refused)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    const char *whole = write_archive("docker.tar", ARCHIVE_FILTER_NONE, docker, 3);
    /* in the middle of the layer's data */
    CHECK_EQ_INT(check(cut(whole, "half.tar", 512 + 10000), GIB, &kind, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_INVALID);
    CHECK_STR(err.code, "bad_archive");
    CHECK_CONTAINS(err.message, "cut short");
    /* right after the layer: the manifest never came */
    CHECK_EQ_INT(check(cut(whole, "nomanifest.tar", 512 + 20480), GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    const char *gz = write_archive("docker.tgz", ARCHIVE_FILTER_GZIP, docker, 3);
    CHECK_EQ_INT(check(cut(gz, "half.tgz", size_of(gz) / 2), GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    /* not an archive at all, and gzip of nothing sensible */
    const char *junk = test_write_file("junk.tar", "this is not an image archive, just text\n");
    CHECK_EQ_INT(check(junk, GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    CHECK_CONTAINS(err.message, "not a tar archive");
    const char *fake = test_path("fake.tgz");
    FILE *f = fopen(fake, "w");
    fwrite("\x1f\x8b\x08\x00", 1, 4, f);
    for (int i = 0; i < 4096; i++)
        fputc((int)(test_rand() & 0xff), f);
    fclose(f);
    CHECK_EQ_INT(check(fake, GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    /* an empty tar, and an empty file */
    CHECK_EQ_INT(
        check(write_archive("empty.tar", ARCHIVE_FILTER_NONE, docker, 0), GIB, &kind, &err), -1);
    CHECK_CONTAINS(err.message, "no files");
    CHECK_EQ_INT(check(test_write_file("zero", ""), GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
}

TEST(archive_incomplete_docker_save_is_refused)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    const struct ent missing[] = {
        { 'f', "l1/layer.tar", NULL, 1024 },
        { 'f', "config.json", "{}", 0 },
        { 'f', "manifest.json",
          "[{\"Config\": \"config.json\", \"Layers\": [\"l1/layer.tar\", \"l2/layer.tar\"]}]", 0 },
    };
    CHECK_EQ_INT(
        check(write_archive("missing.tar", ARCHIVE_FILTER_NONE, missing, 3), GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    CHECK_CONTAINS(err.message, "l2/layer.tar");
    const struct ent bad_json[] = {
        { 'f', "manifest.json", "[{\"Config\": ", 0 },
    };
    CHECK_EQ_INT(
        check(write_archive("badjson.tar", ARCHIVE_FILTER_NONE, bad_json, 1), GIB, &kind, &err),
        -1);
    CHECK_CONTAINS(err.message, "not valid JSON");
    const struct ent no_layers[] = {
        { 'f', "manifest.json", "[{\"Config\": \"c.json\"}]", 0 },
    };
    CHECK_EQ_INT(
        check(write_archive("nolayers.tar", ARCHIVE_FILTER_NONE, no_layers, 1), GIB, &kind, &err),
        -1);
    CHECK_CONTAINS(err.message, "no Config and Layers");
    const struct ent oci[] = {
        { 'f', "oci-layout", "{}", 0 },
    };
    CHECK_EQ_INT(check(write_archive("oci.tar", ARCHIVE_FILTER_NONE, oci, 1), GIB, &kind, &err),
                 -1);
    CHECK_CONTAINS(err.message, "index.json");
}

TEST(archive_paths_out_of_the_image_are_refused)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    const struct ent absolute[] = { { 'f', "/etc/cron.d/evil", "* * * * * root sh\n", 0 } };
    const struct ent dotdot[] = { { 'f', "etc/../../evil", "x", 0 } };
    const struct ent link[] = { { 'f', "a", "x", 0 }, { 'h', "b", "../../etc/shadow", 0 } };
    const struct ent fine[] = { { 'f', "a..b/..c", "x", 0 } };

    CHECK_EQ_INT(
        check(write_archive("abs.tar", ARCHIVE_FILTER_NONE, absolute, 1), GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    CHECK_CONTAINS(err.message, "absolute path");
    CHECK_EQ_INT(
        check(write_archive("dotdot.tar", ARCHIVE_FILTER_NONE, dotdot, 1), GIB, &kind, &err), -1);
    CHECK_CONTAINS(err.message, "'..'");
    CHECK_EQ_INT(check(write_archive("link.tar", ARCHIVE_FILTER_NONE, link, 2), GIB, &kind, &err),
                 -1);
    CHECK_CONTAINS(err.message, "links to");
    CHECK_EQ_INT(check(write_archive("fine.tar", ARCHIVE_FILTER_NONE, fine, 1), GIB, &kind, &err),
                 0);
}

TEST(archive_bomb_and_double_compression_are_refused)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    const struct ent bomb[] = { { 'f', "zero", NULL, 64u << 20 } };
    const char *gz = write_archive("bomb.tgz", ARCHIVE_FILTER_GZIP, bomb, 1);
    CHECK(size_of(gz) < (1 << 20));
    CHECK_EQ_INT(check(gz, 16u << 20, &kind, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_TOO_LARGE);
    CHECK_STR(err.code, "archive_too_large");
    CHECK_CONTAINS(err.message, "images.max_unpacked_bytes");
    CHECK_EQ_INT(check(gz, GIB, &kind, &err), 0);
    /* a plain tar is its own size: only the limit on uploads applies */
    const char *plain = write_archive("big.tar", ARCHIVE_FILTER_NONE, bomb, 1);
    CHECK_EQ_INT(check(plain, GIB, &kind, &err), 0);
    char cmd[1024];
    const char *twice = test_path("twice.tgz.gz");
    snprintf(cmd, sizeof(cmd), "gzip -c '%s' > '%s'", gz, twice);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(check(twice, GIB, &kind, &err), -1);
    CHECK_CONTAINS(err.message, "compressed more than once");
}

/* What GNU tar and Python's tarfile write (the tests' docker save) passes,
 * and GNU tar's output cut at any of a few places is refused. */
TEST(archive_real_writers_pass_and_their_cuts_fail)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    const char *dir = test_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%1$s/root/etc' && cp -r tests/unit '%1$s/root/src' && "
             "echo box > '%1$s/root/etc/hostname' && ln -s hostname '%1$s/root/etc/name' && "
             "tar -C '%1$s/root' --numeric-owner -cf '%1$s/gnu.tar' . && "
             "tar -C '%1$s/root' -czf '%1$s/gnu.tgz' . && "
             "python3 -c 'import tarfile,sys; t=tarfile.open(sys.argv[1],\"w\"); "
             "t.add(sys.argv[2], \"layer.tar\"); t.close()' '%1$s/py.tar' '%1$s/gnu.tar'",
             dir);
    if (!CHECK_EQ_INT(system(cmd), 0))
        return;
    const char *names[] = { "gnu.tar", "gnu.tgz", "py.tar" };
    for (size_t i = 0; i < 3; i++) {
        const char *path = test_path(names[i]);
        if (!CHECK_EQ_INT(check(path, GIB, &kind, &err), 0))
            fprintf(stderr, "%s: %s\n", names[i], err.message);
        off_t size = size_of(path);
        /* cuts at a block boundary and inside one, early and late */
        const off_t cuts[] = { 512, 4096, size / 3, size / 2 + 7, size - 10240 - 512 };
        for (size_t j = 0; j < ARRAY_SIZE(cuts); j++) {
            if (cuts[j] <= 0 || cuts[j] >= size)
                continue;
            char name[64];
            snprintf(name, sizeof(name), "cut-%zu-%zu", i, j);
            if (!CHECK_EQ_INT(check(cut(path, name, cuts[j]), GIB, &kind, &err), -1))
                fprintf(stderr, "%s cut at %lld passed\n", names[i], (long long)cuts[j]);
        }
    }
}

/* xz goes through liblzma with the hosts' memory limit and is counted as it
 * decodes: a bomb, a cut stream, and a header asking for a 4 GiB dictionary
 * (libarchive's xz reader would make as much resident). */
TEST(archive_xz_is_decoded_within_limits)
{
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    const struct ent bomb[] = { { 'f', "zero", NULL, 64u << 20 } };
    const char *xz = write_archive("bomb.txz", ARCHIVE_FILTER_XZ, bomb, 1);
    CHECK_EQ_INT(check(xz, GIB, &kind, &err), 0);
    CHECK_EQ_INT(check(xz, 16u << 20, &kind, &err), -1);
    CHECK_STR(err.code, "archive_too_large");
    CHECK_EQ_INT(check(cut(xz, "cut.txz", size_of(xz) - 100), GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");

    /* the first block's LZMA2 dictionary raised to 4 GiB, its CRC again */
    FILE *f = fopen(xz, "r+b");
    unsigned char h[64];
    if (!CHECK(f && fseek(f, 12, SEEK_SET) == 0 && fread(h, 1, sizeof(h), f) == sizeof(h)))
        return;
    size_t hsize = ((size_t)h[0] + 1) * 4, i = 2;
    if (h[1] & 0x40)
        while (h[i++] & 0x80)
            ;
    if (h[1] & 0x80)
        while (h[i++] & 0x80)
            ;
    if (!CHECK(h[i] == 0x21 && h[i + 1] == 1))
        return;
    h[i + 2] = 40;
    uint32_t crc = lzma_crc32(h, hsize - 4, 0);
    for (int k = 0; k < 4; k++)
        h[hsize - 4 + (size_t)k] = (unsigned char)(crc >> (8 * k));
    fseek(f, 12, SEEK_SET);
    fwrite(h, 1, hsize, f);
    fclose(f);
    CHECK_EQ_INT(check(xz, GIB, &kind, &err), -1);
    CHECK_STR(err.code, "bad_archive");
    CHECK_CONTAINS(err.message, "256 MiB of memory");
}

/* Archives written byte by byte, for what libarchive's writer will not
 * write: a raw stream (gzip'd) of hand-made tar blocks. */
struct raw_writer {
    struct archive *a;
    struct archive_entry *e;
};

static const char *raw_open(struct raw_writer *w, const char *name, int filter)
{
    const char *path = test_path(name);
    w->a = archive_write_new();
    archive_write_set_format_raw(w->a);
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

static void tar_header(struct raw_writer *w, const char *name, char type, uint64_t size)
{
    char h[512] = { 0 };
    snprintf(h, 100, "%s", name);
    snprintf(h + 100, 8, "%07o", 0644);
    snprintf(h + 108, 8, "%07o", 0);
    snprintf(h + 116, 8, "%07o", 0);
    snprintf(h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf(h + 136, 12, "%011o", 1700000000);
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

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* A sparse file's map of 20 million empty blocks: 80 MB of text, under
 * 1 MB gzip'd, which libarchive would keep as 20 million list nodes (~1 GB
 * of suanlid's memory). An entry's headers are bounded as hosts bound
 * them. */
TEST(archive_header_bomb_keeps_memory_bounded)
{
    struct raw_writer w;
    const char *path = raw_open(&w, "map-bomb.tar.gz", ARCHIVE_FILTER_GZIP);
    const char pax[] = "22 GNU.sparse.major=1\n22 GNU.sparse.minor=0\n21 GNU.sparse.name=f\n"
                       "25 GNU.sparse.realsize=0\n";
    tar_header(&w, "./PaxHeaders/x", 'x', sizeof(pax) - 1);
    raw_write(&w, pax, sizeof(pax) - 1);
    static const char zeros[1024];
    raw_write(&w, zeros, 512 - (sizeof(pax) - 1) % 512);
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
    for (uint64_t left = 4 * n; left > 0;) {
        size_t len = left < sizeof(chunk) ? (size_t)left : sizeof(chunk);
        raw_write(&w, chunk, len);
        left -= len;
    }
    raw_write(&w, zeros, (size_t)(map_len - ((uint64_t)head_len + 4 * n)));
    raw_write(&w, zeros, sizeof(zeros));
    raw_close(&w);
    CHECK(size_of(path) < (1 << 20));

    long before = max_rss_kib();
    struct sl_error err = SL_ERROR_INIT;
    enum archive_kind kind;
    if (CHECK_EQ_INT(check(path, GIB, &kind, &err), -1)) {
        CHECK_STR(err.code, "bad_archive");
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
}
