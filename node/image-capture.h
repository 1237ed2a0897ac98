/* Saving an instance as an image: the overlay upper directory of its root
 * file system (its system disk's changes over the image) written as one
 * layer tar with OCI whiteouts, which image_layer_unpack() extracts again
 * (docs/design/node-runtime.md, "Saved images").
 *
 * Whiteouts (0/0 character devices) become ".wh.NAME" entries and opaque
 * directories (trusted.overlay.opaque="y") a ".wh..wh..opq" entry. What must
 * not pass to whoever starts the image is left out: other device nodes,
 * fifos and sockets; the instance's SSH host keys and machine id (each
 * instance makes its own); any .ssh/authorized_keys (the saver's keys would
 * open strangers' instances to them once the image is shared); and set-user-
 * and set-group-id bits of files. */
#ifndef SL_NODE_IMAGE_CAPTURE_H
#define SL_NODE_IMAGE_CAPTURE_H

#include <stdint.h>

#include "image.h"
#include "../lib/error.h"

struct image_capture_stats {
    uint64_t bytes;    /* of the tar */
    uint64_t entries;  /* written */
    uint64_t skipped;  /* left out (devices, fifos, sockets, keys) */
    uint64_t stripped; /* files whose set-id bits were dropped */
};

/* Writes the layer tar of the overlay upper directory `upper` to the file
 * out (created 0600, replaced), and its SHA-256 (the layer's digest) into
 * digest. An upper with a redirected directory (redirect_dir) or a
 * metadata-only copy (metacopy) is refused: its files are not all there. */
int image_capture(const char *upper, const char *out, char digest[IMAGE_DIGEST_HEX],
                  struct image_capture_stats *stats, struct sl_error *err);

#endif
