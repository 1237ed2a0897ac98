/* NVIDIA GPUs through NVML, loaded with dlopen so the agent runs (and
 * builds) on hosts without the driver. Only the handful of entry points the
 * inventory and the metrics need are resolved; the types below are nvml.h's,
 * copied because the header is not in Debian main. */
#include "gpu.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_return;
typedef void *nvml_device;

#define NVML_SUCCESS                 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE     (~0ULL)
#define NVML_TEMPERATURE_GPU         0

struct nvml_memory { /* nvmlMemory_t, bytes */
    unsigned long long total, free, used;
};

struct nvml_utilization { /* nvmlUtilization_t, percent */
    unsigned gpu, memory;
};

struct nvml_process { /* nvmlProcessInfo_t (v2 and v3 share it) */
    unsigned pid;
    unsigned long long used_bytes;
    unsigned gpu_instance_id, compute_instance_id;
};

struct nvml {
    void *lib;
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    nvml_return (*count)(unsigned *);
    nvml_return (*by_index)(unsigned, nvml_device *);
    nvml_return (*name)(nvml_device, char *, unsigned);
    nvml_return (*uuid)(nvml_device, char *, unsigned);
    nvml_return (*memory)(nvml_device, struct nvml_memory *);
    nvml_return (*driver)(char *, unsigned);
    /* optional: older drivers lack them */
    nvml_return (*cuda)(int *);
    nvml_return (*minor)(nvml_device, unsigned *);
    nvml_return (*utilization)(nvml_device, struct nvml_utilization *);
    nvml_return (*processes)(nvml_device, unsigned *, struct nvml_process *);
    nvml_return (*temperature)(nvml_device, int, unsigned *); /* sensor 0: the GPU core */
    nvml_return (*power)(nvml_device, unsigned *);            /* milliwatts */
};

static struct gpu_inventory host_inventory;
static bool host_inventory_set;

const struct gpu_inventory *gpu_host_inventory(void)
{
    return host_inventory_set ? &host_inventory : NULL;
}

static int nvml_inventory(void *state, struct gpu_inventory *inv, struct sl_error *err)
{
    struct nvml *n = state;
    unsigned count = 0;
    int cuda = 0;

    memset(inv, 0, sizeof(*inv));
    if (n->count(&count) != NVML_SUCCESS)
        return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error", "NVML could not count the GPUs");
    for (unsigned i = 0; i < count && i < GPU_MAX; i++) {
        struct gpu_info *g = &inv->gpus[inv->n];
        struct nvml_memory mem = { 0 };
        nvml_device dev;
        if (n->by_index(i, &dev) != NVML_SUCCESS ||
            n->name(dev, g->name, sizeof(g->name)) != NVML_SUCCESS ||
            n->uuid(dev, g->uuid, sizeof(g->uuid)) != NVML_SUCCESS ||
            n->memory(dev, &mem) != NVML_SUCCESS)
            return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error",
                           "NVML could not read GPU %u: check the driver with nvidia-smi", i);
        g->index = i;
        if (!n->minor || n->minor(dev, &g->minor) != NVML_SUCCESS)
            g->minor = i;
        g->vram_mib = mem.total / (1024 * 1024);
        g->simulated = false;
        inv->n++;
    }
    if (n->driver(inv->driver_version, sizeof(inv->driver_version)) != NVML_SUCCESS)
        snprintf(inv->driver_version, sizeof(inv->driver_version), "unknown");
    if (n->cuda && n->cuda(&cuda) == NVML_SUCCESS && cuda > 0)
        snprintf(inv->cuda_version, sizeof(inv->cuda_version), "%d.%d", cuda / 1000,
                 (cuda % 1000) / 10);
    return 0;
}

/* The compute processes of one GPU; the list can grow between the two calls,
 * so an INSUFFICIENT_SIZE answer is retried a few times with more room. */
static int nvml_processes(struct nvml *n, nvml_device dev, struct gpu_usage *u)
{
    unsigned room = GPU_PROC_MAX;
    cleanup_free struct nvml_process *procs = NULL;
    nvml_return rc = NVML_ERROR_INSUFFICIENT_SIZE;

    for (int attempt = 0; attempt < 4 && rc == NVML_ERROR_INSUFFICIENT_SIZE; attempt++) {
        unsigned count = room;
        free(procs);
        procs = xcalloc(room, sizeof(*procs));
        rc = n->processes(dev, &count, procs);
        if (rc == NVML_SUCCESS) {
            u->procs_total = count;
            for (unsigned i = 0; i < count && i < GPU_PROC_MAX; i++) {
                u->procs[i].pid = procs[i].pid;
                u->procs[i].used_mib = procs[i].used_bytes == NVML_VALUE_NOT_AVAILABLE
                                           ? UINT64_MAX
                                           : procs[i].used_bytes / (1024 * 1024);
            }
            u->n_procs = count < GPU_PROC_MAX ? count : GPU_PROC_MAX;
        } else if (rc == NVML_ERROR_INSUFFICIENT_SIZE) {
            room = count > room ? count + 8 : room * 2;
        }
    }
    return rc == NVML_SUCCESS ? 0 : -1;
}

