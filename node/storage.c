/* File storage on this host (storage.h). */
#include "storage.h"
#include "disk.h"
#include "storage-gluster.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define GIB (1ULL << 30)
/* how long a start waits for the operator's hook to set a new Gluster
 * directory's quota (storage-gluster.h) */
#define STORAGE_QUOTA_WAIT_MS 60000

static pthread_mutex_t storage_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *kind_of(json_t *backend)
{
    const char *k = json_string_value(json_object_get(backend, "kind"));
    return k ? k : "";
}

static char *image_path(const char *data_dir, int64_t number)
{
    return xasprintf("%s/storage/%" PRId64 ".img", data_dir, number);
}

static char *local_mount(const char *data_dir, int64_t number)
{
    return xasprintf("%s/storage/mnt/%" PRId64, data_dir, number);
}

/* The size the mounted file system has, in bytes; 0 when unknown. */
static uint64_t fs_size(const char *path)
{
    struct statvfs fs;
    return statvfs(path, &fs) == 0 ? (uint64_t)fs.f_blocks * fs.f_frsize : 0;
}

/* An image of quota_gib made (sparse), grown when the quota grew and it is
 * not mounted (offline: no capability needed), and mounted. An image still
 * attached to a loop device (held by a container after its host mount went)
 * is mounted from that device: the same file system, never a second one on
 * another device. */
static char *prepare_local(const char *data_dir, uint64_t quota_gib, int64_t number,
                           struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/storage", data_dir);
    cleanup_free char *mnt = xasprintf("%s/storage/mnt", data_dir);
    cleanup_free char *image = image_path(data_dir, number);
    char *mp = local_mount(data_dir, number);
    struct stat st;
    char dev[64];
    int mounted, attached;

    if (fs_mkdir_p(dir, 0700, err) < 0 || fs_mkdir_p(mnt, 0700, err) < 0)
        goto fail;
    if (lstat(image, &st) < 0) {
        if (errno != ENOENT) {
            sl_fail_errno(err, "unable to stat '%s'", image);
            goto fail;
        }
        if (disk_create(image, quota_gib, err) < 0)
            goto fail;
        log_info("agent: storage %" PRId64 ": made a %" PRIu64 " GiB image", number, quota_gib);
    } else if (!S_ISREG(st.st_mode)) {
        sl_fail(err, SL_E_INTERNAL, "bad_storage", "'%s' is not a regular file", image);
        goto fail;
    }
    if ((mounted = disk_mounted(mp, NULL, 0, NULL, 0, err)) < 0 ||
        (attached = disk_find_loop(image, dev, sizeof(dev), err)) < 0)
        goto fail;
    if (!mounted && attached) {
        if (fs_mkdir_p(mp, 0700, err) < 0)
            goto fail;
        if (mount(dev, mp, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0) {
            sl_fail_errno(err, "unable to mount '%s' ('%s') at '%s'", image, dev, mp);
            goto fail;
        }
    } else if (!mounted) {
        struct sl_error e = SL_ERROR_INIT;
        if (lstat(image, &st) == 0 && (uint64_t)st.st_size < quota_gib * GIB &&
            disk_grow(image, quota_gib, &e) < 0)
            log_warn("agent: file storage %" PRId64 ": %s", number, e.message);
        if (disk_mount(image, mp, err) < 0)
            goto fail;
    }
    /* the top of the file system is the renter's /root/storage */
    if (chmod(mp, 0755) < 0) {
        sl_fail_errno(err, "unable to chmod '%s'", mp);
        goto fail;
    }
    return mp;
fail:
    free(mp);
    sl_error_prefix(err, "file storage %" PRId64, number);
    return NULL;
}

/* SPEC/<n> on the operator's shared mount, which must be a file system
 * other than the host's root (an unmounted share would fill the host's
 * disk unseen). */
static char *prepare_mount(const char *spec, int64_t number, struct sl_error *err)
{
    char real[PATH_MAX];
    struct stat st, root;
    char name[32];

    if (!spec || spec[0] != '/' || !realpath(spec, real)) {
        sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                "the storage backend's path '%s' is not on this host: the operator must mount "
                "the shared file system there",
                spec ? spec : "");
        return NULL;
    }
    if (stat(real, &st) < 0 || !S_ISDIR(st.st_mode) || stat("/", &root) < 0) {
        sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                "the storage backend's path '%s' is not a directory on this host", spec);
        return NULL;
    }
    if (st.st_dev == root.st_dev) {
        sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                "the storage backend's path '%s' is on the host's root file system, not on a "
                "shared mount: the operator must mount it there first",
                spec);
        return NULL;
    }
    cleanup_close int top = open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (top < 0) {
        sl_fail_errno(err, "unable to open '%s'", real);
        return NULL;
    }
    snprintf(name, sizeof(name), "%" PRId64, number);
    if (mkdirat(top, name, 0755) < 0 && errno != EEXIST) {
        sl_fail_errno(err, "unable to make '%s/%s'", real, name);
        return NULL;
    }
    /* the renter's own directory, not a link someone put there */
    cleanup_close int fd = openat(top, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        sl_fail_errno(err, "'%s/%s' is not a directory", real, name);
        return NULL;
    }
    return xasprintf("%s/%s", real, name);
}

