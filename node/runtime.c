#include "runtime.h"

#include <signal.h>
#include <time.h>

static const char *const status_names[] = {
    [RUNTIME_ABSENT] = "absent",   [RUNTIME_CREATING] = "creating", [RUNTIME_CREATED] = "created",
    [RUNTIME_RUNNING] = "running", [RUNTIME_PAUSED] = "paused",     [RUNTIME_STOPPED] = "stopped",
};

const char *runtime_status_name(enum runtime_status s)
{
    if ((unsigned)s >= sizeof(status_names) / sizeof(status_names[0]))
        return "unknown";
    return status_names[s];
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int wait_stopped(const struct runtime *rt, const char *id, int timeout_ms,
                        struct sl_error *err)
{
    long deadline = now_ms() + timeout_ms;
    for (;;) {
        struct runtime_state st;
        if (rt->ops->state(rt, id, &st, err) < 0)
            return -1;
        if (st.status == RUNTIME_ABSENT || st.status == RUNTIME_STOPPED)
            return 1;
        if (now_ms() >= deadline)
            return 0;
        struct timespec ts = { .tv_nsec = 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

int runtime_stop(const struct runtime *rt, const char *id, int grace_ms, struct sl_error *err)
{
    struct runtime_state st;
    if (rt->ops->state(rt, id, &st, err) < 0)
        return -1;
    if (st.status == RUNTIME_ABSENT)
        return 0;
    if (st.status == RUNTIME_RUNNING) {
        struct sl_error ignored = SL_ERROR_INIT;
        /* It may exit between state and kill: not an error. */
        rt->ops->kill(rt, id, SIGTERM, false, &ignored);
        int stopped = wait_stopped(rt, id, grace_ms, err);
        if (stopped < 0)
            return -1;
        if (!stopped) {
            rt->ops->kill(rt, id, SIGKILL, true, &ignored);
            if (wait_stopped(rt, id, 5000, err) < 0)
                return -1;
        }
    }
    return rt->ops->delete (rt, id, err);
}
