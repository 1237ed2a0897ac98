#include "lxcfs.h"
#include "fsutil.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *const lxcfs_files[] = {
    "proc/cpuinfo", "proc/diskstats", "proc/loadavg", "proc/meminfo",
    "proc/stat",    "proc/swaps",     "proc/uptime",  "sys/devices/system/cpu/online",
};
const size_t lxcfs_files_count = ARRAY_SIZE(lxcfs_files);

/* Whether /proc/self/mountinfo has an lxcfs mount at dir (field 5 the mount
 * point, the file system type after " - "). */
static bool lxcfs_mounted(const char *dir)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    bool found = false;

    if (!f)
        return false;
    while (!found && fgets(line, sizeof(line), f)) {
        char point[4096];
        const char *sep = strstr(line, " - ");
        if (sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 && strcmp(point, dir) == 0 && sep &&
            strncmp(sep + 3, "fuse.lxcfs ", 11) == 0)
            found = true;
    }
    fclose(f);
    return found;
}

bool lxcfs_live(const char *dir)
{
    cleanup_free char *meminfo = xasprintf("%s/proc/meminfo", dir);
    struct stat st;

    /* a dead lxcfs leaves its mount answering ENOTCONN */
    return lxcfs_mounted(dir) && stat(meminfo, &st) == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L };
    nanosleep(&ts, NULL);
}

/* Runs argv as a daemon of its own: a new session, reparented to init (a
 * double fork), output appended to log, no signal blocked, umask 022. */
static int spawn_daemon(const char *const *argv, const char *log, struct sl_error *err)
{
    pid_t child = fork();

    if (child < 0)
        return sl_fail_errno(err, "unable to start '%s'", argv[0]);
    if (child == 0) {
        if (setsid() < 0 || fork() != 0)
            _exit(0);
        int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int out = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
            _exit(127);
        close_range(3, ~0U, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        umask(022);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR)
        ;
    return 0;
}

/* Starts lxcfs on dir (its pid in dir.pid, its output in dir.log) and waits
 * until it answers there. */
static int lxcfs_start(const char *dir, struct sl_error *err)
{
    cleanup_free char *pidfile = xasprintf("%s.pid", dir);
    cleanup_free char *log = xasprintf("%s.log", dir);
    /* --enable-cfs: CPUs after the CFS quota, not only the cpuset; -l: the
     * load average of the instance's own processes */
    const char *const argv[] = { "lxcfs", "--enable-cfs", "-l", "-p", pidfile, dir, NULL };

    /* a dead one's mount is in the way */
    if (lxcfs_mounted(dir) && umount2(dir, MNT_DETACH) < 0)
        return sl_fail_errno(err, "unable to unmount the dead lxcfs at '%s'", dir);
    if (fs_mkdir_p(dir, 0755, err) < 0 || spawn_daemon(argv, log, err) < 0)
        return -1;
    for (int i = 0; i < 100 && !lxcfs_live(dir); i++)
        sleep_ms(50);
    if (!lxcfs_live(dir))
        return sl_fail(err, SL_E_INTERNAL, "lxcfs_failed",
                       "lxcfs did not mount '%s' in 5 s: see '%s', or set lxcfs = off", dir, log);
    log_info("lxcfs: mounted at %s (instances see their own memory and CPUs)", dir);
    return 0;
}

/* Whether program is in PATH. */
static bool installed(const char *program)
{
    const char *path = getenv("PATH");
    cleanup_free char *copy = xstrdup(path ? path : "/usr/bin:/bin");
    char *save = NULL;

    for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        cleanup_free char *p = xasprintf("%s/%s", d, program);
        if (access(p, X_OK) == 0)
            return true;
    }
    return false;
}

int lxcfs_ensure(const char *mode, const char *data_dir, char **dir, bool *own,
                 struct sl_error *err)
{
    *dir = NULL;
    *own = false;
    if (strcmp(mode, "off") == 0)
        return 0;
    if (strcmp(mode, "auto") != 0) {
        cleanup_free char *given = realpath(mode, NULL);
        if (!given || !lxcfs_live(given))
            return sl_fail(err, SL_E_INVALID, "invalid_option",
                           "option 'lxcfs': '%s' is not a running lxcfs mount (start lxcfs "
                           "there, or set lxcfs = auto to let the agent start its own, or off)",
                           mode);
        *dir = TAKE_PTR(given);
        return 0;
    }
    if (!installed("lxcfs")) {
        log_warn("lxcfs: not installed: instances see the host's memory and CPUs in free, top "
                 "and /proc (their limits hold all the same); install it (apt-get install "
                 "lxcfs, scripts/deps.sh run), or set lxcfs = off to silence this");
        return 0;
    }
    if (fs_chrooted()) {
        log_warn("lxcfs: this agent runs in a chroot, where lxcfs cannot mount (it leaves "
                 "the chroot): instances see the host's memory and CPUs in free, top and "
                 "/proc (their limits hold all the same); run the agent outside a chroot, "
                 "or set lxcfs = off to silence this");
        return 0;
    }
    cleanup_free char *data = realpath(data_dir, NULL);
    if (!data)
        return sl_fail_errno(err, "unable to resolve '%s'", data_dir);
    *dir = xasprintf("%s/lxcfs", data);
    *own = true;
    return 0;
}

/* Instances start in workers of their own (converge.c): one starts lxcfs. */
static pthread_mutex_t starting = PTHREAD_MUTEX_INITIALIZER;

int lxcfs_revive(const char *dir, bool own, struct sl_error *err)
{
    int rc = 0;

    if (lxcfs_live(dir))
        return 0;
    if (!own)
        return sl_fail(err, SL_E_UNAVAILABLE, "lxcfs_down",
                       "the lxcfs at '%s' is not running: start it again", dir);
    pthread_mutex_lock(&starting);
    if (!lxcfs_live(dir)) {
        if (lxcfs_mounted(dir))
            log_warn("lxcfs: the one at %s died: starting it again (instances started on it "
                     "see errors in /proc/meminfo and the rest until they restart)",
                     dir);
        rc = lxcfs_start(dir, err);
    }
    pthread_mutex_unlock(&starting);
    return rc;
}
