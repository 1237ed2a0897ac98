/* node/cdi.c and node/gpu-devices.c: CDI specs as nvidia-ctk writes them on
 * an 8x H200 host (trimmed to what the checks need), applied to the OCI
 * config oci.c builds; and the fallback without a spec. The host's /dev,
 * driver files and hook programs are a temporary tree: device nodes are
 * symlinks to /dev/null (a character device anyone can stat). */
#include "harness.h"

#include "../../node/cdi.h"
#include "../../node/fsutil.h"
#include "../../node/gpu-devices.h"
#include "../../node/oci.h"
#include "../../lib/buf.h"
#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* @HOST@ stands for the temporary host tree. */
static const char nvidia_yaml[] =
    "---\n"
    "cdiVersion: 0.5.0\n"
    "kind: nvidia.com/gpu\n"
    "containerEdits:\n"
    "  env:\n"
    "  - NVIDIA_VISIBLE_DEVICES=void\n"
    "  - NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu\n"
    "  deviceNodes:\n"
    "  - path: /dev/nvidia-uvm\n"
    "    hostPath: @HOST@/dev/nvidia-uvm\n"
    "  - path: /dev/nvidiactl\n"
    "    hostPath: @HOST@/dev/nvidiactl\n"
    "  hooks:\n"
    "  - hookName: createContainer\n"
    "    path: @HOST@/usr/bin/nvidia-cdi-hook\n"
    "    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]\n"
    "    env: [LD_PRELOAD=/tmp/evil.so, NVIDIA_CTK_DEBUG=false]\n"
    "  - hookName: createContainer\n"
    "    path: @HOST@/rootfs/usr/bin/nvidia-cdi-hook\n"
    "    args: [nvidia-cdi-hook, chmod]\n"
    "  - hookName: startContainer\n"
    "    path: @HOST@/usr/bin/nvidia-cdi-hook\n"
    "  - hookName: createContainer\n"
    "    path: usr/bin/nvidia-cdi-hook\n"
    "  - hookName: createRuntime\n"
    "    path: @HOST@/usr/bin/link-into-rootfs\n"
    "  - hookName: poststop\n"
    "    path: @HOST@/opt/elsewhere/tool\n"
    "  mounts:\n"
    "  - hostPath: @HOST@/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07\n"
    "    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07\n"
    "    options: [ro, nosuid, nodev, bind]\n"
    "  - hostPath: @HOST@/usr/bin/nvidia-smi\n"
    "    containerPath: /usr/bin/nvidia-smi\n"
    "    options: [ro, nosuid, nodev, bind]\n"
    "  - hostPath: @HOST@/evil\n"
    "    containerPath: /proc\n"
    "devices:\n"
    "- name: \"0\"\n"
    "  containerEdits:\n"
    "    deviceNodes:\n"
    "    - {path: /dev/nvidia0, type: c, major: 195, minor: 0}\n"
    "- name: \"1\"\n"
    "  containerEdits:\n"
    "    deviceNodes:\n"
    "    - {path: /dev/nvidia1, type: c, major: 195, minor: 1, fileMode: 0o660}\n"
    "    env: [CUDA_VISIBLE_DEVICES=7]\n"
    "- name: \"3\"\n"
    "  containerEdits:\n"
    "    deviceNodes:\n"
    "    - path: /dev/nvidia3\n"
    "      hostPath: @HOST@/dev/nvidia3\n"
    "- name: all\n"
    "  containerEdits:\n"
    "    deviceNodes:\n"
    "    - {path: /dev/nvidia0, type: c, major: 195, minor: 0}\n"
    "    - {path: /dev/nvidia1, type: c, major: 195, minor: 1}\n";

/* A spec by UUID, in the higher-priority directory, for GPU 3 only. */
static const char nvidia_uuid_json[] =
    "{\"cdiVersion\": \"0.6.0\", \"kind\": \"nvidia.com/gpu\",\n"
    " \"devices\": [{\"name\": \"GPU-0b9e3d1c-7a6f-4c2e-8d5b-1e4f7a9c2d63\",\n"
    "   \"containerEdits\": {\"deviceNodes\": [{\"path\": \"/dev/nvidia3\", \"type\": \"c\",\n"
    "     \"major\": 195, \"minor\": 3}], \"env\": [\"FROM_RUN_CDI=1\"]}}],\n"
    " \"containerEdits\": {\"env\": [\"RUN_CDI_WIDE=1\"]}}\n";