static int nvml_usage(void *state, struct gpu_usage *out, size_t *n_out, struct sl_error *err)
{
    struct nvml *n = state;
    unsigned count = 0;

    *n_out = 0;
    if (n->count(&count) != NVML_SUCCESS)
        return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error", "NVML could not count the GPUs");
    for (unsigned i = 0; i < count && i < GPU_MAX; i++) {
        struct gpu_usage *u = &out[i];
        struct nvml_memory mem = { 0 };
        struct nvml_utilization util = { 0 };
        nvml_device dev;

        memset(u, 0, sizeof(*u));
        u->index = i;
        if (n->by_index(i, &dev) != NVML_SUCCESS || n->memory(dev, &mem) != NVML_SUCCESS ||
            (n->utilization && n->utilization(dev, &util) != NVML_SUCCESS) ||
            (n->processes && nvml_processes(n, dev, u) < 0))
            return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error",
                           "NVML could not read the use of GPU %u: check the driver with "
                           "nvidia-smi",
                           i);
        u->gpu_percent = util.gpu;
        u->memory_percent = util.memory;
        unsigned celsius, milliwatts;
        u->temperature_c =
            n->temperature && n->temperature(dev, NVML_TEMPERATURE_GPU, &celsius) == NVML_SUCCESS
                ? (int)celsius
                : -1;
        u->power_mw =
            n->power && n->power(dev, &milliwatts) == NVML_SUCCESS ? (int64_t)milliwatts : -1;
        u->used_mib = mem.used / (1024 * 1024);
        u->total_mib = mem.total / (1024 * 1024);
        *n_out = i + 1;
    }
    return 0;
}

static void nvml_release(void *state)
{
    struct nvml *n = state;

    if (!n)
        return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}

static const struct gpu_ops gpu_nvml_ops = {
    .name = "nvml",
    .inventory = nvml_inventory,
    .usage = nvml_usage,
    .release = nvml_release,
};

#define RESOLVE(field, symbol)                                                                     \
    do {                                                                                           \
        *(void **)&n->field = dlsym(n->lib, symbol);                                               \
        if (!n->field) {                                                                           \
            missing = symbol;                                                                      \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

#define RESOLVE_OPTIONAL(field, symbol)                                                            \
    do {                                                                                           \
        if (!n->field)                                                                             \
            *(void **)&n->field = dlsym(n->lib, symbol);                                           \
    } while (0)

int gpu_nvml_open_library(const char *library, struct gpu_source *src, struct sl_error *err)
{
    struct nvml *n = xzalloc(sizeof(*n));
    const char *missing = NULL;
    unsigned count = 0;

    n->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        free(n);
        return sl_fail(err, SL_E_NOT_FOUND, "no_nvml", "no NVIDIA driver here (%s not found)",
                       library);
    }
    RESOLVE(init, "nvmlInit_v2");
    RESOLVE(shutdown, "nvmlShutdown");
    RESOLVE(count, "nvmlDeviceGetCount_v2");
    RESOLVE(by_index, "nvmlDeviceGetHandleByIndex_v2");
    RESOLVE(name, "nvmlDeviceGetName");
    RESOLVE(uuid, "nvmlDeviceGetUUID");
    RESOLVE(memory, "nvmlDeviceGetMemoryInfo");
    RESOLVE(driver, "nvmlSystemGetDriverVersion");
    RESOLVE_OPTIONAL(cuda, "nvmlSystemGetCudaDriverVersion_v2");
    RESOLVE_OPTIONAL(cuda, "nvmlSystemGetCudaDriverVersion");
    RESOLVE_OPTIONAL(minor, "nvmlDeviceGetMinorNumber");
    RESOLVE_OPTIONAL(utilization, "nvmlDeviceGetUtilizationRates");
    RESOLVE_OPTIONAL(processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    RESOLVE_OPTIONAL(processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    RESOLVE_OPTIONAL(temperature, "nvmlDeviceGetTemperature");
    RESOLVE_OPTIONAL(power, "nvmlDeviceGetPowerUsage");
    if (n->init() != NVML_SUCCESS) {
        dlclose(n->lib);
        free(n);
        return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error",
                       "NVML did not start: check the driver with nvidia-smi");
    }
    if (n->count(&count) != NVML_SUCCESS || count == 0) {
        nvml_release(n);
        return sl_fail(err, SL_E_NOT_FOUND, "no_gpus", "NVML sees no GPU on this host");
    }
    if (nvml_inventory(n, &host_inventory, err) < 0) {
        nvml_release(n);
        return -1;
    }
    host_inventory_set = true;
    src->ops = &gpu_nvml_ops;
    src->state = n;
    return 0;
fail:
    dlclose(n->lib);
    free(n);
    return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error", "%s lacks %s", library, missing);
}

int gpu_nvml_open(struct gpu_source *src, struct sl_error *err)
{
    return gpu_nvml_open_library("libnvidia-ml.so.1", src, err);
}
