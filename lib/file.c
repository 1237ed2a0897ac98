#include "file.h"
#include "cleanup.h"
#include "xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* The rename or link is only durable once the directory entry is on disk. */
int sl_file_sync_dir(const char *dir, struct sl_error *err)
{
    cleanup_close int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s'", dir);
    /* Some file systems cannot sync a directory; nothing more to do there. */
    if (fsync(fd) < 0 && errno != EINVAL)
        return sl_fail_errno(err, "unable to sync '%s'", dir);
    return 0;
}

static int sync_parent(const char *path, struct sl_error *err)
{
    cleanup_free char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    return sl_file_sync_dir(dir, err);
}

/* Creates a fresh temporary next to path; several threads of one process may
 * write the same path at once, hence the counter besides the pid. */
static int open_temp(const char *path, mode_t mode, char **tmp_out, struct sl_error *err)
{
    static atomic_uint counter;

    for (int tries = 0;; tries++) {
        char *tmp = xasprintf("%s" SL_FILE_TEMP_INFIX "%d.%u", path, (int)getpid(),
                              atomic_fetch_add(&counter, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd >= 0) {
            *tmp_out = tmp;
            return fd;
        }
        int saved = errno;
        if (saved != EEXIST || tries >= 100) {
            errno = saved;
            sl_fail_errno(err, "unable to create '%s'", tmp);
            free(tmp);
            return -1;
        }
        free(tmp);
    }
}

int sl_file_write(const char *path, const void *data, size_t len, mode_t mode, unsigned flags,
                  struct sl_error *err)
{
    cleanup_free char *tmp = NULL;
    cleanup_close int fd = open_temp(path, mode, &tmp, err);
    if (fd < 0)
        return -1;
    if (write_all(fd, data, len) < 0 || fchmod(fd, mode) < 0 || fsync(fd) < 0) {
        sl_fail_errno(err, "unable to write '%s'", tmp);
        goto fail;
    }
    if (flags & SL_FILE_EXCLUSIVE) {
        if (link(tmp, path) < 0) {
            sl_fail_errno(err, "unable to create '%s'", path);
            goto fail;
        }
        unlink(tmp);
    } else if (rename(tmp, path) < 0) {
        sl_fail_errno(err, "unable to rename '%s' to '%s'", tmp, path);
        goto fail;
    }
    return sync_parent(path, err);
fail:
    unlink(tmp);
    return -1;
}
