/* Formatted disks kept ready (disk-spares.h). */
#include "disk-spares.h"
#include "disk.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SPARES_DIR "spare-disks"

static pthread_mutex_t spares_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spares_idle = PTHREAD_COND_INITIALIZER;
static unsigned spares_making; /* disks under way, all sizes */
static unsigned spares_making_gib[DISK_SPARES_MAX];
static unsigned spares_seq;

struct spare {
    char name[256];
    unsigned gib;
    long long mtime_ns;
};

/* The ready spares in dir (at most max): "GIB-N.img" only. */
static size_t list_spares(const char *dir, struct spare *out, size_t max)
{
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0;

    while (d && n < max && (e = readdir(d))) {
        unsigned gib, seq;
        char tail[8] = "";
        struct stat st;
        if (sscanf(e->d_name, "%u-%u%7s", &gib, &seq, tail) != 3 || strcmp(tail, ".img") != 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        snprintf(out[n].name, sizeof(out[n].name), "%s", e->d_name);
        out[n].gib = gib;
        out[n].mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        n++;
    }
    return n;
}

int disk_spares_init(const char *data_dir, struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/" SPARES_DIR, data_dir);
    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    cleanup_dir DIR *d = opendir(dir);
    if (!d)
        return sl_fail_errno(err, "unable to open '%s'", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".new") == 0 &&
            unlinkat(dirfd(d), e->d_name, 0) < 0 && errno != ENOENT)
            return sl_fail_errno(err, "unable to remove '%s/%s'", dir, e->d_name);
    }
    return 0;
}

struct make_job {
    char *dir;
    unsigned gib;
    unsigned slot;
    unsigned seq;
};

static void make_one(const struct make_job *job)
{
    cleanup_free char *tmp = xasprintf("%s/%u-%u.img.new", job->dir, job->gib, job->seq);
    cleanup_free char *ready = xasprintf("%s/%u-%u.img", job->dir, job->gib, job->seq);
    struct sl_error err = SL_ERROR_INIT;

    unlink(tmp);
    if (disk_create(tmp, job->gib, &err) < 0)
        log_warn("a spare %u GiB disk: %s", job->gib, err.message);
    else if (rename(tmp, ready) < 0)
        log_warn("a spare %u GiB disk: unable to rename '%s': %s", job->gib, tmp, strerror(errno));
}

static void *make_thread(void *p)
{
    struct make_job *job = p;
    unsigned slot = job->slot;

    /* below the starts it makes room for (mkfs inherits the thread's nice
     * value): a spare is for the next start, never at this one's cost */
    setpriority(PRIO_PROCESS, 0, 19);
    make_one(job);
    free(job->dir);
    free(job);
    pthread_mutex_lock(&spares_lock);
    spares_making_gib[slot] = 0;
    spares_making--;
    pthread_cond_broadcast(&spares_idle);
    pthread_mutex_unlock(&spares_lock);
    return NULL;
}

/* With spares_lock held: starts making one more of gib GiB unless enough
 * are ready or under way, making room among other sizes' spares. */
static void refill_locked(const char *dir, unsigned gib)
{
    struct spare have[DISK_SPARES_MAX * 4];
    size_t n = list_spares(dir, have, ARRAY_SIZE(have)), same = 0, slot = DISK_SPARES_MAX;

    for (size_t i = 0; i < n; i++)
        same += have[i].gib == gib;
    for (size_t i = 0; i < DISK_SPARES_MAX; i++) {
        same += spares_making_gib[i] == gib;
        if (!spares_making_gib[i] && slot == DISK_SPARES_MAX)
            slot = i;
    }
    if (same >= DISK_SPARES_PER_SIZE || slot == DISK_SPARES_MAX)
        return;
    /* room: another size's oldest spare goes */
    while (n + spares_making >= DISK_SPARES_MAX) {
        size_t oldest = n;
        for (size_t i = 0; i < n; i++)
            if (have[i].gib != gib && (oldest == n || have[i].mtime_ns < have[oldest].mtime_ns))
                oldest = i;
        if (oldest == n)
            return;
        cleanup_free char *path = xasprintf("%s/%s", dir, have[oldest].name);
        unlink(path);
        have[oldest] = have[--n];
    }
    struct make_job *job = xzalloc(sizeof(*job));
    *job = (struct make_job){ .dir = xstrdup(dir), .gib = gib, .slot = slot, .seq = ++spares_seq };
    /* a sequence number per process: a name from before a restart may
     * still be there, so the number goes on past the largest one seen */
    for (size_t i = 0; i < n; i++) {
        unsigned g, s;
        if (sscanf(have[i].name, "%u-%u", &g, &s) == 2 && s >= job->seq)
            job->seq = spares_seq = s + 1;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, make_thread, job) == 0) {
        spares_making_gib[slot] = gib;
        spares_making++;
    } else {
        free(job->dir);
        free(job);
    }
    pthread_attr_destroy(&attr);
}

int disk_spares_take(const char *data_dir, unsigned gib, const char *path, struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/" SPARES_DIR, data_dir);
    struct spare have[DISK_SPARES_MAX * 4];
    int taken = 0;

    /* a host whose disk is full makes no disk, spare or not: the start
     * fails as it would without spares */
    struct statvfs fs;
    if (statvfs(dir, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < DISK_FULL_BELOW_MIB << 20)
        return 0;
    pthread_mutex_lock(&spares_lock);
    size_t n = list_spares(dir, have, ARRAY_SIZE(have));
    for (size_t i = 0; i < n && !taken; i++) {
        if (have[i].gib != gib)
            continue;
        cleanup_free char *from = xasprintf("%s/%s", dir, have[i].name);
        /* link + unlink rather than rename: a path that exists is never
         * replaced */
        if (link(from, path) < 0) {
            int saved = errno;
            pthread_mutex_unlock(&spares_lock);
            errno = saved;
            return sl_fail_errno(err, "unable to move the spare disk '%s' to '%s'", from, path);
        }
        unlink(from);
        taken = 1;
    }
    pthread_mutex_unlock(&spares_lock);
    return taken;
}

void disk_spares_refill(const char *data_dir, unsigned gib)
{
    cleanup_free char *dir = xasprintf("%s/" SPARES_DIR, data_dir);
    pthread_mutex_lock(&spares_lock);
    refill_locked(dir, gib);
    pthread_mutex_unlock(&spares_lock);
}

void disk_spares_wait(void)
{
    pthread_mutex_lock(&spares_lock);
    while (spares_making)
        pthread_cond_wait(&spares_idle, &spares_lock);
    pthread_mutex_unlock(&spares_lock);
}
