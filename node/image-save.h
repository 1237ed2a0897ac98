/* Saved images on a node (docs/design/node-runtime.md, "Saved images"):
 * the host of an instance captures its system disk's changes as one layer
 * (image-capture.h) and uploads it to suanlid; every host of the region
 * (this one too) stacks that layer on the parent image's layers. */
#ifndef SL_NODE_IMAGE_SAVE_H
#define SL_NODE_IMAGE_SAVE_H

#include "image-layer.h"
#include "../lib/error.h"

/* The layer source a saved image's top layer records in its layer.json:
 * "saved:NAME". Hosts drop saved images no longer wanted (image-fetch.c). */
#define IMAGE_SAVED_SOURCE "saved:"

/* Extracts the layer tar at tar (OCI whiteouts), checks that its digest is
 * sha256, and records image `name` as that layer over the local image
 * `parent`'s layers (with its environment). A layer already present is not
 * extracted again. */
int image_save_stack(const char *data_dir, const char *name, const char *tar, const char *sha256,
                     const char *parent, const struct image_limits *limits, struct sl_error *err);

/* True when image `name` is a saved image (its top layer came from a save)
 * whose top layer is not sha256 (NULL: any). */
bool image_saved_other(const char *data_dir, const char *name, const char *sha256);

/* Removes the saved images of DATA/images that keep(ctx, name) does not keep,
 * and their own top layers where no other image uses them. */
void image_saved_gc(const char *data_dir, bool (*keep)(void *ctx, const char *name), void *ctx);

#endif
