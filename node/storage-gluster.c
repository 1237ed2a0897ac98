/* File storage on a Gluster volume (storage-gluster.h). */
#include "storage-gluster.h"
#include "disk.h"
#include "firewall.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/subprocess.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/magic.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define GIB (1ULL << 30)
/* statvfs of a directory with a limit reads the limit, in whole blocks */
#define QUOTA_SLACK (1ULL << 20)

/* SERVER:/VOLUME into host and volume (suanlid checked its characters). */
static int split_spec(const char *spec, char *host, size_t host_size, char *volume,
                      size_t volume_size, struct sl_error *err)
{
    const char *colon = spec ? strstr(spec, ":/") : NULL;
    if (!colon || colon == spec || (size_t)(colon - spec) >= host_size || !colon[2] ||
        strlen(colon + 2) >= volume_size || strchr(colon + 2, '/'))
        return sl_fail(err, SL_E_INVALID, "bad_storage",
                       "the glusterfs backend's spec '%s' is not SERVER:/VOLUME", spec ? spec : "");
    snprintf(host, host_size, "%.*s", (int)(colon - spec), spec);
    snprintf(volume, volume_size, "%s", colon + 2);
    return 0;
}

/* DATA/storage/glusterfs, absolute (the client's command line and
 * mountinfo name it so, whatever the agent's --data-dir). */
static char *mount_point(const char *data_dir)
{
    cleanup_free char *dir = xasprintf("%s/storage", data_dir);
    char real[PATH_MAX];
    return xasprintf("%s/glusterfs", realpath(dir, real) ? real : dir);
}

/* What is mounted at the mount point: 1 (src "SERVER:VOLUME") or 0. Never
 * stats the mount point itself: a FUSE mount whose client is gone answers
 * ENOTCONN. */
static int mounted(const char *data_dir, char *src, size_t src_size)
{
    char fstype[64] = "";
    cleanup_free char *mp = mount_point(data_dir);
    cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
    src[0] = '\0';
    return f && disk_mountinfo_find(f, mp, src, src_size, fstype, sizeof(fstype)) == 1 &&
                   strcmp(fstype, "fuse.glusterfs") == 0
               ? 1
               : 0;
}

/* Whether the FUSE client that mounted it runs: the process its pid file
 * names is a glusterfs whose last argument is the mount point. */
static bool client_alive(const char *data_dir)
{
    cleanup_free char *mp = mount_point(data_dir);
    cleanup_free char *pid_path = xasprintf("%s.pid", mp);
    cleanup_free char *text = fs_read_file(pid_path, 64, NULL, NULL);
    long pid = text ? strtol(text, NULL, 10) : 0;
    char proc[64], cmd[4096];

    if (pid <= 1)
        return false;
    snprintf(proc, sizeof(proc), "/proc/%ld/cmdline", pid);
    cleanup_close int fd = open(proc, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, cmd, sizeof(cmd) - 1);
    if (n <= 1)
        return false;
    cmd[n] = '\0';
    if (cmd[n - 1] == '\0')
        n--; /* the arguments end at NULs: the last one starts after the one before */
    const char *last = cmd + n;
    while (last > cmd && last[-1] != '\0')
        last--;
    return strstr(cmd, "glusterfs") && strcmp(last, mp) == 0;
}

static void detach(const char *data_dir, const char *why)
{
    cleanup_free char *mp = mount_point(data_dir);
    if (umount2(mp, MNT_DETACH) < 0)
        log_warn("agent: file storage: unable to unmount '%s': %s", mp, strerror(errno));
    else
        log_info("agent: file storage: unmounted the Gluster volume at '%s': %s", mp, why);
}

/* Runs Gluster's FUSE client (it stays as a daemon) for host:/volume at
 * the mount point, then makes the mount nosuid,nodev. */
