#include "oci.h"
#include "boot.h"
#include "fsutil.h"
#include "gpu-devices.h"
#include "lxcfs.h"
#include "public-data.h"
#include "rootfs.h"
#include "seccomp.h"
#include "storage.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <sys/resource.h>
#include <string.h>
#include <unistd.h>

/* What Docker and runc's spec template grant: enough for apt (chown, setuid
 * to _apt), pip, and sshd's privilege separation; no SYS_ADMIN, SYS_PTRACE,
 * NET_ADMIN or SYS_MODULE. */
static const char *const capabilities[] = {
    "CAP_CHOWN",      "CAP_DAC_OVERRIDE", "CAP_FOWNER",      "CAP_FSETID",           "CAP_KILL",
    "CAP_SETGID",     "CAP_SETUID",       "CAP_SETPCAP",     "CAP_NET_BIND_SERVICE", "CAP_NET_RAW",
    "CAP_SYS_CHROOT", "CAP_MKNOD",        "CAP_AUDIT_WRITE", "CAP_SETFCAP",
};

/* Docker's lists. */
static const char *const masked_paths[] = {
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
};
static const char *const readonly_paths[] = {
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
};

static json_t *string_array(const char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *mount_entry(const char *dest, const char *type, const char *source,
                           const char *options)
{
    json_t *opts = json_array();
    cleanup_free char *copy = xstrdup(options);
    char *save = NULL;
    for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save))
        json_array_append_new(opts, json_string(o));
    return json_pack("{s:s, s:s, s:s, s:o}", "destination", dest, "type", type, "source", source,
                     "options", opts);
}

static json_t *mounts(const struct oci_params *p)
{
    json_t *m = json_array();
    uint64_t shm_mib = p->memory_mib ? p->memory_mib / 2 : 64;
    if (shm_mib < 64)
        shm_mib = 64;
    cleanup_free char *shm_opts =
        xasprintf("nosuid,noexec,nodev,mode=1777,size=%llum", (unsigned long long)shm_mib);
    json_array_append_new(m, mount_entry("/proc", "proc", "proc", "nosuid,noexec,nodev"));
    json_array_append_new(
        m, mount_entry("/dev", "tmpfs", "tmpfs", "nosuid,strictatime,mode=755,size=65536k"));
    json_array_append_new(m,
                          mount_entry("/dev/pts", "devpts", "devpts",
                                      "nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5"));
    json_array_append_new(m, mount_entry("/dev/shm", "tmpfs", "shm", shm_opts));
    json_array_append_new(m, mount_entry("/dev/mqueue", "mqueue", "mqueue", "nosuid,noexec,nodev"));
    json_array_append_new(m, mount_entry("/sys", "sysfs", "sysfs", "nosuid,noexec,nodev,ro"));
    json_array_append_new(
        m, mount_entry("/sys/fs/cgroup", "cgroup", "cgroup", "nosuid,noexec,nodev,relatime,ro"));
    json_array_append_new(
        m, mount_entry("/run", "tmpfs", "tmpfs", "nosuid,nodev,mode=755,size=65536k"));

    json_array_append_new(
        m, mount_entry(OCI_BOOT_MOUNT, "bind", p->boot_dir, "rbind,ro,nosuid,nodev"));
    /* Writable, and files of the system disk: what the renter writes into
     * them lands on a disk the renter pays for, never on the host's. */
    for (size_t i = 0; p->etc_dir && i < ARRAY_SIZE(rootfs_etc_files); i++) {
        cleanup_free char *source = xasprintf("%s/%s", p->etc_dir, rootfs_etc_files[i]);
        cleanup_free char *dest = xasprintf("/etc/%s", rootfs_etc_files[i]);
        json_array_append_new(m, mount_entry(dest, "bind", source, "rbind,nosuid,nodev"));
    }
    /* `shutdown` stops the instance from inside (boot.h, node/metadata.h) */
    cleanup_free char *shutdown = xasprintf("%s/shutdown", p->boot_dir);
    json_array_append_new(
        m, mount_entry(BOOT_SHUTDOWN_MOUNT, "bind", shutdown, "rbind,ro,nosuid,nodev"));
    if (p->data_dir)
        json_array_append_new(
            m, mount_entry(OCI_DATA_MOUNT, "bind", p->data_dir, "rbind,nosuid,nodev"));
    /* public datasets: read-only for root inside (no CAP_SYS_ADMIN to
     * remount it); rbind takes the host directories bound into it along,
     * themselves read-only on the host (public-data.h) */
    if (p->public_dir)
        json_array_append_new(m, mount_entry(PUBLIC_DATA_MOUNT, "bind", p->public_dir,
                                             "rbind,ro,nosuid,nodev,noexec"));
    /* the renter's file storage: their directory only (storage.h); a plain
     * bind, so nothing mounted below it on the host comes along */
    if (p->storage_dir)
        json_array_append_new(
            m, mount_entry(STORAGE_MOUNT, "bind", p->storage_dir, "bind,nosuid,nodev"));
    /* free, top and /proc/meminfo show the instance's own limits (lxcfs.h);
     * read-only: a write to them reaches lxcfs, never the kernel */
    for (size_t i = 0; p->lxcfs_dir && i < lxcfs_files_count; i++) {
        cleanup_free char *source = xasprintf("%s/%s", p->lxcfs_dir, lxcfs_files[i]);
        cleanup_free char *dest = xasprintf("/%s", lxcfs_files[i]);
        json_array_append_new(m, mount_entry(dest, "bind", source, "bind,ro,nosuid,nodev,noexec"));
    }
    return m;
}

