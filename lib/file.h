/* Writing a whole file safely: readers see the old content or the new, never
 * a part, and a crash right after a successful return does not lose it. */
#ifndef SL_FILE_H
#define SL_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

enum sl_file_flags {
    /* Fail with EEXIST ("unable to create") if path exists, leaving it as it
     * was: the new file is linked into place instead of renamed. */
    SL_FILE_EXCLUSIVE = 1 << 0,
};

/* The temporaries sl_file_write makes are named PATH.tmp.PID.N (next to
 * PATH, so the rename stays on one file system); a writer killed before the
 * rename leaves one behind, which removing PATH.tmp.* cleans up. */
#define SL_FILE_TEMP_INFIX ".tmp."

/* Writes len bytes of data to path: a temporary in the same directory,
 * written in full, given exactly `mode` (whatever the umask) and fsync'ed,
 * then renamed over path (or linked, with SL_FILE_EXCLUSIVE), and the
 * directory fsync'ed. On failure no temporary is left and path is untouched. */
int sl_file_write(const char *path, const void *data, size_t len, mode_t mode, unsigned flags,
                  struct sl_error *err);

/* fsync(2) of a directory, so a rename or link in it survives a crash (a
 * file system that cannot sync directories is taken as done). */
int sl_file_sync_dir(const char *dir, struct sl_error *err);

#endif
