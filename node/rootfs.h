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

/* The files of /etc the node writes for an instance: bound (read-write)
 * over the image's from a directory on the instance's system disk, so what
 * the renter writes into them counts against the renter's own disk. */
extern const char *const rootfs_etc_files[3]; /* "hosts", "hostname", "resolv.conf" */

/* Writes dir/hosts (localhost, the id at 127.0.1.1), dir/hostname (the id)
 * and dir/resolv.conf (the host's resolvers, less loopback ones), making
 * dir (0755) if missing. dir must be the host's alone (not reachable from
 * inside as a directory): each file is rewritten in place, O_TRUNC and
 * O_NOFOLLOW, so a start succeeds on a disk the renter filled up (the old
 * file's blocks are freed first, and no new inode is needed). */
int rootfs_write_etc(const char *dir, const char *id, struct sl_error *err);

#endif
