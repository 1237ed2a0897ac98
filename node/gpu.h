/* GPUs of a host behind an ops table (STYLE.md 4): NVML on hosts with
 * NVIDIA GPUs (gpu-nvml.c, dlopen of libnvidia-ml.so.1), or simulated ones
 * declared by the operator for hosts without (gpu-sim.c), flagged as such
 * everywhere a renter sees them. */
#ifndef SL_NODE_GPU_H
#define SL_NODE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/error.h"

#define GPU_MAX      64
#define GPU_NAME_MAX 96

struct gpu_info {
    unsigned index;
    char uuid[GPU_NAME_MAX];
    char name[GPU_NAME_MAX];
    uint64_t vram_mib;
    bool simulated;
};

struct gpu_inventory {
    struct gpu_info gpus[GPU_MAX];
    size_t n;
    char driver_version[64];
    char cuda_version[64];
};

struct gpu_ops {
    const char *name;
    /* Fills inv with the host's GPUs. */
    int (*inventory)(void *state, struct gpu_inventory *inv, struct sl_error *err);
    void (*release)(void *state);
};

struct gpu_source {
    const struct gpu_ops *ops;
    void *state;
};

/* "8:RTX 4090" (COUNT:CATALOG NAME) gives COUNT simulated GPUs of that
 * model; fails with a message that says the format. */
int gpu_sim_open(const char *spec, struct gpu_source *src, struct sl_error *err);

/* NVML through dlopen; SL_E_NOT_FOUND when the library or a GPU is absent. */
int gpu_nvml_open(struct gpu_source *src, struct sl_error *err);

void gpu_source_release(struct gpu_source *src);

#endif
