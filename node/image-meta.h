/* What an image holds, read from its layers' files (never by running
 * anything from it): the CUDA toolkit and the deep-learning frameworks.
 * Layers are given top first; a file is looked up in each in turn, a
 * whiteout hides it, and symlinks resolve inside their layer. */
#ifndef SL_NODE_IMAGE_META_H
#define SL_NODE_IMAGE_META_H

#include <stdbool.h>
#include <stddef.h>

/* The CUDA version ("12.1.1"): cuda/version.json, version.txt, the image
 * config's CUDA_VERSION (env, "NAME=VALUE"), a /usr/local/cuda-X.Y
 * directory. NULL when none; the caller frees it. */
char *image_meta_cuda(const char *const *rootfs, size_t n, const char *const *env, size_t n_env);

/* The frameworks installed for Python, "torch 2.3.1+cu121, paddle 2.6.0";
 * NULL when none; the caller frees it. */
char *image_meta_frameworks(const char *const *rootfs, size_t n);

/* A file of a layer, read without leaving it (at most max_len bytes); NULL
 * when absent. *hidden is set when a whiteout deletes it. */
char *image_meta_read(const char *rootfs, const char *rel, size_t max_len, bool *hidden);

#endif
