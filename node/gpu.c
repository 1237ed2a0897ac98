/* The GPU sources by name (gpu.h), as crun picks its cgroup manager from a
 * table: the agent names one and never calls a source's open directly. */
#include "gpu.h"

#include "../lib/cleanup.h"

#include <string.h>

static int open_nvml(const char *arg, struct gpu_source *src, struct sl_error *err)
{
    if (arg && arg[0])
        return sl_fail(err, SL_E_INVALID, "invalid_config",
                       "the GPU source 'nvml' takes no argument; got '%s'", arg);
    return gpu_nvml_open(src, err);
}

static int open_simulated(const char *arg, struct gpu_source *src, struct sl_error *err)
{
    return gpu_sim_open(arg ? arg : "", src, err);
}

static const struct gpu_backend {
    const char *name;
    int (*open)(const char *arg, struct gpu_source *src, struct sl_error *err);
} gpu_backends[] = {
    { "nvml", open_nvml },
    { "simulated", open_simulated },
};

int gpu_source_open(const char *name, const char *arg, struct gpu_source *src, struct sl_error *err)
{
    *src = (struct gpu_source){ 0 };
    for (size_t i = 0; i < ARRAY_SIZE(gpu_backends); i++)
        if (strcmp(name, gpu_backends[i].name) == 0)
            return gpu_backends[i].open(arg, src, err);
    return sl_fail(err, SL_E_INVALID, "invalid_config",
                   "no GPU source '%.64s': use nvml (NVIDIA GPUs) or simulated (COUNT:MODEL)",
                   name);
}

const char *gpu_source_name(const struct gpu_source *src)
{
    return src->ops ? src->ops->name : "none";
}

void gpu_source_release(struct gpu_source *src)
{
    if (src->ops && src->ops->release)
        src->ops->release(src->state);
    src->ops = NULL;
    src->state = NULL;
}