static json_t *resources(const struct oci_params *p)
{
    json_t *r = json_object();
    /* Deny every device but the defaults runc always allows (null, zero,
     * full, tty, random, urandom, ptmx, pts); GPUs are added here later. */
    json_object_set_new(r, "devices", json_pack("[{s:b, s:s}]", "allow", 0, "access", "rwm"));
    if (p->memory_mib) {
        json_int_t bytes = (json_int_t)(p->memory_mib << 20);
        /* swap == limit: no swap on top of memory. */
        json_object_set_new(r, "memory", json_pack("{s:I, s:I}", "limit", bytes, "swap", bytes));
    }
    if (p->cpu_millicores) {
        const json_int_t period = 100000;
        json_object_set_new(r, "cpu",
                            json_pack("{s:I, s:I}", "period", period, "quota",
                                      (json_int_t)p->cpu_millicores * period / 1000));
    }
    if (p->pids_max > 0)
        json_object_set_new(r, "pids", json_pack("{s:I}", "limit", (json_int_t)p->pids_max));
    return r;
}

/* cgroup: /proc/self/cgroup reads "/" and /sys/fs/cgroup is the
 * instance's own subtree, not the host's layout (/suanli/<id>). */
static json_t *namespaces(const struct oci_params *p)
{
    json_t *ns = json_pack("[{s:s}, {s:s}, {s:s}, {s:s}, {s:s}]", "type", "pid", "type", "ipc",
                           "type", "uts", "type", "mount", "type", "cgroup");
    if (p->netns_path)
        json_array_append_new(ns,
                              json_pack("{s:s, s:s}", "type", "network", "path", p->netns_path));
    else
        json_array_append_new(ns, json_pack("{s:s}", "type", "network"));
    return ns;
}

static json_t *process(const struct oci_params *p)
{
    cleanup_buf struct sl_buf gpus = SL_BUF_INIT;
    for (size_t i = 0; i < p->n_gpus; i++)
        sl_buf_addf(&gpus, "%s%u", i ? "," : "", p->gpus[i]);
    cleanup_free char *nvidia =
        xasprintf("NVIDIA_VISIBLE_DEVICES=%s", p->n_gpus ? gpus.data : "void");
    cleanup_free char *cuda = xasprintf("CUDA_VISIBLE_DEVICES=%s", gpus.data);
    cleanup_free char *instance = xasprintf("SUANLI_INSTANCE_ID=%s", p->id);

    /* Without CAP_SYS_RESOURCE the container cannot go past the hard limit
     * the node itself runs with, so that is what it gets (at most 2^20). */
    struct rlimit nofile = { .rlim_max = 1048576 };
    getrlimit(RLIMIT_NOFILE, &nofile);
    json_int_t max_files = nofile.rlim_max > 1048576 ? 1048576 : (json_int_t)nofile.rlim_max;

    json_t *caps = string_array(capabilities, ARRAY_SIZE(capabilities));
    json_t *env = json_pack("[s, s, s, s, s, s, s]",
                            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            "HOME=/root", "LANG=C.UTF-8", "TERM=xterm", nvidia, cuda, instance);
    /* The CPUs the quota gives, rounded up: what nproc says (it counts the
     * CPUs a process may run on, all of the host's, unless this is set),
     * and the threads OpenMP, PyTorch and NumPy start. */
    if (p->cpu_millicores)
        json_array_append_new(env,
                              json_sprintf("OMP_NUM_THREADS=%u", (p->cpu_millicores + 999) / 1000));
    json_t *proc =
        json_pack("{s:b, s:{s:i, s:i}, s:[s, s], s:o, s:s, s:{s:O, s:O, s:O}, s:[{s:s, s:I, s:I}],"
                  " s:b, s:i}",
                  "terminal", 0, "user", "uid", 0, "gid", 0, "args", "/bin/sh",
                  OCI_BOOT_MOUNT "/init", "env", env, "cwd", "/", "capabilities", "bounding", caps,
                  "effective", caps, "permitted", caps, "rlimits", "type", "RLIMIT_NOFILE", "hard",
                  max_files, "soft", max_files, "noNewPrivileges", 1, "oomScoreAdj", 0);
    json_decref(caps); /* the three "O" above took their own references */
    return proc;
}