static int mount_volume(const char *data_dir, const char *host, const char *volume,
                        struct sl_error *err)
{
    cleanup_free char *mp = mount_point(data_dir);
    cleanup_free char *server = xasprintf("--volfile-server=%s", host);
    cleanup_free char *id = xasprintf("--volfile-id=%s", volume);
    cleanup_free char *pid = xasprintf("--pid-file=%s.pid", mp);
    cleanup_free char *log = xasprintf("--log-file=%s.log", mp);
    cleanup_free char *out = xasprintf("%s.out", mp);
    const char *argv[] = { "glusterfs", server, id, pid, log, mp, NULL };
    const struct sl_subprocess sp = { .argv = argv, .log_path = out };
    char src[512];

    if (fs_mkdir_p(mp, 0700, err) < 0)
        return -1;
    if (sl_subprocess_check(&sp, err) < 0) {
        sl_error_prefix(err, "unable to mount the Gluster volume %s:/%s (see %s.log)", host, volume,
                        mp);
        err->kind = SL_E_UNAVAILABLE;
        return -1;
    }
    if (mounted(data_dir, src, sizeof(src)) != 1)
        return sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                       "the Gluster client for %s:/%s left nothing mounted at '%s' (see "
                       "%s.log)",
                       host, volume, mp, mp);
    if (mount(NULL, mp, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
        log_warn("agent: file storage: unable to make '%s' nosuid,nodev: %s", mp, strerror(errno));
    log_info("agent: file storage: mounted the Gluster volume %s:/%s at '%s'", host, volume, mp);
    return 0;
}

/* iptables in the host's filter table; the exit status, -1 when it did
 * not run */
static int iptables(const char *const *argv)
{
    const struct sl_subprocess sp = { .argv = argv };
    return sl_subprocess_run(&sp, NULL);
}

/* No instance reaches the volume's server: from inside, masqueraded to
 * the host's address, a renter's own Gluster client (libgfapi) would pass
 * the volume's auth.allow as the host and read every renter's directory.
 * A DROP per address of the server in the bridges' forward chain
 * (firewall.h), which only instances' traffic crosses. */
static int deny_instances(const char *host, struct sl_error *err)
{
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                       "unable to resolve the Gluster server '%s': %s", host, gai_strerror(rc));
    const char *list[] = { "iptables", "-w", "-t", "filter", "-L", FIREWALL_FORWARD_CHAIN,
                           "-n",       NULL };
    const char *make[] = { "iptables", "-w", "-t", "filter", "-N", FIREWALL_FORWARD_CHAIN, NULL };
    if (iptables(list) != 0 && iptables(make) != 0 && iptables(list) != 0) {
        freeaddrinfo(res);
        return sl_fail(err, SL_E_INTERNAL, "firewall",
                       "unable to make the chain " FIREWALL_FORWARD_CHAIN);
    }
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        char addr[INET_ADDRSTRLEN + 3];
        inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, addr, INET_ADDRSTRLEN);
        strcat(addr, "/32");
        const char *check[] = { "iptables", "-w", "-t", "filter", "-C", FIREWALL_FORWARD_CHAIN,
                                "-d",       addr, "-j", "DROP",   NULL };
        const char *insert[] = { "iptables", "-w", "-t", "filter", "-I",   FIREWALL_FORWARD_CHAIN,
                                 "1",        "-d", addr, "-j",     "DROP", NULL };
        if (iptables(check) != 0 && iptables(insert) != 0) {
            freeaddrinfo(res);
            return sl_fail(err, SL_E_INTERNAL, "firewall",
                           "unable to keep instances from the Gluster server %s", addr);
        }
    }
    freeaddrinfo(res);
    return 0;
}

