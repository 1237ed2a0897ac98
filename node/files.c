/* Files of the renter's storage, the node's half (files.h). */
#include "files.h"
#include "storage.h"
#include "terminal.h"
#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BODY_TIMEOUT_S 60 /* silence from the uploading client */
#define CHUNK          (256 * 1024)
#define PATH_MAX_BYTES 4096
#define NAME_MAX_BYTES 255

static void reply(int fd, const char *status, const char *type, const char *body)
{
    cleanup_free char *head =
        xasprintf("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                  "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                  "Connection: close\r\n\r\n",
                  status, type, strlen(body));
    if (!terminal_send_all(fd, head, strlen(head)) || !terminal_send_all(fd, body, strlen(body)))
        log_debug("files: unable to answer: %s", strerror(errno));
}

static void refuse(int fd, const char *status, const char *message)
{
    cleanup_free char *body = xasprintf("%s\n", message);
    reply(fd, status, "text/plain; charset=utf-8", body);
}

bool files_path_ok(const char *path, bool empty_ok)
{
    size_t n = strlen(path);

    if (n == 0)
        return empty_ok;
    if (n >= PATH_MAX_BYTES || path[0] == '/' || path[n - 1] == '/')
        return false;
    for (const char *p = path; *p;) {
        size_t k = strcspn(p, "/");
        if (k == 0 || k > NAME_MAX_BYTES || (k == 1 && p[0] == '.') ||
            (k == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        for (size_t i = 0; i < k; i++)
            if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
                return false;
        p += k + (p[k] == '/');
    }
    return true;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* suanlid's "/PATH", percent-encoded, into out (PATH_MAX_BYTES); false for
 * anything else (a %00 included). */
static bool decode_path(const char *in, char *out)
{
    size_t n = 0;

    if (in[0] != '/')
        return false;
    for (const char *p = in + 1; *p; p++) {
        char c = *p;
        if (c == '%') {
            int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
            if (lo < 0 || (hi | lo) == 0)
                return false;
            c = (char)(hi * 16 + lo);
            p += 2;
        }
        if (n + 1 >= PATH_MAX_BYTES)
            return false;
        out[n++] = c;
    }
    out[n] = '\0';
    return true;
}

/* path under root, never through a link, a magic link, a mount or "..". */
static int beneath(int root, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .mode = mode,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    return (int)syscall(SYS_openat2, root, *path ? path : ".", &how, sizeof(how));
}

/* The host directory bound at /root/storage in instance id, opened
 * O_PATH; -1 (and a reply sent) when there is none. */
static int storage_root(int fd, const char *data_dir, const char *id)
{
    cleanup_free char *config = xasprintf("%s/instances/%s/bundle/config.json", data_dir, id);
    json_error_t jerr;
    cleanup_json json_t *j = json_load_file(config, 0, &jerr);
    json_t *mounts = json_object_get(j, "mounts"), *m;
    size_t i;

    json_array_foreach(mounts, i, m)
    {
        const char *dest = json_string_value(json_object_get(m, "destination"));
        const char *source = json_string_value(json_object_get(m, "source"));
        if (!dest || !source || strcmp(dest, STORAGE_MOUNT) != 0 || source[0] != '/')
            continue;
        int root = open(source, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (root < 0) {
            log_warn("files: %s: unable to open '%s': %s", id, source, strerror(errno));
            refuse(fd, "503 Service Unavailable", "the storage is not ready on this host");
        }
        return root;
    }
    refuse(fd, "409 Conflict", "this instance has no file storage bound (start it again)");
    return -1;
}

/* A refusal for what openat2 said about the renter's path. */
static void refuse_open(int fd, int e)
{
    switch (e) {
    case ENOENT:
        refuse(fd, "404 Not Found", "no such file or folder in your storage");
        break;
    case ENOTDIR:
        refuse(fd, "409 Conflict", "a name on the way is not a folder");
        break;
    case ELOOP:
        refuse(fd, "403 Forbidden", "a symbolic link: links are not followed");
        break;
    case EXDEV:
        refuse(fd, "403 Forbidden", "the path leaves your storage");
        break;
    case EACCES:
    case EPERM:
        refuse(fd, "403 Forbidden", "not a file that can be read here");
        break;
    case ENAMETOOLONG:
        refuse(fd, "400 Bad Request", "the path is too long");
        break;
    default:
        refuse(fd, "500 Internal Server Error", strerror(e));
    }
}

static const char *type_of(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "link" : "other";
}

static void list(int fd, int root, const char *path)
{
    int dfd = beneath(root, path, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        refuse_open(fd, errno);
        return;
    }
    cleanup_dir DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        refuse(fd, "500 Internal Server Error", strerror(errno));
        return;
    }
    cleanup_json json_t *items = json_array();
    bool truncated = false;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            !files_path_ok(e->d_name, false) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (json_array_size(items) >= FILES_LIST_MAX) {
            truncated = true;
            break;
        }
        json_t *name = json_string(e->d_name); /* NULL: not UTF-8, left out */
        if (!name)
            continue;
        json_array_append_new(items, json_pack("{s:o, s:s, s:I, s:I}", "name", name, "type",
                                               type_of(st.st_mode), "size",
                                               (json_int_t)(S_ISREG(st.st_mode) ? st.st_size : 0),
                                               "mtime", (json_int_t)st.st_mtime));
    }
    cleanup_json json_t *j =
        json_pack("{s:s, s:O, s:b}", "path", path, "items", items, "truncated", truncated);
    cleanup_free char *body = j ? json_dumps(j, JSON_COMPACT) : xstrdup("{}");
    reply(fd, "200 OK", "application/json", body);
}

/* Content-Disposition for the path's last name: an ASCII fallback and the
 * name itself (RFC 6266, RFC 8187). */
static char *disposition(const char *path)
{
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    cleanup_buf struct sl_buf plain = SL_BUF_INIT, enc = SL_BUF_INIT;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        bool safe = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("._-", *p);
        sl_buf_addf(&plain, "%c", safe ? *p : '_');
        if (safe)
            sl_buf_addf(&enc, "%c", *p);
        else
            sl_buf_addf(&enc, "%%%02X", *p);
    }
    cleanup_free char *a = sl_buf_detach(&plain, NULL), *b = sl_buf_detach(&enc, NULL);
    return xasprintf("attachment; filename=\"%s\"; filename*=UTF-8''%s", a, b);
}

static void get(int fd, int root, const char *path)
{
    /* O_NONBLOCK: a fifo would otherwise wait for a writer before the
     * check below refuses it */
    cleanup_close int f = beneath(root, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
    struct stat st;

    if (f < 0) {
        refuse_open(fd, errno);
        return;
    }
    if (fstat(f, &st) < 0) {
        refuse(fd, "500 Internal Server Error", strerror(errno));
        return;
    }
    if (S_ISDIR(st.st_mode)) {
        refuse(fd, "409 Conflict", "a folder: list it, or download its files one by one");
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        refuse(fd, "403 Forbidden", "not a regular file: only files download");
        return;
    }
    cleanup_free char *cd = disposition(path);
    cleanup_free char *head = xasprintf(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %lld\r\n"
        "Content-Disposition: %s\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
        "Connection: close\r\n\r\n",
        (long long)st.st_size, cd);
    if (!terminal_send_all(fd, head, strlen(head)))
        return;
    off_t off = 0;
    while (off < st.st_size) {
        ssize_t n = sendfile(fd, f, &off, (size_t)(st.st_size - off));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) /* the client left, or the file shrank: the connection ends short */
            return;
    }
}

/* Reads and drops what is left of the body, so that nginx hears the
 * answer rather than a reset. */
static void drain(int fd, long long left, char *buf)
{
    while (left > 0) {
        ssize_t n = recv(fd, buf, left < CHUNK ? (size_t)left : CHUNK, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        left -= n;
    }
}

static void put(int fd, int root, const char *path, const char *head)
{
    char length[32], tmp[64], hex[17];
    cleanup_free char *parent = xstrdup(path);
    char *slash = strrchr(parent, '/');
    const char *name = slash ? slash + 1 : parent;

    if (slash)
        *slash = '\0';
    else
        parent[0] = '\0', name = path;
    if (!terminal_header(head, "Content-Length", length, sizeof(length)) || !*length ||
        strspn(length, "0123456789") != strlen(length) || strlen(length) > 18) {
        refuse(fd, "411 Length Required", "an upload needs a Content-Length");
        return;
    }
    long long want = strtoll(length, NULL, 10), have = 0;
    cleanup_free char *buf = xmalloc(CHUNK);
    struct timeval tv = { .tv_sec = BODY_TIMEOUT_S };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    /* a refusal reads the body first, so that nginx hears it */
    cleanup_close int pfd = beneath(root, parent, O_RDONLY | O_DIRECTORY, 0);
    if (pfd < 0) {
        int e = errno;
        drain(fd, want, buf);
        refuse_open(fd, e);
        return;
    }
    sl_random_hex(hex, 8);
    snprintf(tmp, sizeof(tmp), ".suanli-upload-%s", hex);
    cleanup_close int f =
        openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (f < 0) {
        int e = errno;
        drain(fd, want, buf);
        refuse_open(fd, e);
        return;
    }
    /* as root inside would write it: no user namespace maps it */
    if (fchown(f, 0, 0) < 0 || fchmod(f, 0644) < 0)
        log_warn("files: unable to set an upload's owner: %s", strerror(errno));
    int werr = 0;
    while (have < want) {
        long long left = want - have;
        ssize_t n = recv(fd, buf, left < CHUNK ? (size_t)left : CHUNK, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += n;
        for (ssize_t done = 0; done < n && !werr;) {
            ssize_t w = write(f, buf + done, (size_t)(n - done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                werr = errno;
            else
                done += w;
        }
        if (werr)
            break;
    }
    if (!werr && have == want && fsync(f) < 0)
        werr = errno;
    if (werr || have < want || renameat(pfd, tmp, pfd, name) < 0) {
        int e = werr ? werr : errno;
        unlinkat(pfd, tmp, 0);
        if (!werr && have < want) {
            log_info("files: an upload ended after %lld of %lld bytes", have, want);
            return; /* the client left: no one to answer */
        }
        drain(fd, want - have, buf);
        if (e == ENOSPC || e == EDQUOT)
            refuse(fd, "507 Insufficient Storage",
                   "your storage is full: this file does not fit in its quota; delete files or "
                   "upload a smaller one (nothing was kept)");
        else if (e == EISDIR || e == ENOTEMPTY || e == EEXIST)
            refuse(fd, "409 Conflict", "a folder has that name");
        else
            refuse(fd, "500 Internal Server Error", strerror(e));
        return;
    }
    cleanup_json json_t *j = json_pack("{s:s, s:I}", "path", path, "size", (json_int_t)have);
    cleanup_free char *body = j ? json_dumps(j, JSON_COMPACT) : xstrdup("{}");
    reply(fd, "201 Created", "application/json", body);
}

void files_serve(int fd, const char *head, const char *data_dir, const struct runtime *rt)
{
    char id[SL_ID_MAX], op[8], enc[3 * PATH_MAX_BYTES + 2], path[PATH_MAX_BYTES];
    bool is_put = strncmp(head, "PUT ", 4) == 0;
    struct sl_error err = SL_ERROR_INIT;

    if (!data_dir || !terminal_header(head, "X-Suanli-Files", id, sizeof(id)) ||
        !sl_id_valid(id, "i-") || !terminal_header(head, "X-Suanli-Files-Op", op, sizeof(op)) ||
        !terminal_header(head, "X-Suanli-Files-Path", enc, sizeof(enc)) ||
        !decode_path(enc, path)) {
        refuse(fd, "403 Forbidden", "no files named");
        return;
    }
    bool is_list = strcmp(op, "list") == 0;
    if (!(is_list || strcmp(op, "get") == 0 || strcmp(op, "put") == 0) ||
        is_put != (strcmp(op, "put") == 0) || !files_path_ok(path, is_list)) {
        refuse(fd, "400 Bad Request", "not an operation on files this host serves");
        return;
    }
    struct runtime_state st = { 0 };
    if (rt->ops->state(rt, id, &st, &err) < 0 || st.status != RUNTIME_RUNNING) {
        refuse(fd, "409 Conflict", "the instance is not running on this host");
        return;
    }
    cleanup_close int root = storage_root(fd, data_dir, id);
    if (root < 0)
        return;
    if (is_list)
        list(fd, root, path);
    else if (is_put)
        put(fd, root, path, head);
    else
        get(fd, root, path);
    log_info("files: %s %s of %s", op, path[0] ? path : "/", id);
}
