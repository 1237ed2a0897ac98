/* Extracting one layer tarball into the layer store, with libarchive and
 * without trusting the archive (docs/design/node-runtime.md, "Image import").
 *
 * A layer is extracted into DATA/layers/tmp/layer-XXXXXX/rootfs by opening
 * every path component relative to that root with O_NOFOLLOW: an entry that
 * is absolute, has a ".." component, or passes through a symlink or a file is
 * refused, and so is a hard link whose target is not inside the layer. Only
 * image_layer_commit() moves it to DATA/layers/sha256/<digest>. */
#ifndef SL_NODE_IMAGE_LAYER_H
#define SL_NODE_IMAGE_LAYER_H

#include <stdbool.h>
#include <stdint.h>

#include "image.h"
#include "../lib/error.h"

enum {
    /* Turn Docker/OCI whiteouts into overlayfs ones: ".wh.NAME" becomes a
     * 0/0 character device NAME, ".wh..wh..opq" the directory's
     * trusted.overlay.opaque="y". Without it they stay plain files. */
    IMAGE_LAYER_WHITEOUTS = 1 << 0,
};

struct image_layer {
    char digest[IMAGE_DIGEST_HEX]; /* SHA-256 of the uncompressed tar (the diff_id) */
    uint64_t size_bytes;           /* bytes of the uncompressed tar */
    char *tmp;                     /* the temporary directory; NULL once committed or gone */
};

/* Extracts the tar (plain, gzip, zstd, xz, bzip2) read from fd into `dir`
 * (an existing, empty directory), hashing its uncompressed bytes into
 * digest/size. `file` and `what` name the source in errors ("layer 2 of 3").
 * Does not close fd. On failure dir holds a partial tree the caller removes. */
int image_layer_unpack(int fd, const char *dir, unsigned flags, const char *file, const char *what,
                       char digest[IMAGE_DIGEST_HEX], uint64_t *size, struct sl_error *err);

/* Extracts the tar read from fd into a new temporary directory of the store.
 * On failure nothing is left behind. image_layer_discard() or
 * image_layer_commit() it afterwards. */
int image_layer_extract(const char *data_dir, int fd, unsigned flags, const char *file,
                        const char *what, struct image_layer *layer, struct sl_error *err);

/* The digest of the tar read from fd, decompressed, without extracting it:
 * a rootfs tarball whose layer is present need not be extracted again. Reads
 * fd to its end. */
int image_layer_digest(int fd, const char *file, char digest[IMAGE_DIGEST_HEX],
                       struct sl_error *err);

/* True when the store already holds a complete layer of this digest. */
bool image_layer_present(const char *data_dir, const char *digest);

/* Moves an extracted layer into the store as DATA/layers/sha256/<digest>,
 * mode 0555, with its layer.json; a layer already there is kept and the
 * extracted copy removed. `source` is recorded in layer.json. */
int image_layer_commit(const char *data_dir, struct image_layer *layer, const char *source,
                       struct sl_error *err);

/* Removes an extracted, uncommitted layer (nothing when already gone). */
void image_layer_discard(const char *data_dir, struct image_layer *layer);

/* Opens `rel` below the directory root_fd, resolving symlinks as if root_fd
 * were "/" (openat2 RESOLVE_IN_ROOT), so nothing outside it is reached. */
int image_open_in_root(int root_fd, const char *rel, int flags);

#endif
