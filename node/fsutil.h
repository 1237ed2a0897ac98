/* Small file-system chores the node repeats: making directory trees, reading
 * a small file, removing a tree (whole files are written by lib/file.h). */
#ifndef SL_NODE_FSUTIL_H
#define SL_NODE_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../lib/error.h"

/* mkdir -p with exactly this mode (the umask aside) for every directory it
 * creates; existing ones keep theirs. */
int fs_mkdir_p(const char *path, mode_t mode, struct sl_error *err);

/* Removes path and what sl_file_write (lib/file.h) left of it if killed
 * before its rename (path.tmp.*). Missing files are no error. */
void fs_unlink_with_temps(const char *path);

/* Reads a whole file of at most max_len bytes; returns a NUL-terminated copy
 * the caller frees, or NULL (a missing file is SL_E_NOT_FOUND). */
char *fs_read_file(const char *path, size_t max_len, size_t *len, struct sl_error *err);

/* rm -rf path, not crossing into other file systems: a mount point found
 * inside is SL_E_CONFLICT ("mounted") and nothing under it is touched. A
 * missing path is a no-op. */
int fs_remove_tree(const char *path, struct sl_error *err);

/* Whether this process runs in a chroot: a process that setns()es into its
 * mount namespace lands on the namespace's root, outside the chroot. lxcfs
 * does, and so does the runtime's exec (a terminal's shell would start on
 * the host's root, not the instance's). A child does the same and compares
 * the root it lands on. */
bool fs_chrooted(void);

#endif
