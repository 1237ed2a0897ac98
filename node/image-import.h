/* Importing an image file into the node's layer store as a named image
 * (DESIGN.md section 6; docs/design/node-runtime.md, "Image import").
 *
 * Accepted, told apart by their content:
 *   - a rootfs tarball, plain or compressed (gzip, zstd, xz, bzip2): one layer;
 *   - a `docker save` tarball (manifest.json, layer tarballs, config JSON);
 *   - an OCI image layout, as a directory or a tar of one (oci-layout,
 *     index.json, blobs/sha256/...), with plain, gzip or zstd layers.
 * Each layer becomes its own content-addressed layer whose digest is the
 * SHA-256 of its uncompressed tar (the diff_id), so images share layers. */
#ifndef SL_NODE_IMAGE_IMPORT_H
#define SL_NODE_IMAGE_IMPORT_H

#include "image-layer.h"
#include "../lib/error.h"

/* Imports `path` as image `name` into data_dir, replacing an image of that
 * name, within `limits` (NULL: image_limits_default; image-layer.h). Either
 * all of its layers and images/<name>.json are written, or, on failure
 * (SL_E_UNPROCESSABLE "bad_image" for a damaged or hostile file,
 * SL_E_TOO_LARGE "image_limit" over a limit, naming its option, SL_E_INVALID
 * for a bad name or an unknown format), nothing new is left: no layer, no
 * temporary directory, no image file. */
int image_import(const char *data_dir, const char *path, const char *name,
                 const struct image_limits *limits, struct sl_error *err);

#endif
