#include "instance.h"
#include "boot.h"
#include "disk.h"
#include "disk-spares.h"
#include "fsutil.h"
#include "image.h"
#include "oci.h"
#include "rootfs.h"
#include "steps.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *instance_dir(const struct node_host *host, const char *id)
{
    return xasprintf("%s/instances/%s", host->data_dir, id);
}

static char *path_in(const struct node_host *host, const char *id, const char *name)
{
    return xasprintf("%s/instances/%s/%s", host->data_dir, id, name);
}

/* Made under another name and renamed into place: an agent killed during
 * mkfs leaves no half-made disk that the next start would take for a real
 * one (and fail to mount, every time). */
static int create_disk(const char *data_dir, const char *path, unsigned gib, struct sl_error *err)
{
    if (access(path, F_OK) == 0)
        return 0;
    int rc = disk_spares_take(data_dir, gib, path, err);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    cleanup_free char *tmp = xasprintf("%s.new", path);
    if (unlink(tmp) < 0 && errno != ENOENT)
        return sl_fail_errno(err, "unable to remove '%s'", tmp);
    if (disk_create(tmp, gib, err) < 0)
        return -1;
    if (rename(tmp, path) < 0) {
        sl_fail_errno(err, "unable to rename '%s'", tmp);
        unlink(tmp);
        return -1;
    }
    return 0;
}

struct disk_job {
    const char *data_dir;
    const char *path;
    unsigned gib;
    struct sl_error err;
    int rc;
};

static void *disk_thread(void *p)
{
    struct disk_job *job = p;
    job->err = (struct sl_error)SL_ERROR_INIT;
    job->rc = create_disk(job->data_dir, job->path, job->gib, &job->err);
    return NULL;
}

int instance_create_disks(const struct node_host *host, const struct instance_spec *spec,
                          struct sl_error *err)
{
    cleanup_free char *dir = instance_dir(host, spec->id);
    cleanup_free char *system = path_in(host, spec->id, "system.img");
    cleanup_free char *data = path_in(host, spec->id, "data.img");
    unsigned system_gib = spec->system_disk_gib ? spec->system_disk_gib : INSTANCE_SYSTEM_DISK_GIB;
    bool sys_new = access(system, F_OK) != 0;
    bool data_new = spec->data_disk_gib && access(data, F_OK) != 0;
    if (fs_mkdir_p(dir, 0700, err) < 0)
        goto fail;
    /* a spare disk each when one is ready (disk-spares.h), else the two
     * mkfs at once (each mostly waits for its writes) */
    struct disk_job sys = { .data_dir = host->data_dir, .path = system, .gib = system_gib };
    pthread_t t;
    bool beside = spec->data_disk_gib && pthread_create(&t, NULL, disk_thread, &sys) == 0;
    if (!beside)
        disk_thread(&sys);
    int rc = spec->data_disk_gib ? create_disk(host->data_dir, data, spec->data_disk_gib, err) : 0;
    if (beside)
        pthread_join(t, NULL);
    steps_mark("disks (mkfs)");
    if (sys.rc < 0) {
        *err = sys.err; /* the system disk's failure first */
        goto fail;
    }
    if (rc < 0)
        goto fail;
    /* the next first start's disks, made while nothing waits for them */
    if (sys_new)
        disk_spares_refill(host->data_dir, system_gib);
    if (data_new)
        disk_spares_refill(host->data_dir, spec->data_disk_gib);
    return 0;
fail:
    sl_error_prefix(err, "create disks of '%s'", spec->id);
    return -1;
}

int instance_grow_data_disk(const struct node_host *host, const char *id, unsigned gib,
                            struct sl_error *err)
{
    cleanup_free char *data = path_in(host, id, "data.img");
    cleanup_free char *marker = path_in(host, id, "data.gib");
    struct stat st;

