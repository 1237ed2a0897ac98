#include "disk.h"
#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define LOOP_MAJOR_NUMBER 7

/* linux/capability.h's CAP_SYS_RESOURCE */
#define CAP_SYS_RESOURCE_BIT 24

/* The inode tables of a fresh sparse file already read as zeros, so the
 * kernel need not zero them behind our back (which would also make the file
 * less sparse). */
#define EXT4_MOUNT_DATA "noinit_itable"

int disk_create(const char *path, uint64_t size_gib, struct sl_error *err)
{
    if (size_gib == 0 || size_gib > DISK_MAX_GIB)
        return sl_fail(err, SL_E_INVALID, "invalid_disk_size",
                       "disk size %llu GiB is out of range: use 1..%d",
                       (unsigned long long)size_gib, DISK_MAX_GIB);

    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return sl_fail(err, SL_E_CONFLICT, "disk_exists", "disk '%s' already exists", path);
        return sl_fail_errno(err, "unable to create '%s'", path);
    }
    if (ftruncate(fd, (off_t)(size_gib << 30)) < 0) {
        sl_fail_errno(err, "unable to size '%s' to %llu GiB", path, (unsigned long long)size_gib);
        unlink(path);
        return -1;
    }

    const char *argv[] = { "mkfs.ext4",
                           "-F",
                           "-q",
                           "-m",
                           "0",
                           "-E",
                           "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0",
                           path,
                           NULL };
    if (sl_run(argv, NULL, err) < 0) {
        unlink(path);
        sl_error_prefix(err, "make file system on '%s'", path);
        /* mkfs says "short write" or "No space left" as it happens to run
         * out: the host's disk, said plainly */
        struct statvfs fs;
        cleanup_free char *dir = xstrdup(path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        if (statvfs(slash ? dir : ".", &fs) == 0 &&
            (uint64_t)fs.f_bavail * fs.f_frsize < DISK_FULL_BELOW_MIB << 20)
            return sl_fail(err, SL_E_STORAGE, "host_disk_full",
                           "no space left on the host's disk for a %llu GiB disk (%llu MiB "
                           "free): release this instance and create it on another host "
                           "(suanli market lists them)",
                           (unsigned long long)size_gib,
                           (unsigned long long)((uint64_t)fs.f_bavail * fs.f_frsize >> 20));
        return -1;
    }
    return 0;
}

/* Undoes the octal escapes (\040 for a space) of /proc/self/mountinfo. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

static void copy_out(char *dst, size_t size, const char *src)
{
    if (dst && size)
        snprintf(dst, size, "%s", src);
}

int disk_mountinfo_find(FILE *f, const char *real, char *src, size_t src_size, char *fstype,
                        size_t fstype_size)
{
    cleanup_free char *line = NULL;
    size_t cap = 0;
    int found = 0;
    /* The last matching line wins: it is the mount on top. */
    while (getline(&line, &cap, f) > 0) {
        char *save = NULL;
        char *field[6] = { 0 };
        char *tok = strtok_r(line, " \n", &save);
        for (int i = 0; tok && i < 5; i++, tok = strtok_r(NULL, " \n", &save))
            field[i] = tok;
        if (!field[4])
            continue;
        unescape(field[4]);
        if (strcmp(field[4], real) != 0)
            continue;
        while (tok && strcmp(tok, "-") != 0)
            tok = strtok_r(NULL, " \n", &save);
        char *type = tok ? strtok_r(NULL, " \n", &save) : NULL;
        char *source = type ? strtok_r(NULL, " \n", &save) : NULL;
        if (!source)
            continue;
        unescape(source);
        copy_out(src, src_size, source);
        copy_out(fstype, fstype_size, type);
        found = 1;
    }
    return found;
}

int disk_mounted(const char *path, char *src, size_t src_size, char *fstype, size_t fstype_size,
                 struct sl_error *err)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        if (errno == ENOENT)
            return 0;
        return sl_fail_errno(err, "unable to resolve '%s'", path);
    }
    cleanup_fclose FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return sl_fail_errno(err, "unable to open '/proc/self/mountinfo'");
    return disk_mountinfo_find(f, real, src, src_size, fstype, fstype_size);
}

