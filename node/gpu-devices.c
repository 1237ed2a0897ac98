/* Choosing between the CDI spec and the device-node fallback, and the
 * fallback itself: what nvidia-container-cli would bind without a spec, cut
 * down to the compute and utility capabilities. */
#include "gpu-devices.h"
#include "cdi.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Device nodes every GPU container needs, when the host has them. */
static const char *const control_nodes[] = {
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
};

/* The driver's user-space side for CUDA and NVML, by soname. */
static const char *const driver_libraries[] = {
    "libnvidia-ml.so.1",   "libcuda.so.1",          "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4", "libcudadebugger.so.1",  "libnvidia-allocator.so.1",
    "libnvidia-cfg.so.1",  "libnvidia-opencl.so.1", "libnvidia-gpucomp.so",
};

static const char *const driver_binaries[] = {
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
};

static const char *const default_lib_dirs[] = {
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64",
};

static const char *const default_bin_dirs[] = { "/usr/bin", "/usr/sbin", "/bin" };

static const struct gpu_info *gpu_by_index(const struct gpu_inventory *inv, unsigned index)
{
    for (size_t i = 0; inv && i < inv->n; i++)
        if (inv->gpus[i].index == index)
            return &inv->gpus[i];
    return NULL;
}

static int apply_cdi(json_t *config, const struct gpu_devices_host *host,
                     const struct cdi_registry *reg, const struct gpu_info *const *gpus, size_t n,
                     struct sl_error *err)
{
    struct cdi_hook_policy policy = {
        .rootfs = json_string_value(json_object_get(json_object_get(config, "root"), "path")),
        .trusted_dirs = host->hook_dirs,
        .n_trusted_dirs = host->n_hook_dirs,
    };
    cleanup_free bool *used = xcalloc(reg->n ? reg->n : 1, sizeof(*used));

    for (size_t i = 0; i < n; i++) {
        char index[16], gpu_index[20];
        snprintf(index, sizeof(index), "%u", gpus[i]->index);
        snprintf(gpu_index, sizeof(gpu_index), "gpu%u", gpus[i]->index);
        const char *names[] = { gpus[i]->uuid, index, gpu_index };
        size_t spec = 0;
        json_t *dev = cdi_registry_find(reg, names, ARRAY_SIZE(names), &spec);
        if (!dev)
            return sl_fail(err, SL_E_UNAVAILABLE, "cdi_error",
                           "no CDI spec names GPU %u (%s): regenerate it with `nvidia-ctk cdi "
                           "generate --output=/etc/cdi/nvidia.yaml`",
                           gpus[i]->index, gpus[i]->uuid);
        cleanup_free char *origin = xasprintf("CDI spec '%s', device '%s'", reg->specs[spec].path,
                                              json_string_value(json_object_get(dev, "name")));
        if (cdi_apply_edits(config, json_object_get(dev, "containerEdits"), &policy, origin, err) <
            0)
            return -1;
        used[spec] = true;
    }
    /* the spec-wide edits of each spec that gave a device, once */
    for (size_t s = 0; s < reg->n; s++) {
        if (!used[s])
            continue;
        cleanup_free char *origin = xasprintf("CDI spec '%s'", reg->specs[s].path);
        if (cdi_apply_edits(config, json_object_get(reg->specs[s].doc, "containerEdits"), &policy,
                            origin, err) < 0)
            return -1;
    }
    return 0;
}

