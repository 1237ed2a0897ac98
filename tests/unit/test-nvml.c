/* node/gpu-nvml.c through the real dlopen path, against the stand-in
 * libnvidia-ml.so.1 in tests/unit/fake-nvml/ (answers recorded from an 8x
 * H200 host; no GPU on the machines that run these tests). */
#include "harness.h"

#include "../../node/gpu.h"
#include "../../lib/cleanup.h"
#include "../../lib/xalloc.h"

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* $(BUILD)/tests/fake-nvml/libnvidia-ml.so.1, next to this binary. */
static const char *fake_nvml(void)
{
    static char path[PATH_MAX + 64];
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n < 0)
        return "fake-nvml/libnvidia-ml.so.1";
    exe[n] = '\0';
    snprintf(path, sizeof(path), "%s/fake-nvml/libnvidia-ml.so.1", dirname(exe));
    return path;
}

static bool open_fake(const char *scenario, struct gpu_source *src, struct sl_error *err)
{
    if (scenario)
        setenv("FAKE_NVML_SCENARIO", scenario, 1);
    else
        unsetenv("FAKE_NVML_SCENARIO");
    return gpu_nvml_open_library(fake_nvml(), src, err) == 0;
}

TEST(nvml_inventory_of_eight_h200)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    struct gpu_inventory inv;

    if (!CHECK(open_fake(NULL, &src, &err)) || !CHECK_STR(src.ops->name, "nvml")) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    CHECK_EQ_INT(src.ops->inventory(src.state, &inv, &err), 0);
    CHECK_EQ_INT(inv.n, 8);
    CHECK_STR(inv.gpus[0].name, "NVIDIA H200");
    CHECK_STR(inv.gpus[0].uuid, "GPU-3a7c1f52-9e0b-4d6a-b1c8-5f2e9d7a4b10");
    CHECK_STR(inv.gpus[7].uuid, "GPU-1d4a9f6e-8b3c-4e7a-a2d9-7c0e5b3f8a46");
    for (size_t i = 0; i < inv.n; i++) {
        CHECK_EQ_INT(inv.gpus[i].index, i);
        CHECK_EQ_INT(inv.gpus[i].minor, i);
        CHECK_EQ_INT(inv.gpus[i].vram_mib, 143771);
        CHECK(!inv.gpus[i].simulated);
        CHECK_PREFIX(inv.gpus[i].uuid, "GPU-");
    }
    CHECK_STR(inv.driver_version, "550.90.07");
    CHECK_STR(inv.cuda_version, "12.4");

    const struct gpu_inventory *host = gpu_host_inventory();
    if (CHECK(host)) {
        CHECK_EQ_INT(host->n, 8);
        CHECK_STR(host->gpus[3].uuid, inv.gpus[3].uuid);
    }
    gpu_source_release(&src);
    CHECK(src.ops == NULL);
}

TEST(nvml_usage_and_processes)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    cleanup_free struct gpu_usage *u = xcalloc(GPU_MAX, sizeof(*u));
    size_t n = 0;

    if (!CHECK(open_fake(NULL, &src, &err)))
        return;
    if (!CHECK_EQ_INT(src.ops->usage(src.state, u, &n, &err), 0) || !CHECK_EQ_INT(n, 8)) {
        gpu_source_release(&src);
        return;
    }
    CHECK_EQ_INT(u[0].gpu_percent, 97);
    CHECK_EQ_INT(u[0].memory_percent, 61);
    CHECK_EQ_INT(u[0].used_mib, 71234);
    CHECK_EQ_INT(u[0].total_mib, 143771);
    CHECK_EQ_INT(u[0].n_procs, 1);
    CHECK_EQ_INT(u[0].procs[0].pid, 41872);
    CHECK_EQ_INT(u[0].procs[0].used_mib, 70712);
    CHECK_EQ_INT(u[1].n_procs, 2);
    CHECK_EQ_INT(u[1].procs[1].pid, 41902);
    CHECK_EQ_INT(u[1].procs[1].used_mib, 20224);
    CHECK_EQ_INT(u[2].n_procs, 0);
    CHECK_EQ_INT(u[2].gpu_percent, 0);
    CHECK_EQ_INT(u[2].used_mib, 522);
    CHECK_EQ_INT(u[7].index, 7);
    CHECK_EQ_INT(u[7].gpu_percent, 12);
    CHECK_EQ_INT(u[7].procs[0].pid, 52011);
    /* temperature and power, for the metrics (node/metrics.h) */
    CHECK_EQ_INT(u[0].temperature_c, 38 + 97 * 30 / 100);
    CHECK_EQ_INT(u[0].power_mw, 75000 + 97 * 6300);
    CHECK_EQ_INT(u[2].temperature_c, 38);
    CHECK_EQ_INT(u[2].power_mw, 75000);
    gpu_source_release(&src);
}

/* 100 processes: NVML answers INSUFFICIENT_SIZE first; the first
 * GPU_PROC_MAX are kept and all are counted. */
