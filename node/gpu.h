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
#define GPU_PROC_MAX 64

struct gpu_info {
    unsigned index;
    unsigned minor; /* N of /dev/nvidiaN; not always the index */
    char uuid[GPU_NAME_MAX];
    char name[GPU_NAME_MAX];
    uint64_t vram_mib;
    bool simulated;
};

/* A process using a GPU, as NVML reports it: the host pid, which the metrics
 * map to an instance through /proc/PID/cgroup. */
struct gpu_process {
    uint32_t pid;
    uint64_t used_mib; /* UINT64_MAX: NVML did not say */
};

/* What a GPU is doing now. */
struct gpu_usage {
    unsigned index;
    unsigned gpu_percent;    /* of the last sample period the GPU was busy */
    unsigned memory_percent; /* of it the memory was read or written */
    uint64_t used_mib, total_mib;
    int temperature_c; /* the core's, °C; -1: NVML did not say */
    int64_t power_mw;  /* drawn now, milliwatts; -1: NVML did not say */
    struct gpu_process procs[GPU_PROC_MAX];
    size_t n_procs; /* at most GPU_PROC_MAX shown; procs_total counts all */
    size_t procs_total;
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
    /* Fills out[0 .. *n) (room for GPU_MAX) with every GPU's utilisation,
     * memory and compute processes; a GPU NVML cannot read fails the call. */
    int (*usage)(void *state, struct gpu_usage *out, size_t *n, struct sl_error *err);
    void (*release)(void *state);
};

struct gpu_source {
    const struct gpu_ops *ops;
    void *state;
};

/* Opens the GPU source called name, from the table in gpu.c: "nvml" (arg
 * NULL or empty: the host's NVIDIA GPUs) or "simulated" (arg COUNT:MODEL,
 * see gpu_sim_open). Any other name fails with SL_E_INVALID and a message
 * that lists the sources. src is released with gpu_source_release(). */
int gpu_source_open(const char *name, const char *arg, struct gpu_source *src,
                    struct sl_error *err);

/* The ops' name ("nvml", "simulated"), or "none" before a source is open. */
const char *gpu_source_name(const struct gpu_source *src);

/* The sources themselves; callers outside node/gpu*.c and the tests go
 * through gpu_source_open.
 *
 * "8:RTX 4090" (COUNT:CATALOG NAME) gives COUNT simulated GPUs of that
 * model; fails with a message that says the format. */
int gpu_sim_open(const char *spec, struct gpu_source *src, struct sl_error *err);

/* NVML through dlopen of libnvidia-ml.so.1; SL_E_NOT_FOUND when the library
 * or a GPU is absent. On success the host's inventory is kept for
 * gpu_host_inventory(). */
int gpu_nvml_open(struct gpu_source *src, struct sl_error *err);

/* gpu_nvml_open with the library named by a path (dlopen's rules): the unit
 * tests load their stand-in (tests/unit/fake-nvml/) through it. */
int gpu_nvml_open_library(const char *library, struct gpu_source *src, struct sl_error *err);

/* The real GPUs of this host as the last successful gpu_nvml_open() found
 * them, or NULL when none was opened (simulated GPUs, or none): what
 * gpu_devices_apply() (gpu-devices.h) maps assigned indices with. Set once at
 * start-up, read-only afterwards. */
const struct gpu_inventory *gpu_host_inventory(void);

void gpu_source_release(struct gpu_source *src);

#endif
