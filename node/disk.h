/* Instance disks: sparse files holding ext4, attached to loop devices and
 * mounted (DESIGN.md section 6). A full disk is ENOSPC inside the instance and
 * nothing outside it. Loop devices are attached with LO_FLAGS_AUTOCLEAR, so
 * unmounting the file system is what detaches them. */
#ifndef SL_NODE_DISK_H
#define SL_NODE_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../lib/error.h"

#define DISK_MAX_GIB 65536

/* Creates `path` as a sparse file of size_gib GiB holding an empty ext4 file
 * system (no reserved blocks, lazy inode table and journal init, so it takes
 * a fraction of a second whatever the size). Fails with SL_E_CONFLICT
 * ("disk_exists") when path exists, SL_E_INVALID when size_gib is 0 or over
 * DISK_MAX_GIB. A half-made file is removed on failure. */
/* Free space under which the host's disk counts as full: a failed mkfs is
 * said to be for that reason, and no spare disk is used (disk-spares.h). A
 * disk's metadata is 5-30 MiB. */
#define DISK_FULL_BELOW_MIB 64ULL

int disk_create(const char *path, uint64_t size_gib, struct sl_error *err);

/* Attaches the disk file to a free loop device and mounts its ext4 at
 * `mountpoint` (created if missing), nosuid,nodev. Mounting a file that is
 * already mounted there is a no-op; anything else mounted there is
 * SL_E_CONFLICT ("mountpoint_busy"). On failure no loop device stays
 * attached. */
int disk_mount(const char *path, const char *mountpoint, struct sl_error *err);

/* Unmounts what is mounted at `mountpoint` and makes sure the loop device
 * behind it is detached. Nothing mounted there is a no-op (returns 0). */
int disk_unmount(const char *mountpoint, struct sl_error *err);

/* Whether something is mounted exactly at `path`; the mount source (e.g.
 * "/dev/loop3") and file system type are copied into src/fstype when they are
 * not NULL. Returns 1 (mounted), 0 (not) or -1 on error. */
int disk_mounted(const char *path, char *src, size_t src_size, char *fstype, size_t fstype_size,
                 struct sl_error *err);

/* disk_mounted's reading of mountinfo (the format of /proc/self/mountinfo,
 * octal escapes such as \040 undone): whether a line mounts something at
 * real (an absolute path without symbolic links); of several, the last (the
 * mount on top) fills src and fstype. Returns 1 or 0. */
int disk_mountinfo_find(FILE *mountinfo, const char *real, char *src, size_t src_size, char *fstype,
                        size_t fstype_size);

/* The loop device ("/dev/loopN") that has `path` as backing file, copied into
 * dev. Returns 1 when found, 0 when none, -1 on error. */
int disk_find_loop(const char *path, char *dev, size_t dev_size, struct sl_error *err);

/* Grows the disk file at path to size_gib GiB (sparse) and its ext4 to the
 * whole file. Attached to a loop device (mounted): the device's capacity is
 * read again and resize2fs grows the mounted file system online, so the
 * instance sees the new size at once. Not attached: e2fsck -f -p, then
 * resize2fs on the file. Only the agent's own file is touched: path is
 * opened without following links, and the loop device is checked to hold
 * that very file. A file already that size still has its file system grown
 * (a grow cut short between the two steps finishes). A smaller size is
 * SL_E_INVALID ("disk_shrink"): a disk only grows. A mounted disk with an
 * agent that lacks CAP_SYS_RESOURCE (which the kernel's online resize
 * wants) is SL_E_UNAVAILABLE ("online_resize_unavailable"), nothing
 * changed: it grows unmounted, at the next start. */
int disk_grow(const char *path, uint64_t size_gib, struct sl_error *err);

/* Deletes the disk file; it must not be attached to a loop device any more
 * (SL_E_CONFLICT "disk_in_use"). A missing file is a no-op. */
int disk_remove(const char *path, struct sl_error *err);

#endif