static const char other_vendor_yaml[] = "cdiVersion: 0.5.0\n"
                                        "kind: vendor.example/fpga\n"
                                        "devices:\n"
                                        "- name: \"0\"\n"
                                        "  containerEdits: {env: [FPGA=1]}\n";

static const char *const uuids[8] = {
    "GPU-3a7c1f52-9e0b-4d6a-b1c8-5f2e9d7a4b10", "GPU-8d2e6b94-1f3a-47c5-9a0e-c6b7d1f2e385",
    "GPU-c41f0a7e-5b2d-4e8f-a3c6-0d9b8e7f6a21", "GPU-0b9e3d1c-7a6f-4c2e-8d5b-1e4f7a9c2d63",
    "GPU-e7a1c3f9-2d4b-4a8e-9f0c-6b5d3e1a7c94", "GPU-5f6d8b2a-3c1e-49d7-b4a2-8e0f9c6d1b57",
    "GPU-9c2b7e4d-6a0f-4b3c-85e1-2d7a6f0b9e18", "GPU-1d4a9f6e-8b3c-4e7a-a2d9-7c0e5b3f8a46",
};

static void h200_inventory(struct gpu_inventory *inv)
{
    memset(inv, 0, sizeof(*inv));
    for (unsigned i = 0; i < 8; i++) {
        inv->gpus[i].index = i;
        /* the fallback must use the minor, not the index: swap 2 and 3 */
        inv->gpus[i].minor = i == 2 ? 3 : i == 3 ? 2 : i;
        snprintf(inv->gpus[i].uuid, sizeof(inv->gpus[i].uuid), "%s", uuids[i]);
        snprintf(inv->gpus[i].name, sizeof(inv->gpus[i].name), "NVIDIA H200");
        inv->gpus[i].vram_mib = 143771;
    }
    inv->n = 8;
}

static void make_dir(const char *path)
{
    struct sl_error err = SL_ERROR_INIT;
    if (fs_mkdir_p(path, 0755, &err) < 0) {
        fprintf(stderr, "%s\n", err.message);
        exit(2);
    }
}

static const char *host_file(const char *name, const char *text, mode_t mode)
{
    const char *path = test_path(name);
    cleanup_free char *dir = xstrdup(path);
    *strrchr(dir, '/') = '\0';
    make_dir(dir);
    test_write_file(name, text);
    chmod(path, mode);
    return path;
}

static void host_link(const char *name, const char *target)
{
    const char *path = test_path(name);
    cleanup_free char *dir = xstrdup(path);
    *strrchr(dir, '/') = '\0';
    make_dir(dir);
    if (symlink(target, path) < 0) {
        perror(path);
        exit(2);
    }
}

/* text with @HOST@ replaced by the temporary tree; the caller frees it */
static char *with_host(const char *text)
{
    struct sl_buf b;
    const char *host = test_tmpdir();
    sl_buf_init(&b);
    for (const char *p = text; *p;) {
        const char *at = strstr(p, "@HOST@");
        if (!at) {
            sl_buf_adds(&b, p);
            break;
        }
        sl_buf_add(&b, p, (size_t)(at - p));
        sl_buf_adds(&b, host);
        p = at + 6;
    }
    return sl_buf_detach(&b, NULL);
}

static void host_spec(const char *name, const char *text)
{
    cleanup_free char *spec = with_host(text);
    host_file(name, spec, 0644);
}