/* The backing file of /sys/block/loopN, or "" when it has none. */
static void loop_backing_file(const char *name, char *out, size_t size)
{
    out[0] = '\0';
    char sys[PATH_MAX];
    snprintf(sys, sizeof(sys), "/sys/block/%s/loop/backing_file", name);
    cleanup_fclose FILE *f = fopen(sys, "re");
    if (!f || !fgets(out, (int)size, f)) {
        out[0] = '\0';
        return;
    }
    out[strcspn(out, "\n")] = '\0';
}

int disk_find_loop(const char *path, char *dev, size_t dev_size, struct sl_error *err)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        if (errno == ENOENT)
            return 0;
        return sl_fail_errno(err, "unable to resolve '%s'", path);
    }
    cleanup_dir DIR *d = opendir("/sys/block");
    if (!d)
        return sl_fail_errno(err, "unable to open '/sys/block'");
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "loop", 4) != 0)
            continue;
        char backing[PATH_MAX];
        loop_backing_file(e->d_name, backing, sizeof(backing));
        if (strcmp(backing, real) == 0) {
            snprintf(dev, dev_size, "/dev/%s", e->d_name);
            found = 1;
            break;
        }
    }
    return found;
}

/* Opens /dev/loopN, making the node when no devtmpfs made it (containers). */
static int open_loop(int n)
{
    char dev[64];
    snprintf(dev, sizeof(dev), "/dev/loop%d", n);
    int fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        if (mknod(dev, S_IFBLK | 0660, makedev(LOOP_MAJOR_NUMBER, n)) < 0 && errno != EEXIST)
            return -1;
        fd = open(dev, O_RDWR | O_CLOEXEC);
    }
    return fd;
}

static int loop_configure(int loop_fd, int file_fd, const char *path)
{
    struct loop_config config = { .fd = (unsigned)file_fd };
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    /* The name is only shown (losetup -l) and the kernel keeps LO_NAME_SIZE
     * bytes of it: a longer path is cut, as losetup cuts it. */
    memcpy(config.info.lo_file_name, path, strnlen(path, LO_NAME_SIZE - 1));
    if (ioctl(loop_fd, LOOP_CONFIGURE, &config) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOTTY)
        return -1;
    /* Kernels before 5.8 lack LOOP_CONFIGURE. */
    if (ioctl(loop_fd, LOOP_SET_FD, file_fd) < 0)
        return -1;
    if (ioctl(loop_fd, LOOP_SET_STATUS64, &config.info) < 0) {
        int saved = errno;
        ioctl(loop_fd, LOOP_CLR_FD, 0);
        errno = saved;
        return -1;
    }
    return 0;
}

/* Attaches file_fd to a free loop device; returns its fd and fills dev. Two
 * callers may be handed the same free device: the loser gets EBUSY and asks
 * again. */
static int loop_attach(int file_fd, const char *path, char *dev, size_t dev_size,
                       struct sl_error *err)
{
    cleanup_close int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (control < 0)
        return sl_fail_errno(err, "unable to open '/dev/loop-control'");
    for (int attempt = 0; attempt < 64; attempt++) {
        int n = ioctl(control, LOOP_CTL_GET_FREE);
        if (n < 0)
            return sl_fail_errno(err, "no free loop device");
        int loop_fd = open_loop(n);
        if (loop_fd < 0)
            return sl_fail_errno(err, "unable to open '/dev/loop%d'", n);
        if (loop_configure(loop_fd, file_fd, path) == 0) {
            snprintf(dev, dev_size, "/dev/loop%d", n);
            return loop_fd;
        }
        int saved = errno;
        close(loop_fd);
        if (saved != EBUSY) {
            errno = saved;
            return sl_fail_errno(err, "unable to attach '%s' to '/dev/loop%d'", path, n);
        }
    }
    return sl_fail(err, SL_E_UNAVAILABLE, "loop_busy", "unable to find a free loop device for '%s'",
                   path);
}

