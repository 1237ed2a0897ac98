/* File storage on this host (server/storage.h): the renter's directory of
 * the region, bound read-write (nosuid, nodev) at /root/storage in each of
 * their instances. The desired state names the region's backend
 * ({kind, spec, quota_gib, dirs}) and, in each instance, the renter's
 * directory number.
 *
 *   local: DATA/storage/<n>.img    the renter's ext4 image, quota_gib big
 *                                  (sparse), so a write past the quota is
 *                                  ENOSPC inside and touches nothing else
 *          DATA/storage/mnt/<n>    where it is mounted (nosuid, nodev)
 *   mount: SPEC/<n>                a directory on the operator's shared
 *                                  mount at SPEC, which must be a mount of
 *                                  its own (never the host's root disk)
 *   glusterfs: DATA/storage/glusterfs/<n>
 *                                  a directory of the Gluster volume SPEC
 *                                  (SERVER:/VOLUME), which the agent mounts
 *                                  itself; bound only once it has the
 *                                  quota (storage-gluster.h)
 *
 * The agent never follows what a renter made inside: usage is the file
 * system's (statvfs) for local, and a walk that opens each directory with
 * O_NOFOLLOW and never leaves the file system for mount. */
#ifndef SL_NODE_STORAGE_H
#define SL_NODE_STORAGE_H

#include <jansson.h>
#include <stdint.h>

#include "../lib/error.h"

#define STORAGE_MOUNT "/root/storage"

/* Makes renter `number`'s storage ready on this host as `backend` says
 * (local: creates, mounts and grows the image; mount: makes SPEC/<n>;
 * glusterfs: mounts the volume, makes <n> and waits up to a minute for its
 * quota) and
 * returns the host path to bind at STORAGE_MOUNT; the caller frees it.
 * Serialised within the process. */
char *storage_prepare(const char *data_dir, json_t *backend, int64_t number, struct sl_error *err);

/* Grows the mounted local images of backend's dirs to its quota: online
 * while an instance of `instances` (the desired state's) that should run
 * has it, else unmounted, grown and mounted again. A failure is logged once
 * per quota. Nothing for other kinds. */
void storage_converge(const char *data_dir, json_t *backend, json_t *instances);

/* [{number, used_bytes, size_bytes}] of backend's dirs that are ready on
 * this host (size_bytes: the image's, 0 for mount). A new reference. */
json_t *storage_report(const char *data_dir, json_t *backend);

#endif
