/* The error contract (docs/design/errors.md).
 *
 * A function that can fail returns a negative int (or NULL) and fills the
 * `struct sl_error *err` it takes last. Callers pass it up unchanged or add
 * context with sl_error_prefix(). Library code never prints and never exits.
 * At the API edge the kind becomes an HTTP status and `code` the stable word
 * of {"error":{"code":...,"message":...}}. */
#ifndef SL_ERROR_H
#define SL_ERROR_H

#include <stdbool.h>

enum sl_error_kind {
    SL_E_NONE = 0,
    SL_E_INVALID,         /* 400: the request is malformed */
    SL_E_UNAUTHENTICATED, /* 401: no or bad credentials */
    SL_E_FORBIDDEN,       /* 403: seen but not yours to change */
    SL_E_NOT_FOUND,       /* 404: absent, or not yours to see */
    SL_E_METHOD,          /* 405 */
    SL_E_CONFLICT,        /* 409: the state forbids it now */
    SL_E_TOO_LARGE,       /* 413 */
    SL_E_UNSUPPORTED,     /* 415 */
    SL_E_UNPROCESSABLE,   /* 422: well-formed but cannot be done */
    SL_E_RATE_LIMITED,    /* 429 */
    SL_E_INTERNAL,        /* 500: a bug or a broken store */
    SL_E_UNAVAILABLE,     /* 503: try again later */
    SL_E_STORAGE,         /* 507: the server could not store it (a full or failing disk) */
};

struct sl_error {
    enum sl_error_kind kind;
    int sys_errno; /* errno when a system call failed, else 0 */
    char code[48]; /* stable word, e.g. "insufficient_balance" */
    char message[512];
};

#define SL_ERROR_INIT                                                                              \
    {                                                                                              \
        0                                                                                          \
    }

/* Fill err and return -1, so `return sl_fail(err, ...)` reads naturally. */
int sl_fail(struct sl_error *err, enum sl_error_kind kind, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Like sl_fail for a failed system call: appends strerror(errno). */
int sl_fail_errno(struct sl_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepend context: "start instance 'x': <old message>". */
void sl_error_prefix(struct sl_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void sl_error_clear(struct sl_error *err);

/* One step of a sequence that goes on after a failure (a teardown; systemd's
 * RET_GATHER). When step_rc is negative: if *rc is still 0, *next becomes
 * *first, the error the caller returns, and *rc becomes -1; otherwise *first
 * is kept and *next is logged at warning level, so it is not lost. A cleanup
 * after a failure starts with *rc already -1 and *first holding that failure.
 * Returns *rc:
 *     sl_error_gather(err, &rc, netns_remove(netns, &e), &e); */
int sl_error_gather(struct sl_error *first, int *rc, int step_rc, const struct sl_error *next);

/* A best-effort step whose failure the caller does not return (the work it
 * undoes is already done or already failed): when step_rc is negative, *e is
 * logged at warning level, after "what: ". Returns step_rc. */
int sl_error_warn(int step_rc, const struct sl_error *e, const char *what);

int sl_error_http_status(enum sl_error_kind kind);

/* The default code word for a kind, used when none was given. */
const char *sl_error_kind_code(enum sl_error_kind kind);

#endif
