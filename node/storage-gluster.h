/* File storage on a Gluster volume (storage.h, backend `glusterfs`): the
 * host mounts the volume SERVER:/VOLUME itself with Gluster's FUSE client
 * at DATA/storage/glusterfs, and a renter's directory is <n> at its top.
 *
 * The quota is Gluster's directory quota (`gluster volume quota VOLUME
 * limit-usage /<n> SIZE`), set on a Gluster server by the operator's hook
 * (scripts/gluster-quota-hook.sh): a host has no say in it. With the
 * volume's quota-deem-statfs (on by default), statvfs of the directory
 * reads its limit and use: the agent binds a directory only once its limit
 * is the region's quota, and reports its use from there (no walk).
 * docs/design/node-runtime.md, "File storage". */
#ifndef SL_NODE_STORAGE_GLUSTER_H
#define SL_NODE_STORAGE_GLUSTER_H

#include <stdint.h>

#include "../lib/error.h"

/* Mounts spec's volume (again, when its client process is gone) and makes
 * the directory <number> at its top. Returns its host path; the caller
 * frees it. SL_E_UNAVAILABLE when the volume cannot be mounted or reached. */
char *gluster_prepare(const char *data_dir, const char *spec, int64_t number, struct sl_error *err);

/* Waits up to timeout_ms for the directory at path to have a Gluster quota
 * of exactly quota_gib GiB; SL_E_UNAVAILABLE ("storage_no_quota") saying
 * what the operator must do when it does not. */
int gluster_quota_wait(const char *path, uint64_t quota_gib, int64_t timeout_ms,
                       struct sl_error *err);

/* Directory <number>'s use and limit (bytes) when the volume is mounted
 * from spec here and the directory has a limit of quota_gib; else 0. */
int gluster_usage(const char *data_dir, const char *spec, uint64_t quota_gib, int64_t number,
                  uint64_t *used, uint64_t *size);

/* Unmounts (lazily: containers keep what they bound) a volume mounted here
 * that is not spec's; spec NULL when the backend is not glusterfs. */
void gluster_converge(const char *data_dir, const char *spec);

#endif