/* The path `ldconfig -p` gives for a soname, or NULL. */
static char *ldconfig_lookup(const char *ldconfig_out, const char *soname)
{
    size_t n = strlen(soname);
    for (const char *line = ldconfig_out; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *p = line;
        while (p < line + len && (*p == ' ' || *p == '\t'))
            p++;
        const char *arrow = memmem(line, len, "=> ", 3);
        /* on a 64-bit host "(libc6)" is the 32-bit copy */
        bool other_arch = sizeof(void *) == 8 && memmem(line, len, "(libc6)", 7);
        if (arrow && !other_arch && (size_t)(line + len - p) > n && strncmp(p, soname, n) == 0 &&
            p[n] == ' ')
            return xstrndup(arrow + 3, (size_t)(line + len - arrow - 3));
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

static char *find_in_dirs(const char *const *dirs, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        char *path = xasprintf("%s/%s", dirs[i], name);
        if (access(path, F_OK) == 0)
            return path;
        free(path);
    }
    return NULL;
}

static int apply_fallback(json_t *config, const struct gpu_devices_host *host,
                          const struct gpu_info *const *gpus, size_t n, struct sl_error *err)
{
    const char *dev = host->dev_dir ? host->dev_dir : "/dev";
    const char *const *lib_dirs = host->lib_dirs ? host->lib_dirs : default_lib_dirs;
    size_t n_lib_dirs = host->lib_dirs ? host->n_lib_dirs : ARRAY_SIZE(default_lib_dirs);
    const char *const *bin_dirs = host->bin_dirs ? host->bin_dirs : default_bin_dirs;
    size_t n_bin_dirs = host->bin_dirs ? host->n_bin_dirs : ARRAY_SIZE(default_bin_dirs);
    cleanup_buf struct sl_buf ldconfig = SL_BUF_INIT;

    for (size_t i = 0; i < n; i++) {
        cleanup_free char *host_path = xasprintf("%s/nvidia%u", dev, gpus[i]->minor);
        cleanup_free char *path = xasprintf("/dev/nvidia%u", gpus[i]->minor);
        if (cdi_add_device_node(config, path, host_path, 'c', -1, -1, -1, err) < 0) {
            sl_error_prefix(err, "GPU %u", gpus[i]->index);
            return -1;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(control_nodes); i++) {
        cleanup_free char *host_path = xasprintf("%s/%s", dev, control_nodes[i]);
        cleanup_free char *path = xasprintf("/dev/%s", control_nodes[i]);
        if (access(host_path, F_OK) != 0)
            continue;
        if (cdi_add_device_node(config, path, host_path, 'c', -1, -1, -1, err) < 0)
            return -1;
    }

    if (host->use_ldconfig) {
        struct sl_error e = SL_ERROR_INIT;
        const char *argv[] = { "ldconfig", "-p", NULL };
        sl_error_warn(sl_run(argv, &ldconfig, &e), &e,
                      "gpu: looking for the driver's libraries in the usual places");
    }
    for (size_t i = 0; i < ARRAY_SIZE(driver_libraries); i++) {
        cleanup_free char *path =
            ldconfig.len ? ldconfig_lookup(ldconfig.data, driver_libraries[i]) : NULL;
        if (!path)
            path = find_in_dirs(lib_dirs, n_lib_dirs, driver_libraries[i]);
        if (path)
            cdi_add_bind_mount(config, path, path, "ro,nosuid,nodev,rbind");
    }
    for (size_t i = 0; i < ARRAY_SIZE(driver_binaries); i++) {
        cleanup_free char *path = find_in_dirs(bin_dirs, n_bin_dirs, driver_binaries[i]);
        if (path)
            cdi_add_bind_mount(config, path, path, "ro,nosuid,nodev,rbind");
    }
    return 0;
}

int gpu_devices_apply_host(json_t *config, const struct gpu_devices_host *host,
                           const unsigned *indices, size_t n, struct sl_error *err)
{
    const struct gpu_info *gpus[GPU_MAX];
    struct cdi_registry reg;
    cleanup_buf struct sl_buf uuids = SL_BUF_INIT;
    cleanup_buf struct sl_buf numbers = SL_BUF_INIT;
    int rc;

    if (n > GPU_MAX)
        return sl_fail(err, SL_E_UNAVAILABLE, "gpu_error", "%zu GPUs is more than %d", n, GPU_MAX);
    for (size_t i = 0; i < n; i++) {
        gpus[i] = gpu_by_index(host->inv, indices[i]);
        if (!gpus[i])
            return sl_fail(err, SL_E_UNAVAILABLE, "gpu_error", "this host has no GPU %u",
                           indices[i]);
    }
    cdi_registry_load(&reg, host->cdi_dirs ? host->cdi_dirs : cdi_default_dirs,
                      host->cdi_dirs ? host->n_cdi_dirs : cdi_n_default_dirs, CDI_KIND_NVIDIA_GPU,
                      err);
    if (reg.n)
        rc = apply_cdi(config, host, &reg, gpus, n, err);
    else
        rc = apply_fallback(config, host, gpus, n, err);
    cdi_registry_release(&reg);
    if (rc < 0)
        return -1;

    sl_buf_addf(&uuids, "NVIDIA_VISIBLE_DEVICES=");
    sl_buf_addf(&numbers, "CUDA_VISIBLE_DEVICES=");
    for (size_t i = 0; i < n; i++) {
        sl_buf_addf(&uuids, "%s%s", i ? "," : "", gpus[i]->uuid);
        sl_buf_addf(&numbers, "%s%zu", i ? "," : "", i);
    }
    cdi_set_env(config, uuids.data);
    cdi_set_env(config, numbers.data);
    return 0;
}

int gpu_devices_apply(json_t *config, const unsigned *gpus, size_t n, struct sl_error *err)
{
    const struct gpu_inventory *inv = gpu_host_inventory();
    if (!inv || n == 0)
        return 0;
    struct gpu_devices_host host = { .inv = inv, .use_ldconfig = true };
    return gpu_devices_apply_host(config, &host, gpus, n, err);
}
