/* Giving an instance exactly its GPUs: the CDI spec of the host when one
 * names them (cdi.h), else the device nodes and the driver's files. Called
 * from oci.c for instances with GPUs on hosts whose GPUs are real; simulated
 * GPUs only get the environment oci.c sets.
 *
 * Either way the instance sees its GPUs numbered from 0, and suanli sets
 * NVIDIA_VISIBLE_DEVICES (their UUIDs) and CUDA_VISIBLE_DEVICES (0 .. n-1),
 * whatever the image or the spec says. */
#ifndef SL_NODE_GPU_DEVICES_H
#define SL_NODE_GPU_DEVICES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "gpu.h"
#include "../lib/error.h"

/* Where the host keeps what GPUs need; tests point it at a temporary tree. */
struct gpu_devices_host {
    const struct gpu_inventory *inv; /* maps assigned indices to UUIDs and minors */
    const char *const *cdi_dirs;     /* NULL: cdi_default_dirs */
    size_t n_cdi_dirs;
    const char *dev_dir;         /* NULL: "/dev" */
    const char *const *lib_dirs; /* NULL: the distribution's library dirs */
    size_t n_lib_dirs;
    const char *const *bin_dirs; /* NULL: /usr/bin, /usr/sbin, /bin */
    size_t n_bin_dirs;
    bool use_ldconfig;            /* ask `ldconfig -p` first */
    const char *const *hook_dirs; /* NULL: CDI's trusted directories (cdi.c) */
    size_t n_hook_dirs;
};

/* With this host's defaults and gpu_host_inventory(): does nothing (returns
 * 0) when no real GPU source was opened. Fails (SL_E_UNAVAILABLE) on an
 * index the host does not have, a spec that lacks an assigned GPU, or a
 * device node missing on the host; the caller must not start the instance
 * then. */
int gpu_devices_apply(json_t *config, const unsigned *gpus, size_t n, struct sl_error *err);

int gpu_devices_apply_host(json_t *config, const struct gpu_devices_host *host,
                           const unsigned *gpus, size_t n, struct sl_error *err);

#endif
