/* Extracting one layer tarball into the layer store, with libarchive and
 * without trusting the archive (docs/design/node-runtime.md, "Image import").
 *
 * A layer is extracted into DATA/layers/tmp/layer-XXXXXX/rootfs by opening
 * every path component relative to that root with O_NOFOLLOW: an entry that
 * is absolute, has a ".." component, or passes through a symlink or a file is
 * refused, and so is a hard link whose target is not inside the layer. Only
 * image_layer_commit() moves it to DATA/layers/sha256/<digest>. Everything is
 * read within limits (struct image_limits) counted as the bytes arrive, so a
 * compression bomb, millions of entries or a lying size stop early. */
#ifndef SL_NODE_IMAGE_LAYER_H
#define SL_NODE_IMAGE_LAYER_H

#include <stdbool.h>
#include <stdint.h>

#include "image.h"
#include "../lib/error.h"

/* What one image may unpack to: the disk, inodes, CPU and memory that a
 * hostile or broken archive (a compression bomb, millions of tiny entries, a
 * sparse file claiming a terabyte) can take from the node. The agent's
 * options images.* set them (agent.c); the defaults admit multi-GB CUDA
 * images. Bytes and entries count the whole image, every layer together. */
struct image_limits {
    uint64_t max_bytes;      /* uncompressed tar bytes (headers, data, padding) */
    uint64_t max_entries;    /* archive entries */
    uint64_t max_file_bytes; /* the size of one file, a sparse file's holes included */
    uint64_t max_path_depth; /* components of one entry's path */
    uint64_t min_free_bytes; /* space the data directory's file system keeps free */
};

/* The defaults, as numbers the agent's option table spells out too. */
#define IMAGE_MAX_BYTES_DEFAULT      137438953472 /* 128 GiB */
#define IMAGE_MAX_ENTRIES_DEFAULT    2000000
#define IMAGE_MAX_FILE_BYTES_DEFAULT 68719476736 /* 64 GiB */
#define IMAGE_MAX_PATH_DEPTH_DEFAULT 256
#define IMAGE_MIN_FREE_BYTES_DEFAULT 2147483648 /* 2 GiB */

/* An entry's headers (pax, GNU long names, a sparse file's map) may take at
 * most this many bytes; libarchive keeps a sparse map in memory at up to
 * eight times its size, so this bounds the memory one entry can claim. Not
 * configurable: real headers take a few hundred bytes, libarchive refuses a
 * single special header over 1 MiB. */
#define IMAGE_HEADER_MAX_BYTES (4u << 20)

/* The memory an xz stream may ask for to be decompressed (its dictionary,
 * mostly): xz -9 needs 65 MiB; a hostile header can ask for 4 GiB. */
#define IMAGE_XZ_MEMLIMIT (256u << 20)

extern const struct image_limits image_limits_default;

/* What an import has used of its limits so far, across its layers, and
 * what it left out. */
struct image_budget {
    struct image_limits limits;
    uint64_t bytes, entries;
    uint64_t skipped; /* device nodes and sockets not extracted */
};

/* A budget with nothing used yet; limits NULL means image_limits_default. */
void image_budget_init(struct image_budget *b, const struct image_limits *limits);

enum {
    /* Turn Docker/OCI whiteouts into overlayfs ones: ".wh.NAME" becomes a
     * 0/0 character device NAME, ".wh..wh..opq" the directory's
     * trusted.overlay.opaque="y". Without it they stay plain files. */
    IMAGE_LAYER_WHITEOUTS = 1 << 0,
    /* A public dataset (public-data.h), not an image layer: a symlink whose
     * target is absolute or climbs out of the tree ("../../etc") is refused,
     * fifos and 0/0 character devices are skipped (no channel between
     * instances through a shared tree), set-id bits are dropped. */
    IMAGE_LAYER_DATASET = 1 << 1,
};

struct image_layer {
    char digest[IMAGE_DIGEST_HEX]; /* SHA-256 of the uncompressed tar (the diff_id) */
    uint64_t size_bytes;           /* bytes of the uncompressed tar */
    char *tmp;                     /* the temporary directory; NULL once committed or gone */
};

/* Extracts the tar (plain, gzip, zstd, xz, bzip2; compressed once) read from
 * fd into `dir` (an existing, empty directory), hashing its uncompressed
 * bytes into digest/size, and charging its bytes and entries to budget.
 * `file` and `what` name the source in errors ("layer 2 of 3"). Device nodes
 * other than overlay whiteouts (0/0) and sockets are skipped and logged.
 * Over a limit it fails with SL_E_TOO_LARGE "image_limit", naming the limit's
 * option. Does not close fd. On failure dir holds a partial tree the caller
 * removes. */
int image_layer_unpack(int fd, const char *dir, unsigned flags, const char *file, const char *what,
                       struct image_budget *budget, char digest[IMAGE_DIGEST_HEX], uint64_t *size,
                       struct sl_error *err);

/* Extracts the tar read from fd into a new temporary directory of the store,
 * within budget. On failure nothing is left behind. image_layer_discard() or
 * image_layer_commit() it afterwards. */
int image_layer_extract(const char *data_dir, int fd, unsigned flags, const char *file,
                        const char *what, struct image_budget *budget, struct image_layer *layer,
                        struct sl_error *err);

/* The digest of the tar read from fd, decompressed, without extracting it:
 * a rootfs tarball whose layer is present need not be extracted again. Reads
 * fd to its end, refusing (as image_layer_unpack) more than what is left of
 * budget's bytes; charges nothing. */
int image_layer_digest(int fd, const char *file, const struct image_budget *budget,
                       char digest[IMAGE_DIGEST_HEX], struct sl_error *err);

/* Reads the entry names of the tar read from fd without extracting anything,
 * within the limits of budget (charging nothing): visit() is called with each
 * name and ends the scan early by returning non-zero. A damaged archive, or
 * one over a limit, fails as image_layer_unpack would. */
int image_layer_scan(int fd, const char *file, const struct image_budget *budget,
                     int (*visit)(void *ctx, const char *name), void *ctx, struct sl_error *err);

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
 * were "/" (openat2 RESOLVE_IN_ROOT), so nothing outside it is reached. Unless
 * flags hold O_PATH, the object's type is checked before it is opened: only
 * a regular file or a directory is; a whiteout (a 0/0 character device)
 * fails with ENXIO and any other device, fifo or socket with EPERM, so no
 * driver's open (a watchdog, a tape) runs and no fifo blocks. */
int image_open_in_root(int root_fd, const char *rel, int flags);

#endif