/* the host tree: device nodes, driver files, hook programs, a rootfs */
static void make_host(void)
{
    static const char *const devs[] = { "nvidia0",   "nvidia1",    "nvidia2",         "nvidia3",
                                        "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools" };
    for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
        cleanup_free char *name = xasprintf("dev/%s", devs[i]);
        host_link(name, "/dev/null");
    }
    host_file("usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0755);
    host_file("usr/bin/nvidia-smi", "#!/bin/sh\n", 0755);
    host_file("usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07", "ELF", 0644);
    host_link("usr/lib/x86_64-linux-gnu/libcuda.so.1", "libcuda.so.550.90.07");
    host_file("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "ELF", 0644);
    host_file("rootfs/usr/bin/nvidia-cdi-hook", "#!/bin/sh\n", 0755);
    host_link("usr/bin/link-into-rootfs", test_path("rootfs/usr/bin/nvidia-cdi-hook"));
    host_file("opt/elsewhere/tool", "#!/bin/sh\n", 0755);
}

static json_t *instance_config(const unsigned *gpus, size_t n)
{
    struct oci_params p = {
        .id = "i-test",
        .rootfs = test_path("rootfs"),
        .boot_dir = test_path("boot"),
        .cgroup_path = "/suanli/i-test",
        .gpus = gpus,
        .n_gpus = n,
    };
    return oci_config(&p);
}

static int apply(json_t *config, const struct gpu_inventory *inv, const unsigned *gpus, size_t n,
                 struct sl_error *err)
{
    const char *cdi_dirs[] = { test_path("etc/cdi"), test_path("var/run/cdi") };
    const char *lib_dirs[] = { test_path("usr/lib/x86_64-linux-gnu") };
    const char *bin_dirs[] = { test_path("usr/bin") };
    const char *hook_dirs[] = { test_path("usr/bin") };
    struct gpu_devices_host host = {
        .inv = inv,
        .cdi_dirs = cdi_dirs,
        .n_cdi_dirs = 2,
        .dev_dir = test_path("dev"),
        .lib_dirs = lib_dirs,
        .n_lib_dirs = 1,
        .bin_dirs = bin_dirs,
        .n_bin_dirs = 1,
        .hook_dirs = hook_dirs,
        .n_hook_dirs = 1,
    };
    return gpu_devices_apply_host(config, &host, gpus, n, err);
}

/* ---- looking into a config ------------------------------------------- */

static json_t *device(json_t *config, const char *path)
{
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(json_object_get(config, "linux"), "devices"), i, d)
    {
        if (strcmp(json_string_value(json_object_get(d, "path")), path) == 0)
            return d;
    }
    return NULL;
}

static size_t count_devices(json_t *config)
{
    return json_array_size(json_object_get(json_object_get(config, "linux"), "devices"));
}

static bool allowed(json_t *config, long long major, long long minor)
{
    size_t i;
    json_t *r;
    json_t *res = json_object_get(json_object_get(config, "linux"), "resources");
    json_array_foreach(json_object_get(res, "devices"), i, r)
    {
        if (json_is_true(json_object_get(r, "allow")) &&
            json_integer_value(json_object_get(r, "major")) == major &&
            json_integer_value(json_object_get(r, "minor")) == minor)
            return true;
    }
    return false;
}

static json_t *mount_at(json_t *config, const char *dest)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(config, "mounts"), i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "destination")), dest) == 0)
            return m;
    }
    return NULL;
}

/* the value of NAME in process.env, and how often NAME is set */
static const char *env_value(json_t *config, const char *name, int *times)
{
    size_t i, n = strlen(name);
    json_t *e;
    const char *value = NULL;
    *times = 0;
    json_array_foreach(json_object_get(json_object_get(config, "process"), "env"), i, e)
    {
        const char *s = json_string_value(e);
        if (strncmp(s, name, n) == 0 && s[n] == '=') {
            value = s + n + 1;
            (*times)++;
        }
    }
    return value;
}

static size_t count_hooks(json_t *config, const char *kind)
{
    return json_array_size(json_object_get(json_object_get(config, "hooks"), kind));
}

/* ---- tests ----------------------------------------------------------- */

TEST(cdi_yaml_parses_like_json)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *yaml = with_host(nvidia_yaml);
    cleanup_json json_t *doc = cdi_spec_parse(yaml, strlen(yaml), true, &err);

    if (!CHECK(doc)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    CHECK_STR(json_string_value(json_object_get(doc, "kind")), CDI_KIND_NVIDIA_GPU);
    CHECK_STR(json_string_value(json_object_get(doc, "cdiVersion")), "0.5.0");
    json_t *dev1 = json_array_get(json_object_get(doc, "devices"), 1);
    CHECK_STR(json_string_value(json_object_get(dev1, "name")), "1"); /* quoted: a string */
    json_t *node =
        json_array_get(json_object_get(json_object_get(dev1, "containerEdits"), "deviceNodes"), 0);
    CHECK(json_is_integer(json_object_get(node, "major")));
    CHECK_EQ_INT(json_integer_value(json_object_get(node, "minor")), 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(node, "fileMode")), 0660);

    cleanup_json json_t *j =
        cdi_spec_parse(nvidia_uuid_json, strlen(nvidia_uuid_json), false, &err);
    CHECK(j);
}

