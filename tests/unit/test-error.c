/* lib/error.c: the error contract's helpers, and gathering the errors of a
 * sequence that goes on after a failure (the first is returned, the rest are
 * logged, none is lost). */
#include "harness.h"

#include "../../lib/error.h"
#include "../../lib/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The log goes to stderr: a capture points fd 2 at a file of the test's
 * directory until capture_end, which returns what was written. */
struct capture {
    int saved;
    const char *path;
    enum sl_log_level threshold;
};

static void capture_start(struct capture *c)
{
    c->path = test_path("stderr");
    c->threshold = sl_log_threshold;
    sl_log_threshold = SL_LOG_DEBUG;
    fflush(stderr);
    c->saved = dup(2);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(struct capture *c)
{
    static char text[8192];
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    sl_log_threshold = c->threshold;
    text[0] = '\0';
    FILE *f = fopen(c->path, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    return text;
}

static int step_fails(const char *what, struct sl_error *err)
{
    return sl_fail(err, SL_E_INTERNAL, "step_failed", "%s failed", what);
}

TEST(fail_fills_kind_code_message)
{
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(sl_fail(&err, SL_E_CONFLICT, NULL, "instance '%s' is busy", "a"), -1);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "conflict");
    CHECK_STR(err.message, "instance 'a' is busy");
    sl_error_prefix(&err, "stop '%s'", "a");
    CHECK_STR(err.message, "stop 'a': instance 'a' is busy");
    errno = ENOENT;
    CHECK_EQ_INT(sl_fail_errno(&err, "open '%s'", "x"), -1);
    CHECK_STR(err.code, "system_error");
    CHECK_EQ_INT(err.sys_errno, ENOENT);
    CHECK_PREFIX(err.message, "open 'x': ");
    CHECK_EQ_INT(sl_error_http_status(SL_E_UNAVAILABLE), 503);
}

TEST(gather_keeps_first_and_logs_the_rest)
{
    struct sl_error err = SL_ERROR_INIT, e = SL_ERROR_INIT;
    struct capture c;
    int rc = 0;

    capture_start(&c);
    CHECK_EQ_INT(sl_error_gather(&err, &rc, 0, &e), 0);
    CHECK_EQ_INT(sl_error_gather(&err, &rc, step_fails("unmount", &e), &e), -1);
    CHECK_EQ_INT(sl_error_gather(&err, &rc, 0, &e), -1);
    CHECK_EQ_INT(sl_error_gather(&err, &rc, step_fails("remove netns", &e), &e), -1);
    CHECK_EQ_INT(sl_error_gather(&err, &rc, step_fails("unpin", &e), &e), -1);
    const char *log = capture_end(&c);

    CHECK_EQ_INT(rc, -1);
    CHECK_STR(err.code, "step_failed");
    CHECK_STR(err.message, "unmount failed");
    CHECK(!strstr(log, "unmount failed (after"));
    CHECK_CONTAINS(log, "warn  remove netns failed (after an earlier error: unmount failed)");
    CHECK_CONTAINS(log, "warn  unpin failed (after an earlier error: unmount failed)");
}

TEST(gather_all_well_is_silent)
{
    struct sl_error err = SL_ERROR_INIT, e = SL_ERROR_INIT;
    struct capture c;
    int rc = 0;

    capture_start(&c);
    for (int i = 0; i < 3; i++)
        sl_error_gather(&err, &rc, 0, &e);
    const char *log = capture_end(&c);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(err.kind, SL_E_NONE);
    CHECK_STR(log, "");
}

/* A cleanup after a failure: the failure stays the one returned. */
TEST(gather_after_failure_keeps_the_failure)
{
    struct sl_error err = SL_ERROR_INIT, e = SL_ERROR_INIT;
    struct capture c;

    int rc = sl_fail(&err, SL_E_UNPROCESSABLE, "start_failed", "runc run failed");
    capture_start(&c);
    sl_error_gather(&err, &rc, step_fails("delete container", &e), &e);
    const char *log = capture_end(&c);
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(err.kind, SL_E_UNPROCESSABLE);
    CHECK_STR(err.message, "runc run failed");
    CHECK_CONTAINS(log, "delete container failed (after an earlier error: runc run failed)");
}

TEST(warn_logs_with_context)
{
    struct sl_error e = SL_ERROR_INIT;
    struct capture c;

    capture_start(&c);
    CHECK_EQ_INT(sl_error_warn(0, &e, "never shown"), 0);
    CHECK_EQ_INT(sl_error_warn(step_fails("rmdir", &e), &e, "clean up 'x'"), -1);
    const char *log = capture_end(&c);
    CHECK(!strstr(log, "never shown"));
    CHECK_CONTAINS(log, "warn  clean up 'x': rmdir failed");
}
