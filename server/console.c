/* The web console's files (console.h). */
#include "console.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ASSETS          "/assets/"
#define NAME_MAX_LEN    255
#define ASSET_PATH_MAX  1024
#define CACHE_IMMUTABLE "public, max-age=31536000, immutable"

const char console_security_headers[] =
    "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self' "
    "'unsafe-inline'; img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Referrer-Policy: same-origin\r\n"
    "X-Frame-Options: DENY\r\n";

static const char page_not_built[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    "<title>suanli: console not built</title></head><body>\n"
    "<h1>The web console is not built</h1>\n"
    "<p>suanlid serves the console from its <code>console.dir</code> directory (by default "
    "<code>console/</code> beside the suanlid binary), which holds no <code>index.html</code>. "
    "Build it with <code>make console</code> (it needs Node.js and npm: "
    "<code>scripts/deps.sh</code> installs them), or point <code>console.dir</code> at a built "
    "one. The API at <code>/v1/</code> works without it.</p>\n"
    "</body></html>\n";
static const char page_not_found[] = "<!doctype html>\n<html lang=\"en\"><head><meta "
                                     "charset=\"utf-8\"><title>not found</title></head>"
                                     "<body><p>No such file.</p></body></html>\n";
static const char page_method[] = "<!doctype html>\n<html lang=\"en\"><head><meta "
                                  "charset=\"utf-8\"><title>method not allowed</title></head>"
                                  "<body><p>The console's pages answer GET and HEAD only; the "
                                  "API is under /v1/.</p></body></html>\n";
static const char page_too_long[] = "<!doctype html>\n<html lang=\"en\"><head><meta "
                                    "charset=\"utf-8\"><title>path too long</title></head>"
                                    "<body><p>The path is too long.</p></body></html>\n";

static const struct {
    const char *ext;
    const char *type;
} content_types[] = {
    { "js", "text/javascript; charset=utf-8" },
    { "mjs", "text/javascript; charset=utf-8" },
    { "css", "text/css; charset=utf-8" },
    { "html", "text/html; charset=utf-8" },
    { "json", "application/json" },
    { "map", "application/json" },
    { "txt", "text/plain; charset=utf-8" },
    { "svg", "image/svg+xml" },
    { "png", "image/png" },
    { "jpg", "image/jpeg" },
    { "jpeg", "image/jpeg" },
    { "gif", "image/gif" },
    { "webp", "image/webp" },
    { "ico", "image/x-icon" },
    { "woff2", "font/woff2" },
    { "woff", "font/woff" },
    { "ttf", "font/ttf" },
    { "wasm", "application/wasm" },
    { "gz", "application/gzip" },
};

bool console_owns_path(const char *path)
{
    if (strcmp(path, "/healthz") == 0 || strcmp(path, "/metrics") == 0)
        return false;
    /* /v1, /v1/..., and /v1?... never reach index.html */
    return !(strncmp(path, "/v1", 3) == 0 && (path[3] == '\0' || path[3] == '/'));
}

char *console_default_dir(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    return xasprintf("%s/console", exe);
}

static const char *type_of(const char *name)
{
    const char *dot = strrchr(name, '.');

    if (dot)
        for (size_t i = 0; i < sizeof(content_types) / sizeof(content_types[0]); i++)
            if (strcasecmp(dot + 1, content_types[i].ext) == 0)
                return content_types[i].type;
    return "application/octet-stream";
}

/* NAME(/NAME)*: each 1..255 of [A-Za-z0-9._-], not starting with a dot
 * (no "..", no dotfiles), no empty component. */
static bool valid_relative(const char *rel)
{
    size_t n = 0;

    if (strlen(rel) > ASSET_PATH_MAX)
        return false;
    for (const char *p = rel;; p++) {
        char c = *p;
        if (c == '/' || c == '\0') {
            if (n == 0)
                return false;
            if (c == '\0')
                return true;
            n = 0;
            continue;
        }
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || (c == '.' && n > 0);
        if (!ok || ++n > NAME_MAX_LEN)
            return false;
    }
}

/* Without openat2 (Linux before 5.6): one component at a time, none of
 * them a symbolic link. */
static int open_walk(int dirfd, const char *rel)
{
    cleanup_free char *copy = xstrdup(rel);
    cleanup_close int at = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    char *save = NULL;

    for (char *part = strtok_r(copy, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        bool last = !save || !*save;
        int fd = openat(at, part,
                        last ? O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW
                             : O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            return -1;
        close(at);
        at = fd;
        if (last)
            return TAKE_FD(at);
    }
    errno = ENOENT;
    return -1;
}

/* A regular file beneath dirfd, never through a symbolic link; -1 if none. */
static int open_beneath(int dirfd, const char *rel, struct stat *st)
{
    static bool no_openat2;
    struct open_how how = {
        .flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    cleanup_close int fd = -1;

    if (!__atomic_load_n(&no_openat2, __ATOMIC_RELAXED)) {
        fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
        if (fd < 0 && errno == ENOSYS)
            __atomic_store_n(&no_openat2, true, __ATOMIC_RELAXED);
    }
    if (fd < 0 && __atomic_load_n(&no_openat2, __ATOMIC_RELAXED))
        fd = open_walk(dirfd, rel);
    /* a FIFO would block a reader: opened non-blocking, then refused */
    if (fd < 0 || fstat(fd, st) < 0 || !S_ISREG(st->st_mode))
        return -1;
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return TAKE_FD(fd);
}

/* Whether a coding is acceptable per Accept-Encoding (RFC 9110 12.5.3):
 * named, or "*", with a q above 0. */
static bool accepts_gzip(const char *header)
{
    int gzip = -1, star = -1; /* -1 unnamed; else whether q > 0 */

    if (!header)
        return false;
    for (const char *p = header; *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, ",");
        size_t name = strcspn(p, " \t;,");
        bool q_zero = false;
        const char *semi = memchr(p, ';', len);
        if (semi) {
            const char *q = semi + 1 + strspn(semi + 1, " \t");
            if ((q[0] == 'q' || q[0] == 'Q') && q[1] == '=') {
                q += 2;
                q_zero = strtod(q, NULL) <= 0.0;
            }
        }
        if ((name == 4 && strncasecmp(p, "gzip", 4) == 0) ||
            (name == 6 && strncasecmp(p, "x-gzip", 6) == 0))
            gzip = !q_zero;
        else if (name == 1 && *p == '*')
            star = !q_zero;
        p += len;
    }
    return gzip == 1 || (gzip == -1 && star == 1);
}

/* Whether If-None-Match names etag (or is "*"); weak tags compare equal. */
static bool etag_matches(const char *header, const char *etag)
{
    size_t elen = strlen(etag);

    if (!header)
        return false;
    for (const char *p = header; *p;) {
        p += strspn(p, " \t,");
        size_t len = strcspn(p, ", \t");
        if (len == 1 && *p == '*')
            return true;
        const char *tag = p;
        if (len > 2 && strncmp(tag, "W/", 2) == 0) {
            tag += 2;
            len -= 2;
        }
        if (len == elen && memcmp(tag, etag, elen) == 0)
            return true;
        p = tag + len;
    }
    return false;
}

static void reply_text(struct console_reply *out, int status, const char *body)
{
    out->status = status;
    out->content_type = "text/html; charset=utf-8";
    out->cache_control = "no-store";
    out->body = body;
}

/* The file rel (or rel.gz when the client takes gzip) into out. */
static bool reply_file(int dirfd, const char *rel, bool gzip_ok, const char *if_none_match,
                       const char *cache_control, struct console_reply *out)
{
    struct stat st;
    int fd = -1;
    bool gz = false;

    if (gzip_ok) {
        cleanup_free char *zipped = xasprintf("%s.gz", rel);
        fd = open_beneath(dirfd, zipped, &st);
        gz = fd >= 0;
    }
    if (fd < 0)
        fd = open_beneath(dirfd, rel, &st);
    if (fd < 0)
        return false;
    out->status = 200;
    out->content_type = type_of(rel);
    out->cache_control = cache_control;
    out->content_encoding = gz ? "gzip" : NULL;
    out->vary = true;
    snprintf(out->etag, sizeof(out->etag), "\"%llx-%llx-%llx%s\"", (unsigned long long)st.st_size,
             (unsigned long long)st.st_mtim.tv_sec * 1000000000ULL +
                 (unsigned long long)st.st_mtim.tv_nsec,
             (unsigned long long)st.st_ino, gz ? "-gz" : "");
    if (etag_matches(if_none_match, out->etag)) {
        close(fd);
        out->status = 304;
        return true;
    }
    out->fd = fd;
    out->size = (uint64_t)st.st_size;
    return true;
}

void console_resolve(const char *dir, const char *method, const char *path,
                     const char *accept_encoding, const char *if_none_match,
                     struct console_reply *out)
{
    memset(out, 0, sizeof(*out));
    out->fd = -1;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        reply_text(out, 405, page_method);
        out->allow = "GET, HEAD";
        return;
    }
    if (strlen(path) > CONSOLE_PATH_MAX) {
        reply_text(out, 414, page_too_long);
        return;
    }
    cleanup_close int dirfd = dir && *dir ? open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    bool gzip_ok = accepts_gzip(accept_encoding);
    if (strncmp(path, ASSETS, strlen(ASSETS)) == 0 || strcmp(path, "/assets") == 0) {
        /* an asset is the exact file or 404: HTML in place of a script
         * would only break the page */
        const char *rel = path + 1;
        if (dirfd < 0 || !valid_relative(rel) ||
            !reply_file(dirfd, rel, gzip_ok, if_none_match, CACHE_IMMUTABLE, out))
            reply_text(out, 404, page_not_found);
        return;
    }
    if (dirfd < 0 || !reply_file(dirfd, "index.html", gzip_ok, if_none_match, "no-cache", out))
        reply_text(out, 503, page_not_built);
}