    if (gib == 0 || lstat(data, &st) < 0 || !S_ISREG(st.st_mode))
        return 0; /* no data disk (yet): a start makes it at its size */
    cleanup_free char *text = fs_read_file(marker, 32, NULL, NULL);
    uint64_t fs_gib = text ? strtoull(text, NULL, 10) : (uint64_t)st.st_size >> 30;
    if (fs_gib >= gib && (uint64_t)st.st_size >= (uint64_t)gib << 30)
        return 0;
    char line[32];
    int n;
    if (!text) {
        /* what the file system spans before the file grows */
        n = snprintf(line, sizeof(line), "%llu\n", (unsigned long long)fs_gib);
        if (sl_file_write(marker, line, (size_t)n, 0600, 0, err) < 0)
            return -1;
    }
    if (disk_grow(data, gib, err) < 0) {
        sl_error_prefix(err, "grow the data disk of '%s' to %u GiB", id, gib);
        return -1;
    }
    n = snprintf(line, sizeof(line), "%u\n", gib);
    if (sl_file_write(marker, line, (size_t)n, 0600, 0, err) < 0)
        return -1;
    return 1;
}

static int mount_root(const struct node_host *host, const struct instance_spec *spec,
                      struct sl_error *err)
{
    struct image img;
    if (image_load(host->data_dir, spec->image, &img, err) < 0)
        return -1;
    char **lowers = xcalloc(img.n_layers, sizeof(char *));
    int rc = 0;
    for (size_t i = 0; i < img.n_layers; i++) {
        lowers[i] = image_layer_rootfs(host->data_dir, img.layers[i]);
        /* overlayfs would only say ENOENT */
        if (rc == 0 && access(lowers[i], F_OK) != 0)
            rc = sl_fail(err, SL_E_UNAVAILABLE, "image_layer_missing",
                         "image '%s' lacks its layer sha256:%s on this host (%s): the operator "
                         "must import the image again",
                         spec->image, img.layers[i], strerror(errno));
    }
    cleanup_free char *upper = path_in(host, spec->id, "sys/upper");
    cleanup_free char *work = path_in(host, spec->id, "sys/work");
    cleanup_free char *rootfs = path_in(host, spec->id, "rootfs");
    if (rc == 0)
        rc = rootfs_mount((const char *const *)lowers, img.n_layers, upper, work, rootfs, err);
    for (size_t i = 0; i < img.n_layers; i++)
        free(lowers[i]);
    free(lowers);
    image_release(&img);
    return rc;
}

/* Nodes before the files moved to the system disk kept hosts and
 * resolv.conf in the boot directory, on the host, where a renter could grow
 * them without limit: whatever is left of them goes. */
static void drop_old_etc_files(const char *boot)
{
    static const char *const names[] = { "hosts", "resolv.conf" };
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        cleanup_free char *path = xasprintf("%s/%s", boot, names[i]);
        unlink(path);
    }
}

struct keys_job {
    const char *boot;
    bool fresh;
    int rc;
    struct sl_error err;
    struct steps steps;
};

static void *keys_thread(void *p)
{
    struct keys_job *job = p;
    job->err = (struct sl_error)SL_ERROR_INIT;
    steps_begin(&job->steps, 0);
    job->rc = boot_host_keys(job->boot, job->fresh, &job->err);
    steps_mark("host keys");
    steps_end();
    return NULL;
}

/* What start does beside the network: disks, overlay, files, the bundle
 * and the container, created. */
