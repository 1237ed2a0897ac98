/* The web console's files, served by suanlid at / (docs/design/control-plane.md,
 * "The console"). Independent of the HTTP library: http.c turns a
 * console_reply into a response.
 *
 * Paths: /assets/NAME (exact files, cached for a year: their names are
 * content hashes) and everything else that is not the API's (/v1,
 * /healthz, /metrics) gets index.html (the console's routes, history API).
 * Files are opened beneath console.dir only: no "..", no component that
 * starts with a dot, no symbolic link that leaves the directory, regular
 * files only, and only [A-Za-z0-9._-] in names. */
#ifndef SL_CONSOLE_H
#define SL_CONSOLE_H

#include <stdbool.h>
#include <stdint.h>

/* Longest path the console answers (414 above). */
#define CONSOLE_PATH_MAX 2048

struct console_reply {
    int status;
    const char *content_type;
    const char *cache_control;
    const char *content_encoding; /* "gzip" or NULL */
    const char *allow;            /* 405: the methods allowed */
    bool vary;                    /* Vary: Accept-Encoding */
    char etag[64];                /* "" for none */
    int fd;                       /* >= 0: send size bytes of it; the caller owns it */
    uint64_t size;
    const char *body; /* else this static text */
};

/* Whether path (decoded) is the console's rather than the API's. */
bool console_owns_path(const char *path);

/* The default console.dir: console/ beside the running binary
 * (/proc/self/exe); a new string, or NULL when it cannot be found. */
char *console_default_dir(void);

/* Answers method path from dir. accept_encoding and if_none_match are the
 * request's headers or NULL. Never fails: every outcome is a reply (a
 * missing dir is 503 with a page that says how to build it). */
void console_resolve(const char *dir, const char *method, const char *path,
                     const char *accept_encoding, const char *if_none_match,
                     struct console_reply *out);

/* The headers every console response carries: "Name: value\r\n" lines. */
extern const char console_security_headers[];

#endif