int disk_mount(const char *path, const char *mountpoint, struct sl_error *err)
{
    char real[PATH_MAX];
    if (!realpath(path, real))
        return sl_fail_errno(err, "unable to find disk '%s'", path);
    if (fs_mkdir_p(mountpoint, 0755, err) < 0)
        return -1;

    char src[PATH_MAX];
    int mounted = disk_mounted(mountpoint, src, sizeof(src), NULL, 0, err);
    if (mounted < 0)
        return -1;
    if (mounted) {
        char backing[PATH_MAX] = "";
        if (strncmp(src, "/dev/", 5) == 0)
            loop_backing_file(src + 5, backing, sizeof(backing));
        if (strcmp(backing, real) == 0)
            return 0;
        return sl_fail(err, SL_E_CONFLICT, "mountpoint_busy", "'%s' is already mounted at '%s'",
                       src, mountpoint);
    }

    cleanup_close int file_fd = open(real, O_RDWR | O_CLOEXEC);
    if (file_fd < 0)
        return sl_fail_errno(err, "unable to open disk '%s'", real);
    char dev[64];
    /* Closing loop_fd after a failed mount detaches the device (autoclear). */
    cleanup_close int loop_fd = loop_attach(file_fd, real, dev, sizeof(dev), err);
    if (loop_fd < 0)
        return -1;
    if (mount(dev, mountpoint, "ext4", MS_NOSUID | MS_NODEV, EXT4_MOUNT_DATA) < 0)
        return sl_fail_errno(err, "unable to mount '%s' ('%s') at '%s'", real, dev, mountpoint);
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { .tv_sec = ms / SL_MSEC_PER_SEC,
                           .tv_nsec = (ms % SL_MSEC_PER_SEC) * (long)SL_NSEC_PER_MSEC };
    nanosleep(&ts, NULL);
}

int disk_unmount(const char *mountpoint, struct sl_error *err)
{
    char src[PATH_MAX];
    int mounted = disk_mounted(mountpoint, src, sizeof(src), NULL, 0, err);
    if (mounted <= 0)
        return mounted;
    if (umount2(mountpoint, UMOUNT_NOFOLLOW) < 0)
        return sl_fail_errno(err, "unable to unmount '%s'", mountpoint);
    if (strncmp(src, "/dev/loop", 9) != 0)
        return 0;

    /* Autoclear detaches on the last close; make sure of it, so a caller that
     * removes the file next finds it free. */
    char backing[PATH_MAX];
    for (int i = 0; i < 50; i++) {
        loop_backing_file(src + 5, backing, sizeof(backing));
        if (!backing[0])
            return 0;
        sleep_ms(10);
    }
    cleanup_close int fd = open(src, O_RDWR | O_CLOEXEC);
    if (fd < 0 || ioctl(fd, LOOP_CLR_FD, 0) < 0)
        return sl_fail_errno(err, "unable to detach '%s' (backing '%s')", src, backing);
    return 0;
}

int disk_remove(const char *path, struct sl_error *err)
{
    char dev[64];
    int attached = disk_find_loop(path, dev, sizeof(dev), err);
    if (attached < 0)
        return -1;
    if (attached)
        return sl_fail(err, SL_E_CONFLICT, "disk_in_use", "disk '%s' is still attached to '%s'",
                       path, dev);
    if (unlink(path) < 0 && errno != ENOENT)
        return sl_fail_errno(err, "unable to remove '%s'", path);
    return 0;
}

/* Whether the loop device open as loop_fd has the file of st behind it:
 * the sysfs name found it, this makes sure it is that file (same device
 * and inode), not another that a rename put at the path. */
static bool loop_holds(int loop_fd, const struct stat *st)
{
    struct loop_info64 info;
    if (ioctl(loop_fd, LOOP_GET_STATUS64, &info) < 0)
        return false;
    return info.lo_inode == (uint64_t)st->st_ino && info.lo_device == (uint64_t)st->st_dev;
}

