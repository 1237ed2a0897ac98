/* Public data: datasets an operator publishes, read-only at /root/public in
 * every instance of a region (docs/design/node-runtime.md, "Public data").
 *
 *   DATA/public/<name>        one dataset: an uploaded tar unpacked here, or
 *                             a directory of the host bound here read-only
 *   DATA/public-state/<name>  {source, size_bytes}: what is there, and from
 *                             where ("sha256:<hex>" or "path:/abs")
 *   DATA/public-tmp/          tars being unpacked, datasets being removed
 *
 * DATA/public is bound read-only (nosuid, nodev, noexec) at /root/public in
 * every instance (oci.h). A tar dataset is unpacked aside and renamed into
 * DATA/public whole, so running instances see it at once and never half of
 * it; a host directory is a bind mount (ro, nosuid, nodev, noexec) that
 * instances started after it see. */
#ifndef SL_NODE_PUBLIC_DATA_H
#define SL_NODE_PUBLIC_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "image-layer.h"
#include "../lib/error.h"

#define PUBLIC_DATA_MOUNT "/root/public"
#define PUBLIC_NAME_MAX   64

/* A dataset name: 1 to 64 of [a-z0-9._-], not starting with '.'. */
bool public_name_valid(const char *name);

/* DATA/public; the caller frees it. */
char *public_dir(const char *data_dir);

/* Makes DATA/public (0755) and clears what an interrupted unpack or
 * removal left in DATA/public-tmp. */
int public_init(const char *data_dir, struct sl_error *err);

/* Unpacks the tar `archive` (plain or compressed) as dataset `name` within
 * `limits` (image-layer.h: IMAGE_LAYER_DATASET rules), replacing a dataset
 * of that name; `source` is recorded ("sha256:<hex>"). On failure
 * (SL_E_UNPROCESSABLE "bad_image" naming the entry, SL_E_TOO_LARGE over a
 * limit) nothing new is left and an existing dataset stays. */
int public_unpack(const char *data_dir, const char *name, const char *archive, const char *source,
                  const struct image_limits *limits, struct sl_error *err);

/* Binds the host directory `path` (absolute; not "/", not the data
 * directory or above or below it) read-only, nosuid, nodev, noexec at
 * DATA/public/<name>, replacing a dataset of that name. */
int public_bind(const char *data_dir, const char *name, const char *path, struct sl_error *err);

/* Removes dataset `name`: unmounts a bound directory (its files are the
 * operator's and are never touched), deletes an unpacked one. None: 0. */
int public_remove(const char *data_dir, const char *name, struct sl_error *err);

/* The source recorded for dataset `name` ("sha256:..." or "path:...") and
 * its size, when it is there and whole: 1; not there: 0. A bound directory
 * whose mount is gone (a reboot) is not there. */
int public_present(const char *data_dir, const char *name, char *source, size_t source_size,
                   uint64_t *size_bytes);

#endif
