/* NVIDIA GPUs through NVML, loaded with dlopen so the agent runs (and
 * builds) on hosts without the driver. Only the handful of entry points the
 * inventory needs are resolved. */
#include "gpu.h"

#include "../lib/xalloc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_return;
typedef void *nvml_device;
struct nvml_memory {
    unsigned long long total, free, used;
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
    nvml_return (*cuda)(int *);
};

static int nvml_inventory(void *state, struct gpu_inventory *inv, struct sl_error *err)
{
    struct nvml *n = state;
    unsigned count = 0;
    int cuda = 0;

    memset(inv, 0, sizeof(*inv));
    if (n->count(&count) != 0)
        return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error", "NVML could not count the GPUs");
    for (unsigned i = 0; i < count && i < GPU_MAX; i++) {
        struct gpu_info *g = &inv->gpus[inv->n];
        struct nvml_memory mem = { 0 };
        nvml_device dev;
        if (n->by_index(i, &dev) != 0 || n->name(dev, g->name, sizeof(g->name)) != 0 ||
            n->uuid(dev, g->uuid, sizeof(g->uuid)) != 0 || n->memory(dev, &mem) != 0)
            return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error",
                           "NVML could not read GPU %u: check the driver with nvidia-smi", i);
        g->index = i;
        g->vram_mib = mem.total / (1024 * 1024);
        g->simulated = false;
        inv->n++;
    }
    if (n->driver(inv->driver_version, sizeof(inv->driver_version)) != 0)
        snprintf(inv->driver_version, sizeof(inv->driver_version), "unknown");
    if (n->cuda && n->cuda(&cuda) == 0 && cuda > 0)
        snprintf(inv->cuda_version, sizeof(inv->cuda_version), "%d.%d", cuda / 1000,
                 (cuda % 1000) / 10);
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

int gpu_nvml_open(struct gpu_source *src, struct sl_error *err)
{
    struct nvml *n = xzalloc(sizeof(*n));
    const char *missing = NULL;
    unsigned count = 0;

    n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        free(n);
        return sl_fail(err, SL_E_NOT_FOUND, "no_nvml",
                       "no NVIDIA driver here (libnvidia-ml.so.1 not found)");
    }
    RESOLVE(init, "nvmlInit_v2");
    RESOLVE(shutdown, "nvmlShutdown");
    RESOLVE(count, "nvmlDeviceGetCount_v2");
    RESOLVE(by_index, "nvmlDeviceGetHandleByIndex_v2");
    RESOLVE(name, "nvmlDeviceGetName");
    RESOLVE(uuid, "nvmlDeviceGetUUID");
    RESOLVE(memory, "nvmlDeviceGetMemoryInfo");
    RESOLVE(driver, "nvmlSystemGetDriverVersion");
    *(void **)&n->cuda = dlsym(n->lib, "nvmlSystemGetCudaDriverVersion");
    if (n->init() != 0) {
        dlclose(n->lib);
        free(n);
        return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error",
                       "NVML did not start: check the driver with nvidia-smi");
    }
    if (n->count(&count) != 0 || count == 0) {
        nvml_release(n);
        return sl_fail(err, SL_E_NOT_FOUND, "no_gpus", "NVML sees no GPU on this host");
    }
    src->ops = &gpu_nvml_ops;
    src->state = n;
    return 0;
fail:
    dlclose(n->lib);
    free(n);
    return sl_fail(err, SL_E_UNAVAILABLE, "nvml_error", "libnvidia-ml.so.1 lacks %s", missing);
}
