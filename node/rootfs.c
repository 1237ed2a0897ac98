#include "rootfs.h"
#include "disk.h"
#include "fsutil.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* overlayfs takes its options in one page. */
#define OVERLAY_OPTIONS_MAX 4096

/* Paths go into a comma- and colon-separated option string unescaped. */
static bool plain_path(const char *p)
{
    return p[0] == '/' && !strpbrk(p, ",:\\");
}

int rootfs_mount(const char *const *lowers, size_t n_lowers, const char *upper, const char *work,
                 const char *target, struct sl_error *err)
{
    if (n_lowers == 0)
        return sl_fail(err, SL_E_INVALID, "no_layers", "an overlay needs at least one layer");
    for (size_t i = 0; i < n_lowers; i++) {
        if (!plain_path(lowers[i]))
            return sl_fail(err, SL_E_INVALID, "bad_path", "layer path '%s' is not usable",
                           lowers[i]);
    }
    if (!plain_path(upper) || !plain_path(work))
        return sl_fail(err, SL_E_INVALID, "bad_path", "upper '%s' or work '%s' is not usable",
                       upper, work);

    if (fs_mkdir_p(target, 0755, err) < 0 || fs_mkdir_p(upper, 0755, err) < 0 ||
        fs_mkdir_p(work, 0755, err) < 0)
        return -1;

    char fstype[32];
    int mounted = disk_mounted(target, NULL, 0, fstype, sizeof(fstype), err);
    if (mounted < 0)
        return -1;
    if (mounted) {
        if (strcmp(fstype, "overlay") == 0)
            return 0;
        return sl_fail(err, SL_E_CONFLICT, "mountpoint_busy", "'%s' already holds a '%s' mount",
                       target, fstype);
    }

    cleanup_buf struct sl_buf opts = SL_BUF_INIT;
    sl_buf_adds(&opts, "lowerdir=");
    for (size_t i = 0; i < n_lowers; i++)
        sl_buf_addf(&opts, "%s%s", i ? ":" : "", lowers[i]);
    /* index=off and xino=off: the upper layer must mount again over other
     * copies of the same lower layers (after an image moves or is
     * re-imported), and redirect_dir stays off so "save image" can read the
     * upper layer as a plain diff. */
    sl_buf_addf(&opts, ",upperdir=%s,workdir=%s,index=off,xino=off,redirect_dir=off", upper, work);
    int rc = 0;
    if (opts.len >= OVERLAY_OPTIONS_MAX)
        rc = sl_fail(err, SL_E_INVALID, "too_many_layers", "overlay options for '%s' are too long",
                     target);
    else if (mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts.data) < 0)
        rc = sl_fail_errno(err, "unable to mount overlay at '%s'", target);
    return rc;
}

int rootfs_unmount(const char *target, struct sl_error *err)
{
    char fstype[32];
    int mounted = disk_mounted(target, NULL, 0, fstype, sizeof(fstype), err);
    if (mounted <= 0)
        return mounted;
    if (strcmp(fstype, "overlay") != 0)
        return sl_fail(err, SL_E_CONFLICT, "not_overlay", "'%s' holds a '%s' mount, not an overlay",
                       target, fstype);
    if (umount2(target, UMOUNT_NOFOLLOW) < 0)
        return sl_fail_errno(err, "unable to unmount '%s'", target);
    return 0;
}

const char *const rootfs_etc_files[3] = { "hosts", "hostname", "resolv.conf" };

/* The host's resolvers, less loopback ones, which mean nothing inside. */
static char *resolv_conf(void)
{
    struct sl_error e = SL_ERROR_INIT;
    cleanup_free char *host = fs_read_file("/etc/resolv.conf", 64 * 1024, NULL, &e);
    sl_error_warn(host ? 0 : -1, &e, "instances get no name servers");
    cleanup_buf struct sl_buf out = SL_BUF_INIT;
    sl_buf_adds(&out, "# written by suanli-node from the host's resolv.conf\n");
    char *save = NULL;
    for (char *line = host ? strtok_r(host, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "nameserver", 10) == 0 &&
            (strstr(line, " 127.") || strstr(line, " ::1") || strstr(line, "\t127.")))
            continue;
        sl_buf_addf(&out, "%s\n", line);
    }
    return sl_buf_detach(&out, NULL);
}

static int write_in_place(const char *path, const char *text, struct sl_error *err)
{
    size_t len = strlen(text), done = 0;
    cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s'", path);
    /* the renter may have changed them through the bind mount */
    if (fchown(fd, 0, 0) < 0 || fchmod(fd, 0644) < 0)
        return sl_fail_errno(err, "unable to reset the owner and mode of '%s'", path);
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sl_fail_errno(err, "unable to write '%s'", path);
        done += (size_t)n;
    }
    return 0;
}

int rootfs_write_etc(const char *dir, const char *id, struct sl_error *err)
{
    /* no ::1: IPv6 is off inside (oci.c), and a program that tried it
     * first for "localhost" would only fail over */
    cleanup_free char *hosts = xasprintf("127.0.0.1\tlocalhost\n127.0.1.1\t%s\n", id);
    cleanup_free char *hostname = xasprintf("%s\n", id);
    cleanup_free char *resolv = resolv_conf();
    const char *text[] = { hosts, hostname, resolv };

    if (fs_mkdir_p(dir, 0755, err) < 0)
        return -1;
    for (size_t i = 0; i < ARRAY_SIZE(rootfs_etc_files); i++) {
        cleanup_free char *path = xasprintf("%s/%s", dir, rootfs_etc_files[i]);
        if (write_in_place(path, text[i], err) < 0)
            return -1;
    }
    return 0;
}