char *gluster_prepare(const char *data_dir, const char *spec, int64_t number, struct sl_error *err)
{
    char host[256], volume[128], src[512], want[400], name[32];
    cleanup_free char *dir = xasprintf("%s/storage", data_dir);
    struct statfs sfs;

    if (split_spec(spec, host, sizeof(host), volume, sizeof(volume), err) < 0 ||
        fs_mkdir_p(dir, 0700, err) < 0)
        return NULL;
    cleanup_free char *mp = mount_point(data_dir);
    snprintf(want, sizeof(want), "%s:%s", host, volume);
    int rc = mounted(data_dir, src, sizeof(src));
    if (rc == 1 && strcmp(src, want) != 0) {
        detach(data_dir, "the region's backend is another volume now");
        rc = 0;
    } else if (rc == 1 && !client_alive(data_dir)) {
        detach(data_dir, "its client is gone");
        rc = 0;
    }
    if (deny_instances(host, err) < 0 || (rc != 1 && mount_volume(data_dir, host, volume, err) < 0))
        return NULL;
    cleanup_close int top = open(mp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* the volume itself, never the empty directory below it: a renter's
     * files must not land on the host's disk */
    if (top < 0 || fstatfs(top, &sfs) < 0 || sfs.f_type != FUSE_SUPER_MAGIC) {
        sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                "the Gluster volume %s is not reachable from this host: %s", spec,
                top < 0 ? strerror(errno) : "not mounted");
        return NULL;
    }
    snprintf(name, sizeof(name), "%" PRId64, number);
    if (mkdirat(top, name, 0755) < 0 && errno != EEXIST) {
        sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                "unable to make the directory /%s on the Gluster volume %s: %s", name, spec,
                strerror(errno));
        return NULL;
    }
    cleanup_close int fd = openat(top, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        sl_fail_errno(err, "'/%s' on the Gluster volume %s is not a directory", name, spec);
        return NULL;
    }
    return xasprintf("%s/%s", mp, name);
}

/* The limit statvfs reads for path (with quota-deem-statfs, the
 * directory's own), 0 when unknown. */
static uint64_t dir_size(const char *path, uint64_t *used)
{
    struct statvfs fs;
    if (statvfs(path, &fs) < 0)
        return 0;
    if (used)
        *used = (uint64_t)(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
    return (uint64_t)fs.f_blocks * fs.f_frsize;
}

static bool is_quota(uint64_t size, uint64_t quota_gib)
{
    uint64_t want = quota_gib * GIB;
    return size + QUOTA_SLACK >= want && size <= want + QUOTA_SLACK;
}

int gluster_quota_wait(const char *path, uint64_t quota_gib, int64_t timeout_ms,
                       struct sl_error *err)
{
    int64_t deadline = sl_time_mono_ms() + timeout_ms;
    uint64_t size;

    for (;;) {
        size = dir_size(path, NULL);
        if (is_quota(size, quota_gib))
            return 0;
        if (sl_time_mono_ms() >= deadline)
            break;
        usleep(500 * 1000);
    }
    return sl_fail(err, SL_E_UNAVAILABLE, "storage_no_quota",
                   "file storage '%s' has no Gluster quota of %" PRIu64
                   " GiB (its size reads %" PRIu64
                   " bytes): the operator's quota hook sets it (scripts/gluster-quota-hook.sh, "
                   "docs/operations.md), and the volume needs features.quota-deem-statfs on",
                   path, quota_gib, size);
}

int gluster_usage(const char *data_dir, const char *spec, uint64_t quota_gib, int64_t number,
                  uint64_t *used, uint64_t *size)
{
    char host[256], volume[128], src[512], want[400];

    *used = *size = 0;
    if (split_spec(spec, host, sizeof(host), volume, sizeof(volume), NULL) < 0)
        return 0;
    snprintf(want, sizeof(want), "%s:%s", host, volume);
    if (mounted(data_dir, src, sizeof(src)) != 1 || strcmp(src, want) != 0 ||
        !client_alive(data_dir))
        return 0;
    cleanup_free char *path = xasprintf("%s/storage/glusterfs/%" PRId64, data_dir, number);
    uint64_t u = 0, s = dir_size(path, &u);
    /* without its limit, statvfs reads the whole volume: not the renter's */
    if (!is_quota(s, quota_gib))
        return 0;
    *used = u;
    *size = s;
    return 1;
}

void gluster_converge(const char *data_dir, const char *spec)
{
    char host[256], volume[128], src[512], want[400] = "";

    if (mounted(data_dir, src, sizeof(src)) != 1)
        return;
    if (spec && split_spec(spec, host, sizeof(host), volume, sizeof(volume), NULL) == 0)
        snprintf(want, sizeof(want), "%s:%s", host, volume);
    if (strcmp(src, want) != 0)
        detach(data_dir, spec ? "the region's backend is another volume now"
                              : "the region's backend is not glusterfs now");
}