char *storage_prepare(const char *data_dir, json_t *backend, int64_t number, struct sl_error *err)
{
    const char *kind = kind_of(backend);
    int64_t quota = json_integer_value(json_object_get(backend, "quota_gib"));
    char *path = NULL;

    if (number <= 0) {
        sl_fail(err, SL_E_INVALID, "bad_storage", "no file storage number");
        return NULL;
    }
    pthread_mutex_lock(&storage_lock);
    if (strcmp(kind, "local") == 0)
        path = quota > 0 && quota <= DISK_MAX_GIB
                   ? prepare_local(data_dir, (uint64_t)quota, number, err)
                   : (sl_fail(err, SL_E_INVALID, "bad_storage", "no file storage quota"), NULL);
    else if (strcmp(kind, "mount") == 0)
        path = prepare_mount(json_string_value(json_object_get(backend, "spec")), number, err);
    else if (strcmp(kind, "glusterfs") == 0)
        path = gluster_prepare(data_dir, json_string_value(json_object_get(backend, "spec")),
                               number, err);
    else
        sl_fail(err, SL_E_UNAVAILABLE, "storage_unavailable",
                "this agent does not know the storage backend '%s': update it", kind);
    pthread_mutex_unlock(&storage_lock);
    /* never bound before its quota holds; waited for outside the lock (the
     * heartbeat's report takes it) */
    if (path && strcmp(kind, "glusterfs") == 0 &&
        (quota <= 0 || gluster_quota_wait(path, (uint64_t)quota, STORAGE_QUOTA_WAIT_MS, err) < 0)) {
        if (quota <= 0)
            sl_fail(err, SL_E_INVALID, "bad_storage", "no file storage quota");
        free(path);
        path = NULL;
    }
    return path;
}

/* Whether an instance of the desired state that should run has the
 * storage `number`: its image may be bound in a container. */
static bool wanted_running(json_t *instances, int64_t number)
{
    size_t i;
    json_t *d;
    json_array_foreach(instances, i, d)
    {
        const char *want = json_string_value(json_object_get(d, "desired"));
        if (json_integer_value(json_object_get(d, "storage")) == number && want &&
            strcmp(want, "running") == 0)
            return true;
    }
    return false;
}

/* Whether an instance of the desired state that is not being released has
 * the storage `number`. */
static bool wanted(json_t *instances, int64_t number)
{
    size_t i;
    json_t *d;
    json_array_foreach(instances, i, d)
    {
        const char *want = json_string_value(json_object_get(d, "desired"));
        if (json_integer_value(json_object_get(d, "storage")) == number && want &&
            strcmp(want, "released") != 0)
            return true;
    }
    return false;
}

/* Unmounts the local images no instance here wants any more (all of them
 * when the backend is no longer local). A container still holding one
 * keeps its file system through its bind, and its loop device detaches
 * itself when the container goes (autoclear); prepare_local mounts an
 * image still attached from its own device. False when one was busy. */
static bool unmount_unused(const char *data_dir, bool local, json_t *instances)
{
    cleanup_free char *dir = xasprintf("%s/storage/mnt", data_dir);
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;
    bool done = true;

    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n == 0 || n > 18 || strspn(e->d_name, "0123456789") != n)
            continue;
        int64_t number = strtoll(e->d_name, NULL, 10);
        if (local && wanted(instances, number))
            continue;
        cleanup_free char *mp = local_mount(data_dir, number);
        struct sl_error err = SL_ERROR_INIT;
        int mounted = disk_mounted(mp, NULL, 0, NULL, 0, NULL);
        if (mounted == 1 && disk_unmount(mp, &err) < 0) {
            log_debug("agent: file storage %" PRId64 ": %s", number, err.message);
            done = false;
            continue;
        }
        if (mounted == 0) {
            rmdir(mp);
            continue;
        }
        log_info("agent: file storage %" PRId64 " unmounted: no instance here uses it", number);
        rmdir(mp);
    }
    return done;
}

