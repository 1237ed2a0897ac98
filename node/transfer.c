/* Disk copies between agents (transfer.h): the server of exported disks
 * and the client that copies a clone's disks, resumable and checked. */
#include "transfer.h"
#include "disk.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/file.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The disks, in the order they are copied: the system disk last, so that
 * its being in place means the copy is done. */
static const char *const disk_names[] = { "data.img", "system.img" };
#define N_DISKS (sizeof(disk_names) / sizeof(disk_names[0]))

/* Sync and record progress every this many blocks (64 MiB). */
#define PROGRESS_EVERY 16

/* ---- the server --------------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    json_t *exports; /* [{instance, token_sha256}], guarded by lock */
    struct MHD_Daemon *daemon;
    char *data_dir;
    unsigned port;
} srv = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* An instance id as suanlid makes them: "i-" and [0-9a-z]. */
static bool id_valid(const char *id)
{
    size_t n = strlen(id);

    if (n < 3 || n >= SL_ID_MAX || strncmp(id, "i-", 2) != 0)
        return false;
    for (size_t i = 2; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') || id[i] == '-'))
            return false;
    return true;
}

/* Whether the bearer token of authorization opens the export of id. Every
 * export is compared, in constant time, whatever matched before. */
static bool export_allows(const char *id, const char *authorization)
{
    char hash[SL_HASH_HEX_MAX];
    bool ok = false;
    size_t i;
    json_t *e;

    if (!authorization || strncmp(authorization, "Bearer ", 7) != 0 || !authorization[7])
        return false;
    sl_sha256_hex(authorization + 7, strlen(authorization + 7), hash);
    pthread_mutex_lock(&srv.lock);
    json_array_foreach(srv.exports, i, e)
    {
        const char *inst = json_string_value(json_object_get(e, "instance"));
        const char *want = json_string_value(json_object_get(e, "token_sha256"));
        bool same_token = want && sl_secret_equal(hash, want);
        if (same_token && inst && strcmp(inst, id) == 0)
            ok = true;
    }
    pthread_mutex_unlock(&srv.lock);
    return ok;
}

static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result fail(struct MHD_Connection *conn, unsigned status, const char *code,
                            const char *message)
{
    return reply_json(conn, status,
                      json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message));
}

/* Opens DATA/instances/ID/DISK read-only: no symbolic link followed on the
 * way (the instance's directory and the file), a regular file only. */
