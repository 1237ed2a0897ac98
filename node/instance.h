/* An instance on this host, put together from the building blocks: disks,
 * overlay root, boot directory, network, OCI bundle and runtime. Every call
 * is idempotent and converges: start on a running instance does nothing,
 * stop on a stopped one does nothing, and a failed start undoes itself.
 *
 *   DATA/instances/<id>/system.img, data.img   the two disks (sparse ext4)
 *   DATA/instances/<id>/sys                    system disk: upper/, work/, etc/
 *                                              (etc/: hosts, hostname, resolv.conf,
 *                                              bound over /etc's; rootfs.h)
 *   DATA/instances/<id>/data                   data disk (/root/data inside)
 *   DATA/instances/<id>/rootfs                 the overlay root
 *   DATA/instances/<id>/boot                   /.suanli inside (boot.h)
 *   DATA/instances/<id>/bundle/config.json     the OCI bundle
 *   DATA/instances/<id>/console.log            sshd's log */
#ifndef SL_NODE_INSTANCE_H
#define SL_NODE_INSTANCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net.h"
#include "runtime.h"
#include "../lib/error.h"

#define INSTANCE_SYSTEM_DISK_GIB 30

/* What the node has to work with; owned by the caller. */
struct node_host {
    const char *data_dir;
    const struct runtime *runtime;
    const struct net_config *net;
    const char *lxcfs_dir;  /* lxcfs.h: bound over the instances' /proc files; NULL: none */
    bool lxcfs_own;         /* the agent's own: started when an instance starts */
    const char *public_dir; /* DATA/public, bound read-only at /root/public; NULL: none */
};

struct instance_spec {
    const char *id;
    const char *image;               /* a name in DATA/images */
    unsigned system_disk_gib;        /* 0: INSTANCE_SYSTEM_DISK_GIB */
    unsigned data_disk_gib;          /* 0: no data disk */
    unsigned host_port;              /* mapped to port 22 inside */
    const char *root_password_crypt; /* see boot.h */
    const char *authorized_keys;     /* see boot.h */
    unsigned cpu_millicores;         /* 0: no limit */
    uint64_t memory_mib;             /* 0: no limit */
    int64_t pids_max;                /* 0: no limit */
    const unsigned *gpus;
    size_t n_gpus;
    unsigned jupyter_port; /* 0: none; see boot.h */
    const char *jupyter_token;
    unsigned desktop_port; /* 0: none; see boot.h */
    const char *desktop_token;
    bool autodl_paths;       /* links /root/autodl-tmp etc. (boot.h) */
    const char *storage_dir; /* host path bound at /root/storage (storage.h); NULL: none */
};

/* DATA/instances/<id>; the caller frees it. */
char *instance_dir(const struct node_host *host, const char *id);

/* Makes the disks that do not exist yet (never touching existing ones). */
int instance_create_disks(const struct node_host *host, const struct instance_spec *spec,
                          struct sl_error *err);

/* Mounts the disks and the overlay, writes the boot directory and the bundle,
 * attaches the network and runs the container. ip (may be NULL, 64 bytes)
 * receives the instance's address. On failure what it did is undone and the
 * disks stay. */
int instance_start(const struct node_host *host, const struct instance_spec *spec, char *ip,
                   struct sl_error *err);

/* SIGTERM, SIGKILL after grace_ms, delete the container, detach the network,
 * unmount overlay and disks (which detaches their loop devices). Goes on past
 * a failed step and reports the first. */
int instance_stop(const struct node_host *host, const char *id, unsigned host_port, int grace_ms,
                  struct sl_error *err);

/* Grows the instance's data disk to gib GiB (disk_grow: online when it is
 * mounted, the instance sees it at once) when its file system is smaller.
 * DATA/instances/<id>/data.gib holds the size the file system was last
 * grown to (absent: the file's size, as disk_create made it), so a pass
 * that finds it that size already costs a stat and a read. Returns 1 when
 * it grew, 0 when there was nothing to do (no data disk, or it is that
 * size or bigger: a disk never shrinks), -1 on error. */
int instance_grow_data_disk(const struct node_host *host, const char *id, unsigned gib,
                            struct sl_error *err);

/* Whether a stopped instance still holds anything on the host besides its
 * files: a network attachment (net_attached) or a mount. After a crash of
 * the agent or a reboot, instance_stop clears them. Looks at files and
 * mounts only; the container's own state is the runtime's to tell. */
bool instance_has_leftovers(const struct node_host *host, const char *id);

/* Stops the instance and deletes both disks and its directory. */
int instance_release(const struct node_host *host, const char *id, unsigned host_port,
                     struct sl_error *err);

#endif
