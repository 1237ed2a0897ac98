/* File storage (issue 14): one directory per renter and region, mounted
 * read-write at /root/storage in every instance of the renter there. Each
 * region has a backend (table storage_backends; none: `local`):
 *
 *   local   each host keeps a renter's storage as an ext4 image of the
 *           quota's size (a sparse file, loop-mounted): one host's region
 *   mount   a shared mount the operator made at the path `spec` on every
 *           host (NFS, CephFS, JuiceFS, a GlusterFS volume): SPEC/<number>
 *   glusterfs  a Gluster volume (`spec` SERVER:/VOLUME) that every host
 *           mounts itself with the FUSE client: VOLUME/<number>, with a
 *           directory quota set on the Gluster server (the operator's hook)
 *
 * The directory is named by its number (storage_dirs.number), never by
 * anything the renter chose. suanlid names it in each instance of the
 * desired state; the agent makes and mounts it and reports its use.
 * docs/design/node-runtime.md, "File storage". */
#ifndef SL_SERVER_STORAGE_H
#define SL_SERVER_STORAGE_H

#include <jansson.h>
#include <stdint.h>

#include "store.h"
#include "../lib/error.h"

#define STORAGE_DEFAULT_QUOTA_GIB 200
#define STORAGE_MAX_QUOTA_GIB     65536
#define STORAGE_SPEC_MAX          512

struct server;

struct storage_backend {
    char kind[16];
    char spec[STORAGE_SPEC_MAX + 1];
    int64_t quota_gib;
};

/* The backend of `region`: its row, or the default (local, the default
 * quota). */
int storage_backend_get(struct store *st, const char *region, struct storage_backend *out,
                        struct sl_error *err);

/* Checks kind and spec: "local" with no spec, "mount" with an absolute
 * path (no "." or ".." part, not "/"), "glusterfs" with SERVER:/VOLUME.
 * SL_E_INVALID saying what to do. */
int storage_backend_check(const char *kind, const char *spec, struct sl_error *err);

/* Makes sure the renter has a directory in the region (a new number the
 * first time). Call in the store transaction that places an instance. */
int storage_dir_ensure(struct store *st, const char *user_id, const char *region,
                       struct sl_error *err);

/* Makes the directories that the owners of node_id's instances lack (an
 * instance placed before file storage existed) and tells the node when it
 * made one. Call in the heartbeat's store transaction. */
int storage_node_dirs_ensure(struct store *st, const char *node_id, struct sl_error *err);

/* For the desired state of node_id: sets "storage" (the renter's number) in
 * each item of `items` (instances of that node) that has a directory, and
 * returns {kind, spec, quota_gib, dirs: [number...]} for the node's region.
 * A new reference. */
json_t *storage_desired(struct store *st, const char *node_id, json_t *items, struct sl_error *err);

/* The node's report: [{number, used_bytes, size_bytes}] of directories of
 * its region. Others' numbers are ignored. */
int storage_apply_report(struct store *st, const char *node_id, json_t *report,
                         struct sl_error *err);

#endif