static int open_disk(const char *id, const char *disk, struct stat *st)
{
    cleanup_free char *base = xasprintf("%s/instances", srv.data_dir);
    cleanup_close int top = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (top < 0)
        return -1;
    cleanup_close int dir = openat(top, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return -1;
    int fd = openat(dir, disk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

/* A block's checksum: BLAKE2b-256 in hex (SL_HASH_HEX_MAX bytes), a
 * cryptographic hash four times as fast as libsodium's SHA-256 here (about
 * 1 GB/s against 230 MB/s), which a copy computes twice per byte. */
static void block_hash(const void *data, size_t len, char *hex)
{
    unsigned char h[32];

    crypto_generichash(h, sizeof(h), data, len, NULL, 0);
    sodium_bin2hex(hex, SL_HASH_HEX_MAX, h, sizeof(h));
}

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* One block: a hole or zeros go as "zero" with no body, and a hole says
 * how many blocks from this one are holes (X-Suanli-Blocks), so a sparse
 * disk's empty gigabytes take one request. */
static enum MHD_Result serve_block(struct MHD_Connection *conn, int fd, const struct stat *st,
                                   uint64_t block)
{
    uint64_t size = (uint64_t)st->st_size, off = block * TRANSFER_BLOCK_SIZE;
    if (off >= size)
        return fail(conn, 404, "no_such_block", "past the end of the disk");
    size_t len = (size_t)(size - off < TRANSFER_BLOCK_SIZE ? size - off : TRANSFER_BLOCK_SIZE);
    off_t data = lseek(fd, (off_t)off, SEEK_DATA);
    bool hole = (data < 0 && errno == ENXIO) || (data >= 0 && (uint64_t)data >= off + len);
    uint64_t holes = 1;
    if (hole) {
        uint64_t next_data = data < 0 ? size : (uint64_t)data;
        uint64_t end = next_data >= size ? (size + TRANSFER_BLOCK_SIZE - 1) / TRANSFER_BLOCK_SIZE
                                         : next_data / TRANSFER_BLOCK_SIZE;
        holes = end > block ? end - block : 1;
    }
    unsigned char *buf = NULL;
    if (!hole) {
        buf = xmalloc(len);
        size_t got = 0;
        while (got < len) {
            ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                free(buf);
                return fail(conn, 500, "read_failed", "unable to read the disk");
            }
            got += (size_t)n;
        }
        if (all_zero(buf, len)) {
            free(buf);
            buf = NULL;
            hole = true;
        }
    }
    struct MHD_Response *r;
    if (hole) {
        char n[24];
        snprintf(n, sizeof(n), "%llu", (unsigned long long)holes);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "X-Suanli-Block", "zero");
        MHD_add_response_header(r, "X-Suanli-Blocks", n);
    } else {
        char hash[SL_HASH_HEX_MAX];
        block_hash(buf, len, hash);
        r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(r, "X-Suanli-Block", "data");
        MHD_add_response_header(r, "X-Suanli-Blake2b", hash);
    }
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    static int started;
    (void)cls;
    (void)version;
    (void)upload_data;

    if (!*con_cls) {
        *con_cls = &started;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0)
        return fail(conn, 405, "method_not_allowed", "read exported disks with GET");
    /* /v1/exports/ID/DISK[/N] */
    char id[SL_ID_MAX], disk[16], rest[32] = "";
    const char *p = url;
    if (strncmp(p, "/v1/exports/", 12) != 0)
        return fail(conn, 403, "forbidden", "this endpoint serves exported disks only");
    p += 12;
    size_t n = strcspn(p, "/");
    if (n == 0 || n >= sizeof(id))
        return fail(conn, 403, "forbidden", "no such export");
    snprintf(id, sizeof(id), "%.*s", (int)n, p);
    p += n;
    if (*p++ != '/')
        return fail(conn, 403, "forbidden", "no such export");
    n = strcspn(p, "/");
    if (n == 0 || n >= sizeof(disk))
        return fail(conn, 403, "forbidden", "no such export");
    snprintf(disk, sizeof(disk), "%.*s", (int)n, p);
    p += n;
    if (*p == '/') {
        if (strlen(p + 1) >= sizeof(rest))
            return fail(conn, 403, "forbidden", "no such export");
        snprintf(rest, sizeof(rest), "%s", p + 1);
    }
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&srv.lock);
    bool known = srv.exports != NULL;
    pthread_mutex_unlock(&srv.lock);
    if (!known) /* an agent just started: it has not read its desired state yet */
        return fail(conn, 503, "starting", "this host is starting: try again in a moment");
    if (!id_valid(id) || !export_allows(id, auth))
        return fail(conn, 403, "forbidden",
                    "no export of that instance for this token: suanlid hands the token to the "
                    "clone's host only");
    /* the fixed names only: nothing of the request becomes a path */
    const char *name = NULL;
    for (size_t i = 0; i < N_DISKS; i++)
        if (strcmp(disk, disk_names[i]) == 0)
            name = disk_names[i];
    if (!name)
        return fail(conn, 404, "no_such_disk", "the disks are system.img and data.img");
    struct stat st;
    cleanup_close int fd = open_disk(id, name, &st);
    if (fd < 0)
        return fail(conn, 404, "no_such_disk", "the instance has no such disk on this host");
    if (!rest[0])
        return reply_json(conn, 200,
                          json_pack("{s:I, s:I}", "size", (json_int_t)st.st_size, "block_size",
                                    (json_int_t)TRANSFER_BLOCK_SIZE));
    char *end;
    errno = 0;
    unsigned long long block = strtoull(rest, &end, 10);
    if (errno || *end || rest[0] < '0' || rest[0] > '9')
        return fail(conn, 404, "no_such_block", "blocks are numbered from 0");
    return serve_block(conn, fd, &st, block);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    log_debug("transfer: %s", line);
}

void transfer_server_start(const char *data_dir, const char *address, unsigned port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int one = 1;

    if (!port)
        return;
    if (inet_pton(AF_INET, address, &sa.sin_addr) != 1) {
        log_warn("agent: disk copies not served: address '%s' is not IPv4", address);
        return;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
        log_warn("agent: disk copies not served: unable to listen on %s:%u (transfer.port): %s",
                 address, port, strerror(errno));
        close(fd);
        return;
    }
    free(srv.data_dir);
    srv.data_dir = xstrdup(data_dir);
    pthread_mutex_lock(&srv.lock);
    pthread_mutex_unlock(&srv.lock);
    srv.daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
        60u, MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 8u,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!srv.daemon) {
        log_warn("agent: disk copies not served: unable to start the server on %s:%u", address,
                 port);
        close(fd);
        return;
    }
    srv.port = port;
    log_info("agent: serving exported disks on %s:%u", address, port);
}