TEST(cdi_malformed_specs_refused)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *bad[] = { "kind: [unclosed\n", "- a\n- b\n", "kind: x\n", "" };

    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        sl_error_clear(&err);
        CHECK(!cdi_spec_parse(bad[i], strlen(bad[i]), true, &err));
        CHECK_STR(err.code, "invalid_cdi_spec");
    }
    CHECK(!cdi_spec_parse("{\"kind\": 1", 10, false, &err));
    /* an alias bomb stays bounded */
    const char *bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                       "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                       "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                       "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                       "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                       "kind: nvidia.com/gpu\ndevices: []\n";
    CHECK(!cdi_spec_parse(bomb, strlen(bomb), true, &err));
}

/* GPUs 1 and 3 of 8: their nodes and the spec-wide ones, nothing of GPU 0;
 * env set by suanli whatever the spec says; only the trusted hook kept. */
TEST(cdi_applies_exactly_the_assigned_gpus)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_inventory inv;
    const unsigned gpus[] = { 1, 3 };
    int times;

    make_host();
    host_spec("etc/cdi/nvidia.yaml", nvidia_yaml);
    host_spec("etc/cdi/fpga.yaml", other_vendor_yaml);
    host_file("etc/cdi/broken.json", "{", 0644);
    h200_inventory(&inv);
    cleanup_json json_t *config = instance_config(gpus, 2);
    if (!CHECK_EQ_INT(apply(config, &inv, gpus, 2, &err), 0)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }

    CHECK(!device(config, "/dev/nvidia0"));
    CHECK(!device(config, "/dev/nvidia2"));
    json_t *d1 = device(config, "/dev/nvidia1");
    if (CHECK(d1)) {
        CHECK_STR(json_string_value(json_object_get(d1, "type")), "c");
        CHECK_EQ_INT(json_integer_value(json_object_get(d1, "major")), 195);
        CHECK_EQ_INT(json_integer_value(json_object_get(d1, "minor")), 1);
        CHECK_EQ_INT(json_integer_value(json_object_get(d1, "fileMode")), 0660);
    }
    json_t *d3 = device(config, "/dev/nvidia3"); /* no major/minor: stat of the host path */
    if (CHECK(d3)) {
        CHECK_EQ_INT(json_integer_value(json_object_get(d3, "major")), 1);
        CHECK_EQ_INT(json_integer_value(json_object_get(d3, "minor")), 3);
    }
    CHECK(device(config, "/dev/nvidiactl"));
    CHECK(device(config, "/dev/nvidia-uvm"));
    CHECK(!device(config, "/dev/nvidia-uvm-tools")); /* the spec does not name it */
    CHECK_EQ_INT(count_devices(config), 4);
    CHECK(allowed(config, 195, 1));
    CHECK(allowed(config, 1, 3));
    CHECK(!allowed(config, 195, 0));

    CHECK(mount_at(config, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07"));
    json_t *smi = mount_at(config, "/usr/bin/nvidia-smi");
    if (CHECK(smi))
        CHECK_STR(json_string_value(json_object_get(smi, "type")), "bind");
    json_t *proc = mount_at(config, "/proc"); /* suanli's own, not the spec's */
    if (CHECK(proc))
        CHECK_STR(json_string_value(json_object_get(proc, "type")), "proc");

    CHECK_STR(env_value(config, "NVIDIA_VISIBLE_DEVICES", &times),
              "GPU-8d2e6b94-1f3a-47c5-9a0e-c6b7d1f2e385,GPU-0b9e3d1c-7a6f-4c2e-8d5b-1e4f7a9c2d63");
    CHECK_EQ_INT(times, 1);
    CHECK_STR(env_value(config, "CUDA_VISIBLE_DEVICES", &times), "0,1");
    CHECK_EQ_INT(times, 1);
    CHECK_STR(env_value(config, "NVIDIA_CTK_LIBCUDA_DIR", &times), "/usr/lib/x86_64-linux-gnu");
    CHECK(!env_value(config, "FPGA", &times));

    /* hooks: the one in the host's trusted directory; the rootfs one, the
     * startContainer one, the relative one, the symlink into the rootfs and
     * the one outside trusted directories are dropped */
    CHECK_EQ_INT(count_hooks(config, "createContainer"), 1);
    CHECK_EQ_INT(count_hooks(config, "startContainer"), 0);
    CHECK_EQ_INT(count_hooks(config, "createRuntime"), 0);
    CHECK_EQ_INT(count_hooks(config, "poststop"), 0);
    json_t *hook =
        json_array_get(json_object_get(json_object_get(config, "hooks"), "createContainer"), 0);
    cleanup_free char *trusted = realpath(test_path("usr/bin/nvidia-cdi-hook"), NULL);
    CHECK_STR(json_string_value(json_object_get(hook, "path")), trusted);
    CHECK_STR(json_string_value(json_array_get(json_object_get(hook, "args"), 1)),
              "update-ldcache");
    json_t *henv = json_object_get(hook, "env");
    CHECK_EQ_INT(json_array_size(henv), 1); /* LD_PRELOAD gone */
    CHECK_STR(json_string_value(json_array_get(henv, 0)), "NVIDIA_CTK_DEBUG=false");
}

TEST(cdi_hook_policy)
{
    struct cdi_hook_policy policy;
    const char *why = NULL;
    char *real = NULL;
    const char *dirs[1];

    make_host();
    dirs[0] = test_path("usr/bin");
    policy = (struct cdi_hook_policy){ .rootfs = test_path("rootfs"),
                                       .trusted_dirs = dirs,
                                       .n_trusted_dirs = 1 };
    struct {
        const char *name, *path;
        bool ok;
    } cases[] = {
        { "createContainer", test_path("usr/bin/nvidia-cdi-hook"), true },
        { "poststop", test_path("usr/bin/nvidia-cdi-hook"), true },
        { "createContainer", test_path("rootfs/usr/bin/nvidia-cdi-hook"), false },
        { "createContainer", test_path("usr/bin/link-into-rootfs"), false },
        { "startContainer", test_path("usr/bin/nvidia-cdi-hook"), false },
        { "createContainer", "usr/bin/nvidia-cdi-hook", false },
        { "createContainer", "/usr/bin/../../../nonexistent", false },
        { "createContainer", test_path("opt/elsewhere/tool"), false },
        { "createContainer", test_path("usr/bin/../lib/x86_64-linux-gnu/libcuda.so.1"), false },
        { "madeUp", test_path("usr/bin/nvidia-cdi-hook"), false },
        { NULL, test_path("usr/bin/nvidia-cdi-hook"), false },
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        cleanup_json json_t *hook = json_pack("{s:s}", "path", cases[i].path);
        if (cases[i].name)
            json_object_set_new(hook, "hookName", json_string(cases[i].name));
        bool ok = cdi_hook_check(hook, &policy, &real, &why);
        if (ok != cases[i].ok)
            test_fail(__FILE__, __LINE__, "hook %zu (%s %s): %s", i, cases[i].name, cases[i].path,
                      ok ? "accepted" : why);
        CHECK(ok == (real != NULL));
        free(real);
    }

    /* a program others may write is refused */
    chmod(test_path("usr/bin/nvidia-cdi-hook"), 0777);
    cleanup_json json_t *hook = json_pack("{s:s, s:s}", "hookName", "createContainer", "path",
                                          test_path("usr/bin/nvidia-cdi-hook"));
    CHECK(!cdi_hook_check(hook, &policy, &real, &why));
    CHECK_CONTAINS(why, "writable");
}

/* /var/run/cdi wins over /etc/cdi; devices named by UUID; only the spec that
 * gave a device brings its spec-wide edits. */
TEST(cdi_later_directory_and_uuid_names)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_inventory inv;
    const unsigned gpus[] = { 3 };
    int times;

    make_host();
    host_spec("etc/cdi/nvidia.yaml", nvidia_yaml);
    host_spec("var/run/cdi/nvidia.json", nvidia_uuid_json);
    h200_inventory(&inv);
    cleanup_json json_t *config = instance_config(gpus, 1);
    if (!CHECK_EQ_INT(apply(config, &inv, gpus, 1, &err), 0)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    json_t *d3 = device(config, "/dev/nvidia3");
    if (CHECK(d3))
        CHECK_EQ_INT(json_integer_value(json_object_get(d3, "major")), 195);
    CHECK_EQ_INT(count_devices(config), 1);
    CHECK_STR(env_value(config, "FROM_RUN_CDI", &times), "1");
    CHECK_STR(env_value(config, "RUN_CDI_WIDE", &times), "1");
    CHECK(!env_value(config, "NVIDIA_CTK_LIBCUDA_DIR", &times));
    CHECK_EQ_INT(count_hooks(config, "createContainer"), 0);
    CHECK_STR(env_value(config, "CUDA_VISIBLE_DEVICES", &times), "0");
}

TEST(cdi_spec_without_the_gpu_fails)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_inventory inv;
    const unsigned gpus[] = { 2 };

    make_host();
    host_spec("etc/cdi/nvidia.yaml", nvidia_yaml);
    h200_inventory(&inv);
    cleanup_json json_t *config = instance_config(gpus, 1);
    CHECK_EQ_INT(apply(config, &inv, gpus, 1, &err), -1);
    CHECK_CONTAINS(err.message, "no CDI spec names GPU 2");
    CHECK_CONTAINS(err.message, "nvidia-ctk cdi generate");

    const unsigned missing[] = { 9 };
    sl_error_clear(&err);
    CHECK_EQ_INT(apply(config, &inv, missing, 1, &err), -1);
    CHECK_CONTAINS(err.message, "no GPU 9");
}