TEST(nvml_more_processes_than_room)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    cleanup_free struct gpu_usage *u = xcalloc(GPU_MAX, sizeof(*u));
    size_t n = 0;

    if (!CHECK(open_fake("many-procs", &src, &err)))
        return;
    CHECK_EQ_INT(src.ops->usage(src.state, u, &n, &err), 0);
    CHECK_EQ_INT(u[2].procs_total, 100);
    CHECK_EQ_INT(u[2].n_procs, GPU_PROC_MAX);
    CHECK_EQ_INT(u[2].procs[GPU_PROC_MAX - 1].pid, 60000 + GPU_PROC_MAX - 1);
    CHECK_EQ_INT(u[2].procs[0].used_mib, 1024);
    gpu_source_release(&src);
    unsetenv("FAKE_NVML_SCENARIO");
}

TEST(nvml_init_fails)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };

    CHECK(!open_fake("init-fails", &src, &err));
    CHECK_EQ_INT(err.kind, SL_E_UNAVAILABLE);
    CHECK_CONTAINS(err.message, "NVML did not start");
    CHECK(src.ops == NULL);
    unsetenv("FAKE_NVML_SCENARIO");
}

TEST(nvml_zero_gpus)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };

    CHECK(!open_fake("no-gpus", &src, &err));
    CHECK_EQ_INT(err.kind, SL_E_NOT_FOUND);
    CHECK_STR(err.code, "no_gpus");
    unsetenv("FAKE_NVML_SCENARIO");
}

/* A GPU lost at start-up stops the agent with the GPU named; one lost later
 * fails the inventory and the metrics, also naming it. */
TEST(nvml_gpu_lost)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    struct gpu_inventory inv;
    cleanup_free struct gpu_usage *u = xcalloc(GPU_MAX, sizeof(*u));
    size_t n = 0;

    CHECK(!open_fake("gpu-lost", &src, &err));
    CHECK_CONTAINS(err.message, "GPU 5");

    sl_error_clear(&err);
    if (!CHECK(open_fake(NULL, &src, &err)))
        return;
    setenv("FAKE_NVML_SCENARIO", "gpu-lost", 1);
    CHECK_EQ_INT(src.ops->inventory(src.state, &inv, &err), -1);
    CHECK_CONTAINS(err.message, "could not read GPU 5");
    sl_error_clear(&err);
    CHECK_EQ_INT(src.ops->usage(src.state, u, &n, &err), -1);
    CHECK_CONTAINS(err.message, "GPU 5");
    CHECK_EQ_INT(n, 5); /* the GPUs before it were read */
    gpu_source_release(&src);
    unsetenv("FAKE_NVML_SCENARIO");
}

TEST(nvml_library_missing)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };

    CHECK_EQ_INT(gpu_nvml_open_library("/nonexistent/libnvidia-ml.so.1", &src, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_NOT_FOUND);
    CHECK_STR(err.code, "no_nvml");
}

TEST(simulated_usage_is_idle)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    cleanup_free struct gpu_usage *u = xcalloc(GPU_MAX, sizeof(*u));
    size_t n = 0;

    if (!CHECK_EQ_INT(gpu_sim_open("2:RTX 4090", &src, &err), 0))
        return;
    CHECK_EQ_INT(src.ops->usage(src.state, u, &n, &err), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(u[1].index, 1);
    CHECK_EQ_INT(u[1].gpu_percent, 0);
    CHECK_EQ_INT(u[1].n_procs, 0);
    gpu_source_release(&src);
}

/* gpu.c's table: each source by its name, its argument checked, an unknown
 * name refused with the list of sources. */
TEST(source_chosen_by_name)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    struct gpu_inventory inv;

    CHECK_STR(gpu_source_name(&src), "none");
    if (!CHECK_EQ_INT(gpu_source_open("simulated", "3:RTX 3090", &src, &err), 0))
        return;
    CHECK_STR(gpu_source_name(&src), "simulated");
    CHECK_EQ_INT(src.ops->inventory(src.state, &inv, &err), 0);
    CHECK_EQ_INT(inv.n, 3);
    CHECK_STR(inv.gpus[2].name, "RTX 3090");
    CHECK(inv.gpus[2].simulated);
    gpu_source_release(&src);
    CHECK_STR(gpu_source_name(&src), "none");

    /* the simulated source's own format message, not a generic one */
    CHECK_EQ_INT(gpu_source_open("simulated", NULL, &src, &err), -1);
    CHECK_STR(err.code, "invalid_config");
    CHECK_CONTAINS(err.message, "COUNT:MODEL");
    sl_error_clear(&err);
    CHECK_EQ_INT(gpu_source_open("nvml", "2:RTX 4090", &src, &err), -1);
    CHECK_CONTAINS(err.message, "takes no argument");
    sl_error_clear(&err);
    CHECK_EQ_INT(gpu_source_open("rocm", NULL, &src, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_INVALID);
    CHECK_CONTAINS(err.message, "no GPU source 'rocm'");
    CHECK_CONTAINS(err.message, "nvml");
    CHECK_CONTAINS(err.message, "simulated");
    CHECK(src.ops == NULL);
}