/* Whether this process may resize a mounted ext4 (the kernel's
 * EXT4_IOC_RESIZE_FS wants CAP_SYS_RESOURCE; an agent in a container may
 * lack it). */
static bool may_resize_online(void)
{
    cleanup_fclose FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        unsigned long long caps;
        if (sscanf(line, "CapEff: %llx", &caps) == 1)
            return caps >> CAP_SYS_RESOURCE_BIT & 1;
    }
    return false;
}

int disk_grow(const char *path, uint64_t size_gib, struct sl_error *err)
{
    if (size_gib == 0 || size_gib > DISK_MAX_GIB)
        return sl_fail(err, SL_E_INVALID, "invalid_disk_size",
                       "disk size %llu GiB is out of range: use 1..%d",
                       (unsigned long long)size_gib, DISK_MAX_GIB);
    /* the agent's own file, never a link: nothing an instance can reach */
    cleanup_close int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open disk '%s'", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sl_fail_errno(err, "unable to stat '%s'", path);
    if (!S_ISREG(st.st_mode))
        return sl_fail(err, SL_E_INVALID, "not_a_disk", "'%s' is not a disk file", path);
    off_t want = (off_t)(size_gib << 30);
    if (st.st_size > want)
        return sl_fail(err, SL_E_INVALID, "disk_shrink",
                       "disk '%s' is %lld GiB, more than %llu GiB: a disk only grows", path,
                       (long long)(st.st_size >> 30), (unsigned long long)size_gib);

    char dev[64] = "";
    int attached = disk_find_loop(path, dev, sizeof(dev), err);
    if (attached < 0)
        return -1;
    cleanup_close int loop_fd = -1;
    if (attached && !may_resize_online())
        return sl_fail(err, SL_E_UNAVAILABLE, "online_resize_unavailable",
                       "this host's agent lacks CAP_SYS_RESOURCE, which growing a mounted file "
                       "system needs (run suanli-node as root with all capabilities)");
    if (attached) {
        loop_fd = open(dev, O_RDWR | O_CLOEXEC);
        if (loop_fd < 0)
            return sl_fail_errno(err, "unable to open '%s'", dev);
        if (!loop_holds(loop_fd, &st))
            return sl_fail(err, SL_E_CONFLICT, "disk_in_use",
                           "'%s' is not attached to '%s' any more: try again", path, dev);
    }
    /* sparse: the file takes no more room on the host until it is written */
    if (st.st_size < want && ftruncate(fd, want) < 0)
        return sl_fail_errno(err, "unable to grow '%s' to %llu GiB", path,
                             (unsigned long long)size_gib);
    if (attached) {
        /* the loop device reads its size again; resize2fs then grows the
         * mounted ext4 online (the kernel's EXT4_IOC_RESIZE_FS) */
        if (ioctl(loop_fd, LOOP_SET_CAPACITY, 0) < 0)
            return sl_fail_errno(err, "unable to resize '%s'", dev);
        const char *argv[] = { "resize2fs", dev, NULL };
        if (sl_run(argv, NULL, err) < 0) {
            sl_error_prefix(err, "grow the file system of '%s' (online)", path);
            return -1;
        }
        return 0;
    }
    /* not mounted: resize2fs wants a checked file system first; -p mends
     * only what is safe (exit 1: it did) */
    const char *fsck[] = { "e2fsck", "-f", "-p", path, NULL };
    struct sl_subprocess sp = { .argv = fsck };
    int rc = sl_subprocess_run(&sp, err);
    if (rc < 0)
        return -1;
    if (rc > 1)
        return sl_fail(err, SL_E_INTERNAL, "fsck_failed",
                       "e2fsck of '%s' exited %d: the file system needs a manual check", path, rc);
    const char *argv[] = { "resize2fs", path, NULL };
    if (sl_run(argv, NULL, err) < 0) {
        sl_error_prefix(err, "grow the file system of '%s'", path);
        return -1;
    }
    return 0;
}
