/* An instance's root file system: overlayfs with the image's read-only layer
 * directories as lower layers and its upper/work directories on the
 * instance's mounted system disk (DESIGN.md section 6). */
#ifndef SL_NODE_ROOTFS_H
#define SL_NODE_ROOTFS_H

#include <stddef.h>

#include "../lib/error.h"

/* Mounts the overlay at target (created if missing). lowers[0] is the top
 * layer, lowers[n_lowers-1] the base, as overlayfs's lowerdir= wants them.
 * upper and work are created (0755) if missing; they must be on one file
 * system. Mounting the same overlay twice is a no-op; something else mounted
 * at target is SL_E_CONFLICT ("mountpoint_busy"). */
int rootfs_mount(const char *const *lowers, size_t n_lowers, const char *upper, const char *work,
                 const char *target, struct sl_error *err);

/* Unmounts the overlay at target. Nothing mounted is a no-op. */
int rootfs_unmount(const char *target, struct sl_error *err);

#endif