/* {number: quota_gib} of online grows that failed: not tried again (nor
 * logged) until the quota changes or the storage is free to grow offline */
static json_t *grow_failed;
/* what the last pass looked at: the backend and the instances' desired
 * states; a pass with the same has nothing new to do */
static json_t *last_seen;
/* when a pass with nothing new runs all the same (a container was still
 * stopping); 0: never */
static int64_t retry_at;
#define STORAGE_RETRY_MS 2000

void storage_converge(const char *data_dir, json_t *backend, json_t *instances)
{
    int64_t quota = json_integer_value(json_object_get(backend, "quota_gib"));
    size_t i;
    json_t *n;

    bool local = strcmp(kind_of(backend), "local") == 0 && quota > 0 && quota <= DISK_MAX_GIB;
    json_t *states = json_array();
    json_array_foreach(instances, i, n)
    {
        json_t *number = json_object_get(n, "storage"), *want = json_object_get(n, "desired");
        json_array_append_new(states, json_pack("[I, s]", (json_int_t)json_integer_value(number),
                                                want ? json_string_value(want) : ""));
    }
    json_t *seen = json_pack("{s:O, s:o}", "backend", backend, "states", states);
    int64_t now = sl_time_mono_ms();
    pthread_mutex_lock(&storage_lock);
    if (last_seen && json_equal(seen, last_seen) && (!retry_at || now < retry_at)) {
        pthread_mutex_unlock(&storage_lock);
        json_decref(seen);
        return;
    }
    json_decref(last_seen);
    last_seen = seen;
    retry_at = 0;
    if (!unmount_unused(data_dir, local, instances))
        retry_at = now + STORAGE_RETRY_MS;
    gluster_converge(data_dir, strcmp(kind_of(backend), "glusterfs") == 0
                                   ? json_string_value(json_object_get(backend, "spec"))
                                   : NULL);
    if (!local) {
        pthread_mutex_unlock(&storage_lock);
        return;
    }
    if (!grow_failed)
        grow_failed = json_object();
    json_array_foreach(json_object_get(backend, "dirs"), i, n)
    {
        int64_t number = json_integer_value(n);
        cleanup_free char *mp = local_mount(data_dir, number);
        cleanup_free char *image = image_path(data_dir, number);
        struct sl_error err = SL_ERROR_INIT;
        char key[32];
        if (number <= 0 || disk_mounted(mp, NULL, 0, NULL, 0, NULL) != 1 ||
            fs_size(mp) + (GIB >> 1) >= (uint64_t)quota * GIB)
            continue;
        snprintf(key, sizeof(key), "%" PRId64, number);
        bool running = wanted_running(instances, number);
        int rc;
        if (running) {
            /* online, in place: the instances see it at once */
            if (json_integer_value(json_object_get(grow_failed, key)) == quota)
                continue;
            rc = disk_grow(image, (uint64_t)quota, &err);
        } else {
            /* nothing should run with it here: unmounted, grown offline,
             * mounted again. A container still stopping holds its loop
             * device: mounted again from there, ungrown, and tried again
             * in a while. */
            struct sl_error busy = SL_ERROR_INIT;
            if (disk_unmount(mp, &busy) < 0) {
                free(prepare_local(data_dir, (uint64_t)quota, number, &err));
                retry_at = now + STORAGE_RETRY_MS;
                continue;
            }
            free(prepare_local(data_dir, (uint64_t)quota, number, &err));
            rc = fs_size(mp) + (GIB >> 1) >= (uint64_t)quota * GIB ? 0 : -1;
        }
        if (rc < 0) {
            if (json_integer_value(json_object_get(grow_failed, key)) != quota)
                log_warn("agent: file storage %" PRId64 ": %s%s", number,
                         err.message[0] ? err.message : "not grown",
                         running ? "; it grows once no instance here runs with it" : "");
            json_object_set_new(grow_failed, key, json_integer((json_int_t)quota));
        } else {
            json_object_del(grow_failed, key);
            log_info("agent: file storage %" PRId64 " grown to %" PRId64 " GiB", number, quota);
        }
    }
    pthread_mutex_unlock(&storage_lock);
}

