#include "error.h"

#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const struct {
    int status;
    const char *code;
} kinds[] = {
    [SL_E_NONE] = { 200, "ok" },
    [SL_E_INVALID] = { 400, "invalid_request" },
    [SL_E_UNAUTHENTICATED] = { 401, "unauthenticated" },
    [SL_E_FORBIDDEN] = { 403, "forbidden" },
    [SL_E_NOT_FOUND] = { 404, "not_found" },
    [SL_E_METHOD] = { 405, "method_not_allowed" },
    [SL_E_CONFLICT] = { 409, "conflict" },
    [SL_E_TOO_LARGE] = { 413, "body_too_large" },
    [SL_E_UNSUPPORTED] = { 415, "unsupported_media_type" },
    [SL_E_UNPROCESSABLE] = { 422, "unprocessable" },
    [SL_E_RATE_LIMITED] = { 429, "rate_limited" },
    [SL_E_INTERNAL] = { 500, "internal" },
    [SL_E_UNAVAILABLE] = { 503, "unavailable" },
    [SL_E_STORAGE] = { 507, "insufficient_storage" },
};

int sl_error_http_status(enum sl_error_kind kind)
{
    if ((unsigned)kind >= sizeof(kinds) / sizeof(kinds[0]))
        return 500;
    return kinds[kind].status;
}

const char *sl_error_kind_code(enum sl_error_kind kind)
{
    if ((unsigned)kind >= sizeof(kinds) / sizeof(kinds[0]))
        return "internal";
    return kinds[kind].code;
}

static void set_code(struct sl_error *err, enum sl_error_kind kind, const char *code)
{
    err->kind = kind;
    snprintf(err->code, sizeof(err->code), "%s", code ? code : sl_error_kind_code(kind));
}

int sl_fail(struct sl_error *err, enum sl_error_kind kind, const char *code, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return -1;
    set_code(err, kind, code);
    err->sys_errno = 0;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return -1;
}

int sl_fail_errno(struct sl_error *err, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    char what[384];

    if (!err)
        return -1;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    set_code(err, SL_E_INTERNAL, "system_error");
    err->sys_errno = saved;
    snprintf(err->message, sizeof(err->message), "%s: %s", what, strerror(saved));
    errno = saved;
    return -1;
}

void sl_error_prefix(struct sl_error *err, const char *fmt, ...)
{
    va_list ap;
    char prefix[256], old[sizeof(err->message)];

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof(old));
    /* A message is bounded: one too long keeps its start (the outermost
     * context first) and says that it was cut. */
    if (snprintf(err->message, sizeof(err->message), "%s: %s", prefix, old) >=
        (int)sizeof(err->message))
        memcpy(err->message + sizeof(err->message) - 4, "...", 4);
}

void sl_error_clear(struct sl_error *err)
{
    memset(err, 0, sizeof(*err));
}

int sl_error_gather(struct sl_error *first, int *rc, int step_rc, const struct sl_error *next)
{
    if (step_rc >= 0)
        return *rc;
    if (*rc >= 0) {
        if (first && first != next)
            *first = *next;
        *rc = -1;
        return -1;
    }
    log_warn("%s (after an earlier error: %s)", next->message, first ? first->message : "?");
    return -1;
}

int sl_error_warn(int step_rc, const struct sl_error *e, const char *what)
{
    if (step_rc < 0)
        log_warn("%s: %s", what, e->message);
    return step_rc;
}
