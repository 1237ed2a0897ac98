/* The runtimes by name (runtime_open), as crun picks its cgroup manager from
 * a table in get_cgroup_manager(), and what every runtime does alike:
 * status names, and stopping a container with a grace period. */
#include "runtime.h"

#include "../lib/cleanup.h"
#include "../lib/timeconst.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const struct runtime_ops *const runtimes[] = {
    &runtime_runc_ops,
    &runtime_crun_ops,
};

static const struct runtime_ops *runtime_find(const char *name, size_t len)
{
    for (size_t i = 0; i < ARRAY_SIZE(runtimes); i++)
        if (strlen(runtimes[i]->name) == len && strncmp(name, runtimes[i]->name, len) == 0)
            return runtimes[i];
    return NULL;
}

/* The runtime a binary's file name names: NAME, or NAME-SOMETHING. */
static const struct runtime_ops *runtime_of_binary(const char *path)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;

    for (size_t i = 0; i < ARRAY_SIZE(runtimes); i++) {
        size_t n = strlen(runtimes[i]->name);
        if (strncmp(base, runtimes[i]->name, n) == 0 && (base[n] == '\0' || base[n] == '-'))
            return runtimes[i];
    }
    return NULL;
}

int runtime_open(const char *spec, const char *root, struct runtime *rt, struct sl_error *err)
{
    const char *colon = strchr(spec, ':');
    const struct runtime_ops *ops = NULL;
    const char *binary = spec;

    if (colon && !memchr(spec, '/', (size_t)(colon - spec))) {
        ops = runtime_find(spec, (size_t)(colon - spec));
        binary = colon + 1;
    } else if (strchr(spec, '/')) {
        ops = runtime_of_binary(spec);
    } else {
        ops = runtime_find(spec, strlen(spec));
    }
    if (!ops || !binary[0])
        return sl_fail(err, SL_E_INVALID, "invalid_config",
                       "no runtime '%.200s': use runc or crun, NAME:PATH for a binary elsewhere "
                       "(runc:/opt/bin/runc-debug), or a PATH whose file name is the runtime's",
                       spec);
    *rt = (struct runtime){ .ops = ops, .binary = binary, .root = root };
    return 0;
}

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
    return ts.tv_sec * SL_MSEC_PER_SEC + ts.tv_nsec / SL_NSEC_PER_MSEC;
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
        struct timespec ts = { .tv_nsec = 20L * SL_NSEC_PER_MSEC };
        nanosleep(&ts, NULL);
    }
}

/* Waits up to timeout_ms for process pid to end, on a pidfd opened before
 * the signal: no runtime asked every 20 ms meanwhile (each ask is a run of
 * runc). Only a hint: the runtime's state says whether it stopped. */
static bool wait_exit(int pidfd, int timeout_ms)
{
    struct pollfd p = { .fd = pidfd, .events = POLLIN };
    long deadline = now_ms() + timeout_ms;
    int rc = 0;
    for (long left = timeout_ms; left > 0 && rc == 0; left = deadline - now_ms())
        rc = poll(&p, 1, (int)left); /* 1: it ended; -1: the runtime tells */
    close(pidfd);
    return rc != 0;
}

int runtime_stop(const struct runtime *rt, const char *id, int grace_ms, struct sl_error *err)
{
    struct runtime_state st;
    if (rt->ops->state(rt, id, &st, err) < 0)
        return -1;
    if (st.status == RUNTIME_ABSENT)
        return 0;
    if (st.status == RUNTIME_RUNNING) {
        struct sl_error e = SL_ERROR_INIT;
        int pidfd = st.pid > 0 ? (int)syscall(SYS_pidfd_open, st.pid, 0) : -1;
        /* It may exit between state and kill: not an error, only logged. */
        sl_error_warn(rt->ops->kill(rt, id, SIGTERM, false, &e), &e, "stop container");
        int left_ms = grace_ms;
        if (pidfd >= 0) /* then a second at most for the runtime to see it */
            left_ms = wait_exit(pidfd, grace_ms) ? 1000 : 0;
        int stopped = wait_stopped(rt, id, left_ms, err);
        if (stopped < 0)
            return -1;
        if (!stopped) {
            sl_error_warn(rt->ops->kill(rt, id, SIGKILL, true, &e), &e, "kill container");
            if (wait_stopped(rt, id, 5000, err) < 0)
                return -1;
        }
    }
    return rt->ops->delete (rt, id, err);
}