/* The bytes (allocated blocks) below the directory fd, never following a
 * link nor leaving its file system; at most `budget` entries. Takes fd. */
static uint64_t walk(int fd, dev_t dev, int depth, uint64_t *budget)
{
    DIR *d = fdopendir(fd);
    struct dirent *e;
    uint64_t bytes = 0;

    if (!d) {
        close(fd);
        return 0;
    }
    while ((e = readdir(d)) && *budget > 0) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        (*budget)--;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != dev)
            continue;
        bytes += (uint64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode) && depth < 256) {
            int sub = openat(dirfd(d), e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
            if (sub < 0)
                sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                bytes += walk(sub, dev, depth + 1, budget);
        }
    }
    closedir(d);
    return bytes;
}

/* mount: a walk per directory at most every STORAGE_WALK_MS (the heartbeat
 * comes more often), remembered here */
#define STORAGE_WALK_MS 20000
/* a walk runs in the heartbeat: a renter's million empty files must not
 * hold it up (past this, the use reported is what was counted) */
#define STORAGE_WALK_MAX_ENTRIES 200000
static json_t *walked; /* {number: [bytes, at_ms]} */

static uint64_t mount_usage(const char *spec, int64_t number)
{
    char key[32], real[PATH_MAX];
    int64_t now = sl_time_mono_ms();
    snprintf(key, sizeof(key), "%" PRId64, number);
    if (!walked)
        walked = json_object();
    json_t *w = json_object_get(walked, key);
    if (w && now - json_integer_value(json_array_get(w, 1)) < STORAGE_WALK_MS)
        return (uint64_t)json_integer_value(json_array_get(w, 0));
    if (!spec || !realpath(spec, real))
        return 0;
    cleanup_close int top = open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = top < 0 ? -1 : openat(top, key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    uint64_t budget = STORAGE_WALK_MAX_ENTRIES;
    uint64_t bytes = walk(fd, st.st_dev, 0, &budget);
    json_object_set_new(walked, key, json_pack("[I, I]", (json_int_t)bytes, (json_int_t)now));
    return bytes;
}

json_t *storage_report(const char *data_dir, json_t *backend)
{
    const char *kind = kind_of(backend);
    json_t *out = json_array();
    size_t i;
    json_t *n;

    pthread_mutex_lock(&storage_lock);
    json_array_foreach(json_object_get(backend, "dirs"), i, n)
    {
        int64_t number = json_integer_value(n);
        if (number <= 0)
            continue;
        if (strcmp(kind, "local") == 0) {
            cleanup_free char *mp = local_mount(data_dir, number);
            struct statvfs fs;
            if (disk_mounted(mp, NULL, 0, NULL, 0, NULL) != 1 || statvfs(mp, &fs) < 0)
                continue;
            uint64_t size = (uint64_t)fs.f_blocks * fs.f_frsize;
            uint64_t used = (uint64_t)(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
            json_array_append_new(out, json_pack("{s:I, s:I, s:I}", "number", (json_int_t)number,
                                                 "used_bytes", (json_int_t)used, "size_bytes",
                                                 (json_int_t)size));
        } else if (strcmp(kind, "mount") == 0) {
            uint64_t used =
                mount_usage(json_string_value(json_object_get(backend, "spec")), number);
            json_array_append_new(out, json_pack("{s:I, s:I, s:I}", "number", (json_int_t)number,
                                                 "used_bytes", (json_int_t)used, "size_bytes",
                                                 (json_int_t)0));
        } else if (strcmp(kind, "glusterfs") == 0) {
            uint64_t used, size;
            int64_t quota = json_integer_value(json_object_get(backend, "quota_gib"));
            if (quota <= 0 ||
                gluster_usage(data_dir, json_string_value(json_object_get(backend, "spec")),
                              (uint64_t)quota, number, &used, &size) != 1)
                continue;
            json_array_append_new(out, json_pack("{s:I, s:I, s:I}", "number", (json_int_t)number,
                                                 "used_bytes", (json_int_t)used, "size_bytes",
                                                 (json_int_t)size));
        }
    }
    pthread_mutex_unlock(&storage_lock);
    return out;
}