static int start_local(const struct node_host *host, const struct instance_spec *spec,
                       const char *netns, struct sl_error *err)
{
    const char *id = spec->id;
    cleanup_free char *system = path_in(host, id, "system.img");
    cleanup_free char *data = path_in(host, id, "data.img");
    cleanup_free char *sys_mount = path_in(host, id, "sys");
    cleanup_free char *data_mount = path_in(host, id, "data");
    cleanup_free char *rootfs = path_in(host, id, "rootfs");
    cleanup_free char *boot = path_in(host, id, "boot");
    cleanup_free char *etc = path_in(host, id, "sys/etc");
    cleanup_free char *bundle = path_in(host, id, "bundle");
    cleanup_free char *log = path_in(host, id, "console.log");
    cleanup_free char *cgroup = xasprintf("/suanli/%s", id);
    bool has_data = access(data, F_OK) == 0;

    /* a data disk resized while the instance was stopped (or that could
     * not grow online) grows now, before it is mounted (disk_grow): the
     * start has the bigger disk */
    if (has_data) {
        int grown = instance_grow_data_disk(host, id, spec->data_disk_gib, err);
        if (grown < 0)
            return -1;
        if (grown)
            steps_mark("grow data disk");
    }
    if (disk_mount(system, sys_mount, err) < 0)
        return -1;
    if (has_data && disk_mount(data, data_mount, err) < 0)
        return -1;
    steps_mark("mount disks");
    /* a system disk with no overlay upper yet: the instance's first start */
    cleanup_free char *upper = path_in(host, id, "sys/upper");
    bool fresh = access(upper, F_OK) < 0 && errno == ENOENT;
    if (mount_root(host, spec, err) < 0)
        return -1;
    steps_mark("overlay");
    if (rootfs_write_etc(etc, id, err) < 0)
        return -1;
    steps_mark("etc files");
    struct boot_params bp = { .id = id,
                              .root_password_crypt = spec->root_password_crypt,
                              .authorized_keys = spec->authorized_keys,
                              .jupyter_port = spec->jupyter_port,
                              .jupyter_token = spec->jupyter_token,
                              .desktop_port = spec->desktop_port,
                              .desktop_token = spec->desktop_token,
                              .autodl_paths = spec->autodl_paths };
    if (boot_write(boot, &bp, err) < 0)
        return -1;
    drop_old_etc_files(boot);
    steps_mark("boot dir");
    /* the host keys (two ssh-keygen, first start only) are made beside
     * `runc create`: the init reads them only once the container starts */
    struct keys_job keys = { .boot = boot, .fresh = fresh };
    pthread_t t;
    bool beside = pthread_create(&t, NULL, keys_thread, &keys) == 0;
    if (!beside)
        keys_thread(&keys);
    struct oci_params op = { .id = id,
                             .rootfs = rootfs,
                             .netns_path = netns,
                             .boot_dir = boot,
                             .etc_dir = etc,
                             .data_dir = has_data ? data_mount : NULL,
                             .public_dir = host->public_dir,
                             .storage_dir = spec->storage_dir,
                             .cgroup_path = cgroup,
                             .lxcfs_dir = host->lxcfs_dir,
                             .lxcfs_own = host->lxcfs_own,
                             .cpu_millicores = spec->cpu_millicores,
                             .memory_mib = spec->memory_mib,
                             .pids_max = spec->pids_max,
                             .gpus = spec->gpus,
                             .n_gpus = spec->n_gpus };
    int rc = oci_write_config(bundle, &op, err);
    steps_mark("oci config");
    if (rc == 0)
        rc = host->runtime->ops->create(host->runtime, id, bundle, log, err);
    steps_mark("runc create");
    if (beside)
        pthread_join(t, NULL);
    steps_beside(steps_current(), &keys.steps);
    steps_mark("host keys: waited for");
    sl_error_warn(keys.rc, &keys.err, "the instance makes its own host keys");
    return rc;
}

struct attach_job {
    const struct node_host *host;
    const struct instance_spec *spec;
    struct net_attachment na;
    struct sl_error err;
    int rc;
    struct steps steps;
};

static void *attach_thread(void *p)
{
    struct attach_job *job = p;
    job->err = (struct sl_error)SL_ERROR_INIT;
    steps_begin(&job->steps, 0);
    job->rc = net_attach(job->host->net, job->spec->id, job->spec->host_port, &job->na, &job->err);
    steps_end();
    return NULL;
}

static int start_steps(const struct node_host *host, const struct instance_spec *spec, char *ip,
                       struct sl_error *err)
{
    const char *id = spec->id;
    struct runtime_state st;
    if (host->runtime->ops->state(host->runtime, id, &st, err) < 0)
        return -1;
    if (st.status == RUNTIME_RUNNING)
        return 0;
    if (st.status != RUNTIME_ABSENT && host->runtime->ops->delete (host->runtime, id, err) < 0)
        return -1;
    steps_mark("runc state");

    /* a container that died without a stop (a crash, a reboot) left its
     * address lease and rules behind: free them before asking again */
    if (net_attached(host->net, id) && net_detach(host->net, id, spec->host_port, err) < 0)
        return -1;
    steps_mark("network: detach leftovers");
    cleanup_free char *netns = net_netns_path(id);
    if (net_prepare(host->net, id, err) < 0)
        return -1;
    steps_mark("network: netns");

