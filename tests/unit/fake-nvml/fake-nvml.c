/* STAND-IN FOR HARDWARE THIS MACHINE LACKS: a fake libnvidia-ml.so.1.
 *
 * Not NVIDIA's library and not used outside the unit tests. It exports the
 * NVML entry points node/gpu-nvml.c resolves and answers them from a table
 * recorded from what NVML reports on an 8x H200 host (driver 550.90.07,
 * CUDA 12.4), so test-nvml.c can drive the real dlopen path. Each call reads
 * FAKE_NVML_SCENARIO, so a test switches the host's behaviour at any time:
 *
 *   (unset)      the 8 GPUs, processes on GPUs 0, 1 and 7
 *   init-fails   nvmlInit_v2 says the driver is not loaded
 *   no-gpus      nvmlDeviceGetCount_v2 says 0
 *   gpu-lost     GPU 5 fell off the bus (NVML_ERROR_GPU_IS_LOST)
 *   many-procs   GPU 2 runs 100 processes (more than a first call has room for)
 *   memory-full  GPU 0's memory is 97 % used (test-hints.c)
 *
 * Built by the Makefile as $(BUILD)/tests/fake-nvml/libnvidia-ml.so.1. */
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS                 0
#define NVML_ERROR_INVALID_ARGUMENT  2
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST       15
#define NVML_ERROR_UNINITIALIZED     1

#define MIB (1024ULL * 1024ULL)

struct nvml_memory {
    unsigned long long total, free, used;
};
struct nvml_utilization {
    unsigned gpu, memory;
};
struct nvml_process {
    unsigned pid;
    unsigned long long used_bytes;
    unsigned gpu_instance_id, compute_instance_id;
};

struct fake_process {
    unsigned pid;
    unsigned long long used_mib;
};

struct fake_gpu {
    const char *uuid;
    unsigned minor;
    unsigned long long used_mib;
    unsigned util_gpu, util_memory;
    struct fake_process procs[2];
    unsigned n_procs;
};

/* nvidia-smi on the recorded host: 143771MiB each, ~0.5 GiB used when idle. */
static const unsigned long long total_mib = 143771;
static const struct fake_gpu gpus[] = {
    { "GPU-3a7c1f52-9e0b-4d6a-b1c8-5f2e9d7a4b10", 0, 71234, 97, 61, { { 41872, 70712 } }, 1 },
    { "GPU-8d2e6b94-1f3a-47c5-9a0e-c6b7d1f2e385",
      1,
      40960,
      45,
      20,
      { { 41901, 20224 }, { 41902, 20224 } },
      2 },
    { "GPU-c41f0a7e-5b2d-4e8f-a3c6-0d9b8e7f6a21", 2, 522, 0, 0, { { 0, 0 } }, 0 },
    { "GPU-0b9e3d1c-7a6f-4c2e-8d5b-1e4f7a9c2d63", 3, 522, 0, 0, { { 0, 0 } }, 0 },
    { "GPU-e7a1c3f9-2d4b-4a8e-9f0c-6b5d3e1a7c94", 4, 522, 0, 0, { { 0, 0 } }, 0 },
    { "GPU-5f6d8b2a-3c1e-49d7-b4a2-8e0f9c6d1b57", 5, 522, 0, 0, { { 0, 0 } }, 0 },
    { "GPU-9c2b7e4d-6a0f-4b3c-85e1-2d7a6f0b9e18", 6, 522, 0, 0, { { 0, 0 } }, 0 },
    { "GPU-1d4a9f6e-8b3c-4e7a-a2d9-7c0e5b3f8a46", 7, 8714, 12, 3, { { 52011, 8192 } }, 1 },
};
#define N_GPUS (sizeof(gpus) / sizeof(gpus[0]))

static int initialised;

static int scenario(const char *name)
{
    const char *s = getenv("FAKE_NVML_SCENARIO");
    return s && strcmp(s, name) == 0;
}

static int copy_string(const char *s, char *out, unsigned len)
{
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

static const struct fake_gpu *gpu_of(void *dev)
{
    const struct fake_gpu *g = dev;
    if (!initialised || g < gpus || g >= gpus + N_GPUS)
        return NULL;
    return g;
}

int nvmlInit_v2(void)
{
    if (scenario("init-fails"))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    initialised++;
    return NVML_SUCCESS;
}

int nvmlShutdown(void)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    initialised--;
    return NVML_SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned *count)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    *count = scenario("no-gpus") ? 0 : N_GPUS;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **dev)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    if (index >= N_GPUS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index == 5 && scenario("gpu-lost"))
        return NVML_ERROR_GPU_IS_LOST;
    *dev = (void *)&gpus[index];
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(void *dev, char *name, unsigned len)
{
    if (!gpu_of(dev))
        return NVML_ERROR_INVALID_ARGUMENT;
    return copy_string("NVIDIA H200", name, len);
}

int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned len)
{
    const struct fake_gpu *g = gpu_of(dev);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    return copy_string(g->uuid, uuid, len);
}

int nvmlDeviceGetMinorNumber(void *dev, unsigned *minor)
{
    const struct fake_gpu *g = gpu_of(dev);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = g->minor;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *dev, struct nvml_memory *mem)
{
    const struct fake_gpu *g = gpu_of(dev);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = total_mib * MIB;
    mem->used = g->used_mib * MIB;
    if (g == &gpus[0] && scenario("memory-full"))
        mem->used = 140000 * MIB; /* 97 % of the card: the next batch may not fit */
    mem->free = mem->total - mem->used;
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *dev, struct nvml_utilization *util)
{
    const struct fake_gpu *g = gpu_of(dev);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = g->util_gpu;
    util->memory = g->util_memory;
    return NVML_SUCCESS;
}

/* The core's temperature: busy GPUs run warmer (the recorded host: 38 °C
 * idle, 67 °C at 97 %). Only sensor 0 (NVML_TEMPERATURE_GPU) exists. */
int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *celsius)
{
    const struct fake_gpu *g = gpu_of(dev);
    if (!g || sensor != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *celsius = 38 + g->util_gpu * 30 / 100;
    return NVML_SUCCESS;
}

/* Power drawn, milliwatts: 75 W idle up to about 690 W of the H200's 700 W. */
int nvmlDeviceGetPowerUsage(void *dev, unsigned *milliwatts)
{
    const struct fake_gpu *g = gpu_of(dev);
    if (!g)
        return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = 75000 + g->util_gpu * 6300;
    return NVML_SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *count, struct nvml_process *out)
{
    const struct fake_gpu *g = gpu_of(dev);
    unsigned n;

    if (!g || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = g == &gpus[2] && scenario("many-procs") ? 100 : g->n_procs;
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].pid = i < g->n_procs ? g->procs[i].pid : 60000 + i;
        out[i].used_bytes = (i < g->n_procs ? g->procs[i].used_mib : 1024) * MIB;
        out[i].gpu_instance_id = out[i].compute_instance_id = 0xFFFFFFFF;
    }
    *count = n;
    return NVML_SUCCESS;
}

int nvmlSystemGetDriverVersion(char *version, unsigned len)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string("550.90.07", version, len);
}

int nvmlSystemGetCudaDriverVersion(int *version)
{
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    *version = 12040;
    return NVML_SUCCESS;
}