json_t *oci_config(const struct oci_params *p)
{
    json_t *proc = process(p);
    json_t *linux_section = json_object();
    json_object_set_new(linux_section, "namespaces", namespaces(p));
    json_object_set_new(linux_section, "cgroupsPath", json_string(p->cgroup_path));
    json_object_set_new(linux_section, "resources", resources(p));
    json_object_set_new(linux_section, "maskedPaths",
                        string_array(masked_paths, ARRAY_SIZE(masked_paths)));
    json_object_set_new(linux_section, "readonlyPaths",
                        string_array(readonly_paths, ARRAY_SIZE(readonly_paths)));
    json_object_set_new(linux_section, "seccomp",
                        seccomp_profile(capabilities, ARRAY_SIZE(capabilities)));
    json_object_set_new(linux_section, "rootfsPropagation", json_string("rprivate"));
    /* No IPv6 inside: the bridge drops it anyway (firewall.h); with it off
     * the instance sends none and no program waits on it. /proc/sys is
     * read-only inside, so it stays off. A host without IPv6 has no such
     * sysctl, and runc would fail to set it. */
    if (access("/proc/sys/net/ipv6/conf/all/disable_ipv6", F_OK) == 0)
        json_object_set_new(linux_section, "sysctl",
                            json_pack("{s:s, s:s}", "net.ipv6.conf.all.disable_ipv6", "1",
                                      "net.ipv6.conf.default.disable_ipv6", "1"));

    return json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:o, s:o}", "ociVersion", "1.0.2",
                     "process", proc, "root", "path", p->rootfs, "readonly", 0, "hostname", p->id,
                     "mounts", mounts(p), "linux", linux_section, "annotations",
                     json_pack("{s:s}", "io.suanli.instance", p->id));
}

int oci_write_config(const char *bundle_dir, const struct oci_params *given, struct sl_error *err)
{
    struct oci_params params = *given;
    const struct oci_params *p = &params;
    struct sl_error down = SL_ERROR_INIT;

    if (fs_mkdir_p(bundle_dir, 0700, err) < 0)
        return -1;
    /* a dead lxcfs would fail the start (its files answer ENOTCONN): the
     * instance starts with the kernel's figures rather than not at all */
    if (params.lxcfs_dir && lxcfs_revive(params.lxcfs_dir, params.lxcfs_own, &down) < 0) {
        log_warn("instance %s: %s; it shows the host's memory and CPUs in /proc", p->id,
                 down.message);
        params.lxcfs_dir = NULL;
    }
    cleanup_json json_t *config = oci_config(p);
    /* GPUs: the host's CDI spec or device nodes for exactly the assigned GPUs
     * (gpu-devices.h); a no-op when the host's GPUs are simulated. */
    if (p->n_gpus && gpu_devices_apply(config, p->gpus, p->n_gpus, err) < 0)
        return -1;
    cleanup_free char *text = json_dumps(config, JSON_INDENT(2));
    if (!text)
        return sl_fail(err, SL_E_INTERNAL, "internal", "BUG: unable to encode config.json");
    cleanup_free char *path = xasprintf("%s/config.json", bundle_dir);
    return sl_file_write(path, text, strlen(text), 0600, 0, err);
}