    /* The network (the CNI plugins: most of a start) is attached in a
     * thread of its own while this one mounts the disks and the overlay,
     * writes the files and creates the container; the container starts,
     * running the image's first program, only once its port is isolated
     * and pinned. */
    struct attach_job job = { .host = host, .spec = spec };
    pthread_t t;
    bool beside = pthread_create(&t, NULL, attach_thread, &job) == 0;
    if (!beside)
        attach_thread(&job);
    int rc = start_local(host, spec, netns, err);
    if (beside)
        pthread_join(t, NULL);
    steps_beside(steps_current(), &job.steps);
    steps_mark("network: waited for");
    if (rc == 0 && job.rc < 0) {
        *err = job.err;
        rc = -1;
    }
    if (rc < 0)
        return -1;
    if (ip)
        snprintf(ip, 64, "%s", job.na.ip);
    if (host->runtime->ops->start(host->runtime, id, err) < 0)
        return -1;
    steps_mark("runc start");
    return 0;
}

int instance_start(const struct node_host *host, const struct instance_spec *spec, char *ip,
                   struct sl_error *err)
{
    int rc = start_steps(host, spec, ip, err);
    if (rc == 0)
        return 0;
    struct sl_error e = SL_ERROR_INIT;
    sl_error_gather(err, &rc, instance_stop(host, spec->id, spec->host_port, 0, &e), &e);
    sl_error_prefix(err, "start instance '%s'", spec->id);
    return -1;
}

int instance_stop(const struct node_host *host, const char *id, unsigned host_port, int grace_ms,
                  struct sl_error *err)
{
    cleanup_free char *sys_mount = path_in(host, id, "sys");
    cleanup_free char *data_mount = path_in(host, id, "data");
    cleanup_free char *rootfs = path_in(host, id, "rootfs");
    int rc = 0;
    struct sl_error e = SL_ERROR_INIT;
    struct runtime_state st;

    /* while its process lives: a pin that another tool's mount hid is made
     * again from it, so DEL can enter the namespace and remove the veth */
    if (host->runtime->ops->state(host->runtime, id, &st, NULL) == 0 && st.pid > 0 &&
        st.status != RUNTIME_STOPPED)
        sl_error_warn(net_adopt(host->net, id, st.pid, &e) < 0 ? -1 : 0, &e,
                      "pin the network namespace of a stopping instance");
    steps_mark("stop: adopt netns");
    sl_error_gather(err, &rc, runtime_stop(host->runtime, id, grace_ms, &e), &e);
    steps_mark("stop: runc stop");
    sl_error_gather(err, &rc, net_detach(host->net, id, host_port, &e), &e);
    steps_mark("stop: network");
    sl_error_gather(err, &rc, rootfs_unmount(rootfs, &e), &e);
    sl_error_gather(err, &rc, disk_unmount(data_mount, &e), &e);
    sl_error_gather(err, &rc, disk_unmount(sys_mount, &e), &e);
    steps_mark("stop: unmount");
    if (rc < 0) {
        sl_error_prefix(err, "stop instance '%s'", id);
        return -1;
    }
    return 0;
}

bool instance_has_leftovers(const struct node_host *host, const char *id)
{
    static const char *const mounts[] = { "rootfs", "data", "sys" };
    if (net_attached(host->net, id))
        return true;
    for (size_t i = 0; i < ARRAY_SIZE(mounts); i++) {
        cleanup_free char *path = path_in(host, id, mounts[i]);
        if (disk_mounted(path, NULL, 0, NULL, 0, NULL) != 0)
            return true; /* mounted, or unknown: instance_stop finds out */
    }
    return false;
}

int instance_release(const struct node_host *host, const char *id, unsigned host_port,
                     struct sl_error *err)
{
    if (instance_stop(host, id, host_port, 10000, err) < 0)
        return -1;
    cleanup_free char *system = path_in(host, id, "system.img");
    cleanup_free char *data = path_in(host, id, "data.img");
    cleanup_free char *dir = instance_dir(host, id);
    if (disk_remove(system, err) < 0 || disk_remove(data, err) < 0 ||
        fs_remove_tree(dir, err) < 0) {
        sl_error_prefix(err, "release instance '%s'", id);
        return -1;
    }
    steps_mark("release: remove files");
    return 0;
}
