/* Private files: what suanlid and suanli-node keep in their data directories
 * (the store, keys, tokens, instance state) is theirs alone, whoever else has
 * an account on the host (docs/design/control-plane.md, "Private files").
 *
 * Both set the umask at start, make the data directory private whether or
 * not it existed, and sweep what an older version (or an operator's cp)
 * left readable by others, logging each change through `report`. */
#ifndef SL_PRIVATE_H
#define SL_PRIVATE_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

/* Called for each path whose mode was narrowed: was and now are the
 * permission bits. */
typedef void (*sl_private_report_fn)(void *ctx, const char *path, mode_t was, mode_t now);

/* umask 077: from now on a file or directory the process (and a program it
 * runs) creates is its owner's only, unless the creator chmods it. */
void sl_private_umask(void);

/* Makes path a directory only its owner can use: created 0700 (missing
 * parents too) or, when it exists, its group and other bits cleared. Fails
 * when path exists and is not a directory. */
int sl_private_dir(const char *path, sl_private_report_fn report, void *ctx, struct sl_error *err);

/* Clears the group and other bits of every file and directory below root
 * that has any, without following symbolic links or entering other file
 * systems (an instance's mounted disks are the renter's), and without
 * entering the subtrees for which skip (may be NULL) is true; skip gets
 * the path relative to root ("layers/sha256/ab12.../rootfs"). Returns the
 * number of paths changed, or -1 when root cannot be read. */
int sl_private_sweep(const char *root, bool (*skip)(const char *relative),
                     sl_private_report_fn report, void *ctx, struct sl_error *err);

#endif
