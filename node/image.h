/* Images on a node: a content-addressed store of read-only layers and the
 * metadata of named images (DESIGN.md section 6).
 *
 *   DATA/layers/sha256/<hex>/rootfs      the layer's files (an overlay lower)
 *   DATA/layers/sha256/<hex>/layer.json  {digest, size_bytes, imported_at}
 *   DATA/images/<name>.json              {name, layers, os, python, ...}
 *
 * A layer directory appears by rename(2) only once complete, and is then mode
 * 0555; its digest is the SHA-256 of the uncompressed tar it was extracted
 * from (an OCI diff_id), so images share layers (image-layer.h). */
#ifndef SL_NODE_IMAGE_H
#define SL_NODE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/error.h"

#define IMAGE_DIGEST_HEX 65 /* 64 hex digits + NUL */
#define IMAGE_NAME_MAX   64

struct image {
    char *name;
    char **layers; /* hex digests, top layer first */
    size_t n_layers;
    char *os;        /* PRETTY_NAME of the image's os-release, "" if none */
    char *python;    /* "3.11", "" if the image has no python3 */
    char *cuda;      /* "12.1.1", "" if the image has no CUDA toolkit */
    char *framework; /* "torch 2.3.1+cu121, paddle 2.6.0", "" if none */
    char **env;      /* the image config's Env ("NAME=VALUE"), NULL-terminated */
    size_t n_env;
    uint64_t size_bytes;
};

/* Frees what an image holds and zeroes it. */
void image_release(struct image *img);

/* True for names of [a-z0-9._-], 1..IMAGE_NAME_MAX long, not starting with
 * a dot. */
bool image_name_valid(const char *name);

/* Imports a rootfs tarball (plain or compressed) as a layer, extracted by
 * image-layer.c, and writes its digest into `digest`. Importing a tarball
 * whose layer exists keeps the existing layer. On failure nothing is left in
 * the store. (image_import() in image-import.h takes any image format.) */
int image_layer_import(const char *data_dir, const char *tar_path, char digest[IMAGE_DIGEST_HEX],
                       struct sl_error *err);

/* The directory holding a layer's files; the caller frees it. */
char *image_layer_rootfs(const char *data_dir, const char *digest);

/* Records image `name` made of these layers (top first), reading its OS,
 * Python, CUDA and framework versions from the layers' files. Overwrites an
 * image of that name. */
int image_save(const char *data_dir, const char *name, const char *const *layers, size_t n_layers,
               struct sl_error *err);

/* image_save() for an image whose config has an environment (docker, OCI):
 * recorded with the image, and its CUDA_VERSION is a hint when no CUDA
 * version file is found. */
int image_save_config(const char *data_dir, const char *name, const char *const *layers,
                      size_t n_layers, const char *const *env, size_t n_env, struct sl_error *err);

/* Reads image `name` into img (image_release it). An unknown name is
 * SL_E_NOT_FOUND ("unknown_image"). */
int image_load(const char *data_dir, const char *name, struct image *img, struct sl_error *err);

/* Builds the default image with mmdebstrap from the host's own apt sources
 * (/etc/apt/sources.list.d/debian.sources, else /etc/apt/sources.list; never
 * a hard-coded mirror) for `suite` (e.g. "bookworm"), imports it and saves it
 * as `name`. Takes minutes; needs the network the host's apt uses. */
int image_build_default(const char *data_dir, const char *name, const char *suite,
                        struct sl_error *err);

/* image_build_default() plus what recipe adds: "base" (nothing) or
 * "jupyter" (Debian's jupyter-notebook, started by the instance's init on
 * its service port: boot.h). An unknown recipe is SL_E_INVALID. */
int image_build_recipe(const char *data_dir, const char *name, const char *recipe,
                       const char *suite, struct sl_error *err);

#endif
