#include "steps.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static __thread struct steps *current;

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t steps_wall_us(void)
{
    return clock_us(CLOCK_REALTIME);
}

void steps_begin(struct steps *s, int64_t desired_wall_us)
{
    *s = (struct steps){ .wall_us = clock_us(CLOCK_REALTIME), .desired_wall_us = desired_wall_us };
    s->start_us = s->last_us = clock_us(CLOCK_MONOTONIC);
    current = s;
}

void steps_end(void)
{
    current = NULL;
}

struct steps *steps_current(void)
{
    return current;
}

void steps_mark(const char *name)
{
    struct steps *s = current;
    if (!s)
        return;
    int64_t now = clock_us(CLOCK_MONOTONIC);
    if (s->n > 0 && strcmp(s->step[s->n - 1].name, name) == 0) {
        s->step[s->n - 1].us += now - s->last_us;
    } else if (s->n < STEPS_MAX) {
        s->step[s->n].name = name;
        s->step[s->n].us = now - s->last_us;
        s->n++;
    }
    s->last_us = now;
}

void steps_beside(struct steps *s, const struct steps *other)
{
    if (!s)
        return;
    for (unsigned i = 0; i < other->n && s->n_beside < STEPS_MAX; i++)
        s->beside[s->n_beside++] = other->step[i];
    for (unsigned i = 0; i < other->n_beside && s->n_beside < STEPS_MAX; i++)
        s->beside[s->n_beside++] = other->beside[i]; /* beside that one, in turn */
}

int steps_write(const struct steps *s, const char *path, const char *extra_json,
                struct sl_error *err)
{
    cleanup_buf struct sl_buf b = SL_BUF_INIT;
    sl_buf_addf(&b,
                "{\"wall_us\": %lld, \"desired_wall_us\": %lld, \"total_us\": %lld, \"steps\": [",
                (long long)s->wall_us, (long long)s->desired_wall_us,
                (long long)(s->last_us - s->start_us));
    for (unsigned i = 0; i < s->n; i++)
        sl_buf_addf(&b, "%s[\"%s\", %lld]", i ? ", " : "", s->step[i].name,
                    (long long)s->step[i].us);
    sl_buf_adds(&b, "], \"beside\": [");
    for (unsigned i = 0; i < s->n_beside; i++)
        sl_buf_addf(&b, "%s[\"%s\", %lld]", i ? ", " : "", s->beside[i].name,
                    (long long)s->beside[i].us);
    sl_buf_addf(&b, "]%s%s}\n", extra_json ? ", " : "", extra_json ? extra_json : "");
    cleanup_free char *tmp = xasprintf("%s.new", path);
    cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_fail_errno(err, "unable to create '%s'", tmp);
    if (write(fd, b.data, b.len) != (ssize_t)b.len || rename(tmp, path) < 0) {
        sl_fail_errno(err, "unable to write '%s'", path);
        unlink(tmp);
        return -1;
    }
    return 0;
}

void steps_format(const struct steps *s, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < s->n && used < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%s %.1f", i ? ", " : "", s->step[i].name,
                         (double)s->step[i].us / 1000.0);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    for (unsigned i = 0; i < s->n_beside && used < size; i++) {
        int n =
            snprintf(buf + used, size - used, "%s%s %.1f",
                     i ? ", " : "; beside: ", s->beside[i].name, (double)s->beside[i].us / 1000.0);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}