TEST(cdi_device_node_absent_on_host_fails)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_inventory inv;
    const unsigned gpus[] = { 3 };

    make_host();
    unlink(test_path("dev/nvidia3"));
    host_spec("etc/cdi/nvidia.yaml", nvidia_yaml);
    h200_inventory(&inv);
    cleanup_json json_t *config = instance_config(gpus, 1);
    CHECK_EQ_INT(apply(config, &inv, gpus, 1, &err), -1);
    CHECK_CONTAINS(err.message, "dev/nvidia3");
    CHECK_CONTAINS(err.message, "nvidia.yaml");
}

/* No spec: /dev/nvidia<minor> of the assigned GPUs, the control nodes the
 * host has, the driver's libraries and binaries read-only. */
TEST(fallback_device_nodes_and_driver_files)
{
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_inventory inv;
    const unsigned gpus[] = { 2 };
    int times;

    make_host();
    h200_inventory(&inv);
    cleanup_json json_t *config = instance_config(gpus, 1);
    if (!CHECK_EQ_INT(apply(config, &inv, gpus, 1, &err), 0)) {
        test_fail(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    CHECK(device(config, "/dev/nvidia3")); /* GPU 2's minor */
    CHECK(!device(config, "/dev/nvidia2"));
    CHECK(device(config, "/dev/nvidiactl"));
    CHECK(device(config, "/dev/nvidia-uvm"));
    CHECK(device(config, "/dev/nvidia-uvm-tools"));
    CHECK(!device(config, "/dev/nvidia-modeset")); /* not on this host */
    CHECK_EQ_INT(count_devices(config), 4);
    CHECK(allowed(config, 1, 3));

    json_t *lib = mount_at(config, test_path("usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    if (CHECK(lib)) {
        json_t *opts = json_object_get(lib, "options");
        CHECK_STR(json_string_value(json_array_get(opts, 0)), "ro");
    }
    CHECK(mount_at(config, test_path("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")));
    CHECK(mount_at(config, test_path("usr/bin/nvidia-smi")));
    CHECK(!json_object_get(config, "hooks"));
    CHECK_STR(env_value(config, "NVIDIA_VISIBLE_DEVICES", &times),
              "GPU-c41f0a7e-5b2d-4e8f-a3c6-0d9b8e7f6a21");
    CHECK_EQ_INT(times, 1);
    CHECK_STR(env_value(config, "CUDA_VISIBLE_DEVICES", &times), "0");

    unlink(test_path("dev/nvidia3"));
    cleanup_json json_t *again = instance_config(gpus, 1);
    CHECK_EQ_INT(apply(again, &inv, gpus, 1, &err), -1);
    CHECK_CONTAINS(err.message, "GPU 2");
}

/* Without a real GPU source (this process opened none), nothing changes:
 * simulated GPUs keep the environment oci.c sets. */
TEST(simulated_gpus_get_env_only)
{
    struct sl_error err = SL_ERROR_INIT;
    const unsigned gpus[] = { 0, 1 };
    int times;

    cleanup_json json_t *config = instance_config(gpus, 2);
    cleanup_free char *before = json_dumps(config, JSON_SORT_KEYS);
    CHECK_EQ_INT(gpu_devices_apply(config, gpus, 2, &err), 0);
    cleanup_free char *after = json_dumps(config, JSON_SORT_KEYS);
    CHECK_STR(after, before);
    CHECK_STR(env_value(config, "NVIDIA_VISIBLE_DEVICES", &times), "0,1");
}