void transfer_server_stop(void)
{
    if (srv.daemon)
        MHD_stop_daemon(srv.daemon);
    srv.daemon = NULL;
    srv.port = 0;
    free(srv.data_dir);
    srv.data_dir = NULL;
    pthread_mutex_lock(&srv.lock);
    json_decref(srv.exports);
    srv.exports = NULL;
    pthread_mutex_unlock(&srv.lock);
}

unsigned transfer_server_port(void)
{
    return srv.port;
}

/* ---- the client ---------------------------------------------------------- */

struct fetch {
    CURL *curl;
    const char *url, *token;
    unsigned char *buf;
    size_t len, cap;
    char kind[16], hash[SL_HASH_HEX_MAX];
    uint64_t blocks;     /* a zero answer: how many blocks from the one asked */
    int64_t data_bytes;  /* data blocks fetched (holes not counted) */
    volatile bool *stop; /* another stream failed: give up too (may be NULL) */
};

static size_t on_body(char *data, size_t size, size_t n, void *p)
{
    struct fetch *f = p;
    size_t len = size * n;
    if (f->len + len > f->cap)
        return 0; /* more than a block: refused */
    memcpy(f->buf + f->len, data, len);
    f->len += len;
    return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *p)
{
    struct fetch *f = p;
    size_t len = size * n;
    char line[160];
    snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) - 1 ? len : sizeof(line) - 1),
             data);
    line[strcspn(line, "\r\n")] = '\0';
    if (strncasecmp(line, "X-Suanli-Block: ", 16) == 0)
        snprintf(f->kind, sizeof(f->kind), "%.15s", line + 16);
    else if (strncasecmp(line, "X-Suanli-Blake2b: ", 18) == 0)
        snprintf(f->hash, sizeof(f->hash), "%.64s", line + 18);
    else if (strncasecmp(line, "X-Suanli-Blocks: ", 17) == 0)
        f->blocks = strtoull(line + 17, NULL, 10);
    return len;
}

/* GETs url+path into f->buf: the HTTP status, or -1 when nothing came
 * back (err filled). */
