#include "private.h"
#include "cleanup.h"
#include "xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define OTHERS ((mode_t)(S_IRWXG | S_IRWXO))

void sl_private_umask(void)
{
    umask(077);
}

static int make_parents(char *path, struct sl_error *err)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0700);
        *p = '/';
        if (rc < 0 && errno != EEXIST) {
            *p = '\0';
            sl_fail_errno(err, "unable to create '%s'", path);
            *p = '/';
            return -1;
        }
    }
    return 0;
}

int sl_private_dir(const char *path, sl_private_report_fn report, void *ctx, struct sl_error *err)
{
    cleanup_free char *copy = xstrdup(path);
    struct stat st;

    if (make_parents(copy, err) < 0)
        return -1;
    if (mkdir(path, 0700) == 0)
        return chmod(path, 0700) < 0 ? sl_fail_errno(err, "unable to chmod '%s'", path) : 0;
    if (errno != EEXIST)
        return sl_fail_errno(err, "unable to create '%s'", path);
    if (stat(path, &st) < 0)
        return sl_fail_errno(err, "unable to stat '%s'", path);
    if (!S_ISDIR(st.st_mode))
        return sl_fail(err, SL_E_INVALID, "not_a_directory",
                       "'%s' exists and is not a directory: move it away or choose another "
                       "data directory",
                       path);
    if (!(st.st_mode & OTHERS))
        return 0;
    if (chmod(path, st.st_mode & 07700) < 0)
        return sl_fail_errno(err, "unable to chmod '%s'", path);
    if (report)
        report(ctx, path, st.st_mode & 07777, st.st_mode & 07700);
    return 0;
}

int sl_private_sweep(const char *root, bool (*skip)(const char *relative),
                     sl_private_report_fn report, void *ctx, struct sl_error *err)
{
    char *const roots[] = { (char *)root, NULL };
    size_t root_len = strlen(root);
    struct stat top;
    int changed = 0;

    if (lstat(root, &top) < 0)
        return sl_fail_errno(err, "unable to read '%s'", root);
    FTS *fts = fts_open(roots, FTS_PHYSICAL | FTS_XDEV | FTS_NOCHDIR, NULL);
    if (!fts)
        return sl_fail_errno(err, "unable to read '%s'", root);
    for (FTSENT *e; (e = fts_read(fts));) {
        if (e->fts_info == FTS_DP || e->fts_info == FTS_SL || e->fts_info == FTS_SLNONE ||
            e->fts_info == FTS_NS || e->fts_info == FTS_ERR || e->fts_info == FTS_DNR ||
            e->fts_info == FTS_DC)
            continue;
        /* a mount point shows the mounted file system's root: not ours */
        if (e->fts_statp->st_dev != top.st_dev) {
            fts_set(fts, e, FTS_SKIP);
            continue;
        }
        const char *rel = e->fts_path + root_len;
        rel += *rel == '/';
        if (*rel && skip && skip(rel)) {
            fts_set(fts, e, FTS_SKIP);
            continue;
        }
        mode_t mode = e->fts_statp->st_mode;
        if (!(mode & OTHERS))
            continue;
        /* not a symbolic link (FTS_PHYSICAL reports those as FTS_SL) */
        if (fchmodat(AT_FDCWD, e->fts_accpath, mode & 07700, 0) < 0)
            continue; /* gone meanwhile */
        changed++;
        if (report)
            report(ctx, e->fts_path, mode & 07777, mode & 07700);
    }
    fts_close(fts);
    return changed;
}
