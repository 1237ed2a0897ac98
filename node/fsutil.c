#include "fsutil.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <sched.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir with exactly mode, whatever the umask (077 in the agent, private.h):
 * an instance's mount points and overlay directories must stay 0755. */
static int make_dir(const char *path, mode_t mode, struct sl_error *err)
{
    if (mkdir(path, mode) < 0)
        return errno == EEXIST ? 0 : sl_fail_errno(err, "unable to create '%s'", path);
    if (chmod(path, mode) < 0)
        return sl_fail_errno(err, "unable to set the mode of '%s'", path);
    return 0;
}

int fs_mkdir_p(const char *path, mode_t mode, struct sl_error *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return sl_fail(err, SL_E_INVALID, "path_too_long", "path '%s' is too long", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (make_dir(tmp, mode, err) < 0)
            return -1;
        *p = '/';
    }
    return make_dir(tmp, mode, err);
}

void fs_unlink_with_temps(const char *path)
{
    cleanup_free char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;

    unlink(path);
    if (slash)
        *slash = '\0';
    cleanup_free char *prefix = xasprintf("%s" SL_FILE_TEMP_INFIX, base);
    cleanup_dir DIR *d = opendir(slash ? (*dir ? dir : "/") : ".");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
}

char *fs_read_file(const char *path, size_t max_len, size_t *len, struct sl_error *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            sl_fail(err, SL_E_NOT_FOUND, "not_found", "no file '%s'", path);
            return NULL;
        }
        sl_fail_errno(err, "unable to open '%s'", path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    cleanup_free char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap >= max_len) {
                sl_fail(err, SL_E_TOO_LARGE, "file_too_large", "'%s' is over %zu bytes", path,
                        max_len);
                return NULL;
            }
            cap *= 2;
            buf = xrealloc(buf, cap + 1);
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            sl_fail_errno(err, "unable to read '%s'", path);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > max_len) {
        sl_fail(err, SL_E_TOO_LARGE, "file_too_large", "'%s' is over %zu bytes", path, max_len);
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return TAKE_PTR(buf);
}

static int remove_at(int parent_fd, const char *name, dev_t dev, const char *top,
                     struct sl_error *err)
{
    struct stat st;
    if (fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return 0;
        return sl_fail_errno(err, "unable to stat '%s' under '%s'", name, top);
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(parent_fd, name, 0) < 0 && errno != ENOENT)
            return sl_fail_errno(err, "unable to remove '%s' under '%s'", name, top);
        return 0;
    }
    if (st.st_dev != dev)
        return sl_fail(err, SL_E_CONFLICT, "mounted", "'%s' under '%s' is a mount point", name,
                       top);
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sl_fail_errno(err, "unable to open '%s' under '%s'", name, top);
    /* Layers are made read-only after import; give ourselves write access. */
    fchmod(fd, 0700);
    cleanup_dir DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return sl_fail_errno(err, "unable to read '%s' under '%s'", name, top);
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        rc = remove_at(dirfd(d), e->d_name, dev, top, err);
    }
    if (rc == 0 && unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return sl_fail_errno(err, "unable to remove '%s' under '%s'", name, top);
    return rc;
}

int fs_remove_tree(const char *path, struct sl_error *err)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        return sl_fail_errno(err, "unable to stat '%s'", path);
    }
    return remove_at(AT_FDCWD, path, st.st_dev, path, err);
}

bool fs_chrooted(void)
{
    struct stat mine;
    if (stat("/", &mine) < 0)
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        struct stat there;
        int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNS) < 0 || stat("/", &there) < 0)
            _exit(0);
        _exit(there.st_dev != mine.st_dev || there.st_ino != mine.st_ino);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) && WEXITSTATUS(status) == 1;
}