static long fetch_get(struct fetch *f, const char *path, struct sl_error *err)
{
    cleanup_free char *url = xasprintf("%s%s", f->url, path);
    cleanup_free char *auth = xasprintf("Authorization: Bearer %s", f->token);
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    long status = 0;

    f->len = 0;
    f->blocks = 1;
    f->kind[0] = f->hash[0] = '\0';
    curl_easy_setopt(f->curl, CURLOPT_URL, url);
    curl_easy_setopt(f->curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(f->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(f->curl, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(f->curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(f->curl, CURLOPT_HEADERDATA, f);
    curl_easy_setopt(f->curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(f->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(f->curl, CURLOPT_LOW_SPEED_TIME, 20L);
    curl_easy_setopt(f->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(f->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(f->curl);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK)
        return sl_fail(err, SL_E_UNAVAILABLE, "unreachable", "%s: %s", url, curl_easy_strerror(rc));
    curl_easy_getinfo(f->curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* A request that keeps failing (no answer, 403, 5xx, a damaged block) for
 * retry_s fails; a disk the source lacks (404) fails at once. Returns 0
 * with the answer in f, -1 with err. */
static int fetch_retry(struct fetch *f, const char *path, int64_t retry_s, volatile bool *cancel,
                       bool (*check)(struct fetch *, void *), void *arg, struct sl_error *err)
{
    int64_t deadline = sl_time_mono_ms() + retry_s * SL_MSEC_PER_SEC;
    unsigned delay_ms = 200;

    for (;;) {
        if (*cancel || (f->stop && *f->stop))
            return sl_fail(err, SL_E_CONFLICT, "canceled", "the copy was canceled");
        long status = fetch_get(f, path, err);
        if (status == 200 && check(f, arg))
            return 0;
        /* refused: the source's agent may not have read its new desired
         * state yet (a clone just made, an agent just restarted), so a
         * refusal fails the copy only when it lasts */
        if (status == 403)
            sl_fail(err, SL_E_FORBIDDEN, "copy_refused",
                    "the source host refused the transfer token (the copy was withdrawn)");
        else if (status == 404)
            return sl_fail(err, SL_E_NOT_FOUND, "copy_source_gone",
                           "the source host no longer has the disk");
        else if (status > 0 && status != 200)
            sl_fail(err, SL_E_UNAVAILABLE, "copy_failed", "the source host answered %ld", status);
        else if (status == 200)
            sl_fail(err, SL_E_INVALID, "copy_damaged",
                    "a block arrived damaged (its checksum does not match) again and again");
        if (sl_time_mono_ms() >= deadline)
            return -1;
        usleep(delay_ms * SL_USEC_PER_MSEC);
        if (delay_ms < 5000)
            delay_ms *= 2;
    }
}

static bool info_ok(struct fetch *f, void *arg)
{
    int64_t *size = arg;
    json_error_t je;
    json_t *j = json_loadb((const char *)f->buf, f->len, 0, &je);
    json_int_t s = json_integer_value(json_object_get(j, "size"));
    json_int_t bs = json_integer_value(json_object_get(j, "block_size"));
    json_decref(j);
    /* no larger than a disk may be: a source cannot make this host hold more */
    if (s < 0 || s > (json_int_t)DISK_MAX_GIB << 30 || bs != TRANSFER_BLOCK_SIZE)
        return false;
    *size = s;
    return true;
}

struct block_check {
    size_t len;
};

/* A block as it should be: zero with no body, or data of the block's
 * length whose BLAKE2b matches its header. */
static bool block_ok(struct fetch *f, void *arg)
{
    struct block_check *b = arg;
    char hash[SL_HASH_HEX_MAX];

    if (strcmp(f->kind, "zero") == 0)
        return f->len == 0;
    if (strcmp(f->kind, "data") != 0 || f->len != b->len)
        return false;
    block_hash(f->buf, f->len, hash);
    if (sl_secret_equal(hash, f->hash))
        return true;
    log_warn("agent: copy: a block arrived damaged (blake2b %.12s, not %.12s): fetching it again",
             hash, f->hash);
    return false;
}

static int read_progress(const char *path, int64_t size)
{
    cleanup_free char *text = fs_read_file(path, 64, NULL, NULL);
    long long s = -1, next = 0;
    if (!text || sscanf(text, "%lld %lld", &s, &next) != 2 || s != size || next < 0)
        return 0;
    return (int)next;
}

static int write_progress(const char *path, int64_t size, uint64_t next, struct sl_error *err)
{
    char text[64];
    int n = snprintf(text, sizeof(text), "%lld %llu\n", (long long)size, (unsigned long long)next);
    return sl_file_write(path, text, (size_t)n, 0600, 0, err);
}

/* Removes the source's SSH host keys from the copied system disk's upper
 * directory (and the mark that they were made), so the clone makes its own
 * at its first boot (boot.c). The disk's tree is the renter's: every step
 * is opened without following a symbolic link, and unlinkat never follows
 * one. */
static int strip_host_keys(const char *system_img, const char *mountpoint, struct sl_error *err)
{
    if (disk_mount(system_img, mountpoint, err) < 0)
        return -1;
    int rc = 0;
    int fd = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    static const char *const steps[] = { "upper", "etc", "ssh" };
    for (size_t i = 0; fd >= 0 && i < sizeof(steps) / sizeof(steps[0]); i++) {
        int next = openat(fd, steps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = next;
    }
    if (fd >= 0) {
        DIR *d = fdopendir(fd);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (strncmp(e->d_name, "ssh_host_", 9) == 0 ||
                strcmp(e->d_name, ".suanli-host-keys") == 0) {
                if (unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
                    rc = sl_fail_errno(err, "unable to remove the source's host key '%s'",
                                       e->d_name);
            }
        }
        if (d)
            closedir(d);
        else
            close(fd);
    }
    struct sl_error e2 = SL_ERROR_INIT;
    if (disk_unmount(mountpoint, &e2) < 0 && rc == 0)
        rc = sl_fail(err, e2.kind, e2.code, "%s", e2.message);
    return rc;
}

/* Blocks fetched at once: while one stream waits for the network another
 * hashes and writes (the copy is bound by the CPU of both hosts as much as
 * by the link). */
#define COPY_STREAMS 3

/* One disk being copied by COPY_STREAMS streams. Blocks are claimed in
 * order; finished[] marks those written, and the progress file records the
 * first block not yet written (all before it are), synced first. */
struct disk_copy {
    pthread_mutex_t lock;
    const char *source, *name, *part, *progress;
    int fd;
    int64_t size, retry_s, data_bytes;
    uint64_t blocks, claim, contiguous, recorded;
    unsigned char *finished;
    volatile bool *cancel, stop;
    volatile int64_t *done;
    bool failed;
    struct sl_error err;
};

struct stream {
    struct disk_copy *c;
    struct fetch f;
};

static uint64_t block_len(const struct disk_copy *c, uint64_t b)
{
    uint64_t off = b * TRANSFER_BLOCK_SIZE;
    return (uint64_t)c->size - off < TRANSFER_BLOCK_SIZE ? (uint64_t)c->size - off
                                                         : TRANSFER_BLOCK_SIZE;
}

/* Under c->lock: the first error wins and stops the other streams. */
static void copy_failed(struct disk_copy *c, const struct sl_error *err)
{
    if (!c->failed) {
        c->failed = true;
        c->err = *err;
    }
    c->stop = true;
}

/* Writes what f holds for block b (a data block, or a run of holes from
 * it); step: the blocks it covers. */
static int write_block(struct disk_copy *c, struct fetch *f, uint64_t b, uint64_t *step,
                       struct sl_error *err)
{
    uint64_t off = b * TRANSFER_BLOCK_SIZE;

    /* a run of holes: as many blocks as the source says, within the disk */
    *step = strcmp(f->kind, "zero") == 0 && f->blocks > 1 ? f->blocks : 1;
    if (*step > c->blocks - b)
        *step = c->blocks - b;
    if (strcmp(f->kind, "data") == 0) {
        size_t w = 0;
        while (w < f->len) {
            ssize_t n = pwrite(c->fd, f->buf + w, f->len - w, (off_t)(off + w));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return sl_fail_errno(err, "unable to write '%s'", c->part);
            w += (size_t)n;
        }
        return 0;
    }
    uint64_t len = (uint64_t)c->size - off < *step * TRANSFER_BLOCK_SIZE
                       ? (uint64_t)c->size - off
                       : *step * TRANSFER_BLOCK_SIZE;
    /* a block written before a restart may hold data: a hole now */
    if (fallocate(c->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0 &&
        errno != EOPNOTSUPP)
        return sl_fail_errno(err, "unable to punch a hole in '%s'", c->part);
    return 0;
}

/* Under c->lock: blocks b..b+step-1 are written; counts the new ones and
 * records the progress every PROGRESS_EVERY blocks of it. */
static int blocks_written(struct disk_copy *c, uint64_t b, uint64_t step, bool data,
                          struct sl_error *err)
{
    for (uint64_t i = b; i < b + step; i++) {
        if (c->finished[i])
            continue;
        c->finished[i] = 1;
        *c->done += (int64_t)block_len(c, i);
        if (data)
            c->data_bytes += (int64_t)block_len(c, i);
    }
    if (c->claim < b + step)
        c->claim = b + step; /* a run of holes: nobody needs to ask for them */
    while (c->contiguous < c->blocks && c->finished[c->contiguous])
        c->contiguous++;
    if (c->contiguous - c->recorded < PROGRESS_EVERY && c->contiguous < c->blocks)
        return 0;
    if (fdatasync(c->fd) < 0)
        return sl_fail_errno(err, "unable to sync '%s'", c->part);
    if (write_progress(c->progress, c->size, c->contiguous, err) < 0)
        return -1;
    c->recorded = c->contiguous;
    return 0;
}

static void *stream_run(void *p)
{
    struct stream *s = p;
    struct disk_copy *c = s->c;
    struct sl_error err = SL_ERROR_INIT;

    for (;;) {
        pthread_mutex_lock(&c->lock);
        if (*c->cancel)
            c->stop = true;
        while (c->claim < c->blocks && c->finished[c->claim])
            c->claim++;
        if (c->stop || c->claim >= c->blocks) {
            pthread_mutex_unlock(&c->lock);
            return NULL;
        }
        uint64_t b = c->claim++, step = 1;
        pthread_mutex_unlock(&c->lock);

        struct block_check bc = { .len = (size_t)block_len(c, b) };
        char path[160];
        snprintf(path, sizeof(path), "/v1/exports/%s/%s/%llu", c->source, c->name,
                 (unsigned long long)b);
        int rc = fetch_retry(&s->f, path, c->retry_s, c->cancel, block_ok, &bc, &err);
        if (rc == 0)
            rc = write_block(c, &s->f, b, &step, &err);
        pthread_mutex_lock(&c->lock);
        if (rc == 0)
            rc = blocks_written(c, b, step, strcmp(s->f.kind, "data") == 0, &err);
        if (rc < 0)
            copy_failed(c, &err);
        pthread_mutex_unlock(&c->lock);
        if (rc < 0)
            return NULL;
    }
}

/* Copies one disk into dir/name (dir/name.part until it is whole). */
static int copy_disk(struct fetch *f, const char *dir, const char *source, const char *name,
                     int64_t size, int64_t retry_s, bool new_machine, volatile bool *cancel,
                     volatile int64_t *done, struct sl_error *err)
{
    cleanup_free char *final = xasprintf("%s/%s", dir, name);
    cleanup_free char *part = xasprintf("%s/%s.part", dir, name);
    cleanup_free char *progress = xasprintf("%s/%s.progress", dir, name);
    uint64_t blocks = ((uint64_t)size + TRANSFER_BLOCK_SIZE - 1) / TRANSFER_BLOCK_SIZE;
    uint64_t next = 0;

    if (access(final, F_OK) == 0) {
        *done += size;
        return 0;
    }
    cleanup_close int fd = open(part, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s'", part);
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size == size)
        next = (uint64_t)read_progress(progress, size);
    else if (ftruncate(fd, 0) < 0 || ftruncate(fd, size) < 0)
        return sl_fail_errno(err, "unable to size '%s'", part);
    if (next > blocks)
        next = 0;
    if (next > 0)
        log_info("agent: copy of %s/%s resumes at block %llu of %llu", source, name,
                 (unsigned long long)next, (unsigned long long)blocks);
    struct disk_copy c = { .source = source,
                           .name = name,
                           .part = part,
                           .progress = progress,
                           .fd = fd,
                           .size = size,
                           .retry_s = retry_s,
                           .blocks = blocks,
                           .claim = next,
                           .contiguous = next,
                           .recorded = next,
                           .finished = xcalloc(blocks ? blocks : 1, 1),
                           .cancel = cancel,
                           .done = done };
    pthread_mutex_init(&c.lock, NULL);
    memset(c.finished, 1, next);
    *done += (int64_t)(next * TRANSFER_BLOCK_SIZE < (uint64_t)size ? next * TRANSFER_BLOCK_SIZE
                                                                   : (uint64_t)size);
    struct stream streams[COPY_STREAMS];
    pthread_t threads[COPY_STREAMS];
    bool started[COPY_STREAMS] = { false };
    /* the first stream is the caller's connection; the others their own */
    for (size_t i = 0; i < COPY_STREAMS; i++) {
        streams[i] = (struct stream){ .c = &c, .f = *f };
        if (i > 0) {
            streams[i].f.curl = curl_easy_init();
            streams[i].f.buf = xmalloc(TRANSFER_BLOCK_SIZE);
        }
        streams[i].f.stop = &c.stop;
        if (streams[i].f.curl && pthread_create(&threads[i], NULL, stream_run, &streams[i]) == 0)
            started[i] = true;
    }
    for (size_t i = 0; i < COPY_STREAMS; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        if (i > 0) {
            if (streams[i].f.curl)
                curl_easy_cleanup(streams[i].f.curl);
            free(streams[i].f.buf);
        }
    }
    f->data_bytes += c.data_bytes;
    free(c.finished);
    pthread_mutex_destroy(&c.lock);
    if (c.failed) {
        *err = c.err;
        return -1;
    }
    if (c.contiguous < blocks)
        return sl_fail(err, SL_E_CONFLICT, "canceled", "the copy was canceled");
    if (fsync(fd) < 0)
        return sl_fail_errno(err, "unable to sync '%s'", part);
    /* a clone is a new machine; a moved instance (the same id) keeps its
     * host keys */
    if (new_machine && strcmp(name, "system.img") == 0) {
        cleanup_free char *mnt = xasprintf("%s/sys", dir);
        if (strip_host_keys(part, mnt, err) < 0)
            return -1;
    }
    if (rename(part, final) < 0)
        return sl_fail_errno(err, "unable to rename '%s'", part);
    unlink(progress);
    return sl_file_sync_dir(dir, err);
}

int transfer_copy(const char *data_dir, const char *id, const char *url, const char *token,
                  const char *source, int64_t retry_s, volatile bool *cancel,
                  volatile int64_t *done, volatile int64_t *total, struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/instances/%s", data_dir, id);
    volatile int64_t done_here = 0, total_here = 0;
    int64_t sizes[N_DISKS];
    int rc = -1;

    if (!done)
        done = &done_here;
    if (!total)
        total = &total_here;
    if (!id_valid(source) || strncmp(url, "http://", 7) != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_copy", "a copy_from that makes no sense");
    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    struct fetch f = { .curl = curl_easy_init(),
                       .url = url,
                       .token = token,
                       .buf = xmalloc(TRANSFER_BLOCK_SIZE),
                       .cap = TRANSFER_BLOCK_SIZE };
    if (!f.curl) {
        free(f.buf);
        return sl_fail(err, SL_E_INTERNAL, NULL, "unable to make a curl handle");
    }
    int64_t sum = 0;
    for (size_t i = 0; i < N_DISKS; i++) {
        char path[160];
        snprintf(path, sizeof(path), "/v1/exports/%s/%s", source, disk_names[i]);
        if (fetch_retry(&f, path, retry_s, cancel, info_ok, &sizes[i], err) < 0) {
            /* a source without a data disk */
            if (strcmp(err->code, "copy_source_gone") == 0 && i == 0) {
                sizes[i] = -1;
                continue;
            }
            goto out;
        }
        sum += sizes[i];
    }
    *total = sum;
    *done = 0;
    int64_t start = sl_time_mono_ms();
    for (size_t i = 0; i < N_DISKS; i++) {
        if (sizes[i] < 0)
            continue;
        if (copy_disk(&f, dir, source, disk_names[i], sizes[i], retry_s, strcmp(id, source) != 0,
                      cancel, done, err) < 0)
            goto out;
    }
    rc = 0;
    int64_t ms = sl_time_mono_ms() - start;
    /* what crossed the network: data blocks (holes and zeros are a header) */
    log_info("agent: copied the disks of %s into %s: %lld MiB of data (disks of %lld MiB) in "
             "%lld ms, %.1f MB/s of data",
             source, id, (long long)(f.data_bytes >> 20), (long long)(sum >> 20), (long long)ms,
             ms > 0 ? (double)f.data_bytes / 1e6 / ((double)ms / 1000.0) : 0.0);
out:
    curl_easy_cleanup(f.curl);
    free(f.buf);
    if (rc < 0)
        sl_error_prefix(err, "copy the disks of '%s'", source);
    return rc;
}

/* ---- the agent's jobs ----------------------------------------------------- */

struct job {
    char id[SL_ID_MAX];
    char *data_dir, *url, *token, *source;
    int64_t retry_s;
    volatile bool cancel, running;
    volatile int64_t done, total;
    bool failed;
    char message[512];
    struct job *next;
};

static struct {
    pthread_mutex_t lock;
    struct job *jobs;
} jobs = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct job *job_find(const char *id)
{
    for (struct job *j = jobs.jobs; j; j = j->next)
        if (strcmp(j->id, id) == 0)
            return j;
    return NULL;
}

/* Nothing half-made stays: the partial files of a failed copy go. */
static void remove_partial(const char *data_dir, const char *id)
{
    for (size_t i = 0; i < N_DISKS; i++) {
        cleanup_free char *part = xasprintf("%s/instances/%s/%s.part", data_dir, id, disk_names[i]);
        cleanup_free char *progress =
            xasprintf("%s/instances/%s/%s.progress", data_dir, id, disk_names[i]);
        cleanup_free char *final = xasprintf("%s/instances/%s/%s", data_dir, id, disk_names[i]);
        unlink(part);
        unlink(progress);
        unlink(final);
    }
    cleanup_free char *sys = xasprintf("%s/instances/%s/sys", data_dir, id);
    cleanup_free char *dir = xasprintf("%s/instances/%s", data_dir, id);
    rmdir(sys);
    rmdir(dir);
}

static void *copy_thread(void *p)
{
    struct job *j = p;
    struct sl_error err = SL_ERROR_INIT;
    int64_t start = sl_time_mono_ms();

    log_info("agent: copying the disks of %s into %s from %s", j->source, j->id, j->url);
    int rc = transfer_copy(j->data_dir, j->id, j->url, j->token, j->source, j->retry_s, &j->cancel,
                           &j->done, &j->total, &err);
    pthread_mutex_lock(&jobs.lock);
    if (rc < 0 && !j->cancel) {
        j->failed = true;
        snprintf(j->message, sizeof(j->message), "%s", err.message);
        log_error("agent: %s", err.message);
        remove_partial(j->data_dir, j->id);
    } else if (rc == 0) {
        log_info("agent: the copy into %s took %lld ms in all", j->id,
                 (long long)(sl_time_mono_ms() - start));
    }
    j->running = false;
    pthread_mutex_unlock(&jobs.lock);
    return NULL;
}

void transfer_sync(json_t *desired)
{
    json_t *exports = json_object_get(desired, "exports");

    /* a desired state without exports (the agent's placeholder before the
     * first one arrives) leaves them unknown: the server answers 503 */
    if (json_is_array(exports)) {
        pthread_mutex_lock(&srv.lock);
        json_decref(srv.exports);
        srv.exports = json_deep_copy(exports);
        pthread_mutex_unlock(&srv.lock);
    }

    /* copies no longer wanted stop; finished ones are forgotten */
    pthread_mutex_lock(&jobs.lock);
    for (struct job **pp = &jobs.jobs; *pp;) {
        struct job *j = *pp;
        bool wanted = false;
        size_t i;
        json_t *d;
        json_array_foreach(json_object_get(desired, "instances"), i, d)
        {
            const char *id = json_string_value(json_object_get(d, "id"));
            const char *want = json_string_value(json_object_get(d, "desired"));
            if (id && strcmp(id, j->id) == 0 && want &&
                (strcmp(want, "running") == 0 || strcmp(want, "stopped") == 0) &&
                json_object_get(d, "copy_from"))
                wanted = true;
        }
        if (!wanted)
            j->cancel = true;
        if (!wanted && !j->running) {
            *pp = j->next;
            free(j->data_dir);
            free(j->url);
            free(j->token);
            free(j->source);
            free(j);
            continue;
        }
        pp = &j->next;
    }
    pthread_mutex_unlock(&jobs.lock);
}

bool transfer_ready(const char *data_dir, json_t *d, int64_t retry_s)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    json_t *from = json_object_get(d, "copy_from");
    const char *url = json_string_value(json_object_get(from, "url"));
    const char *token = json_string_value(json_object_get(from, "token"));
    const char *source = json_string_value(json_object_get(from, "instance"));
    bool ready = false;

    if (!id || !url || !token || !source)
        return false;
    cleanup_free char *system = xasprintf("%s/instances/%s/system.img", data_dir, id);
    pthread_mutex_lock(&jobs.lock);
    struct job *j = job_find(id);
    if (j && (j->running || j->failed))
        goto out;
    if (access(system, F_OK) == 0) {
        ready = true; /* the system disk goes into place last */
        goto out;
    }
    /* suanlid saw the copy fail: never make it empty disks instead */
    if (json_is_true(json_object_get(from, "failed")))
        goto out;
    if (!j) {
        j = xzalloc(sizeof(*j));
        snprintf(j->id, sizeof(j->id), "%s", id);
        j->next = jobs.jobs;
        jobs.jobs = j;
    }
    free(j->data_dir);
    free(j->url);
    free(j->token);
    free(j->source);
    j->data_dir = xstrdup(data_dir);
    j->url = xstrdup(url);
    j->token = xstrdup(token);
    j->source = xstrdup(source);
    j->retry_s = retry_s;
    j->cancel = false;
    j->running = true;
    pthread_t t;
    if (pthread_create(&t, NULL, copy_thread, j) != 0) {
        j->running = false;
        j->failed = true;
        snprintf(j->message, sizeof(j->message), "unable to start the copy: %s", strerror(errno));
        goto out;
    }
    pthread_detach(t);
out:
    pthread_mutex_unlock(&jobs.lock);
    return ready;
}

void transfer_report(const char *data_dir, json_t *d, json_t *rep)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    json_t *from = json_object_get(d, "copy_from");

    if (!id || !from)
        return;
    cleanup_free char *system = xasprintf("%s/instances/%s/system.img", data_dir, id);
    pthread_mutex_lock(&jobs.lock);
    struct job *j = job_find(id);
    if (j && j->running) {
        json_object_set_new(rep, "copy",
                            json_pack("{s:I, s:I}", "bytes_done", (json_int_t)j->done,
                                      "bytes_total", (json_int_t)j->total));
    } else if (j && j->failed) {
        json_object_set_new(rep, "state", json_string("failed"));
        json_object_set_new(rep, "message", json_string(j->message));
        json_object_del(rep, "oom_kills");
    } else if (access(system, F_OK) == 0) {
        /* the system disk goes into place last: the copy is whole */
        json_object_set_new(rep, "copy", json_pack("{s:b}", "done", 1));
    }
    pthread_mutex_unlock(&jobs.lock);
}
