/* The OCI runtime configuration (config.json) of an instance's bundle, as runc
 * and crun read it: what the instance may see and use. */
#ifndef SL_NODE_OCI_H
#define SL_NODE_OCI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/error.h"

/* Where the node's boot directory (see boot.h) appears inside. */
#define OCI_BOOT_MOUNT "/.suanli"
#define OCI_DATA_MOUNT "/root/data"

struct oci_params {
    const char *id;          /* instance id; also the hostname */
    const char *rootfs;      /* host path of the mounted overlay root */
    const char *netns_path;  /* e.g. /run/netns/suanli-<id>; NULL: a new empty netns */
    const char *boot_dir;    /* host dir mounted read-only at OCI_BOOT_MOUNT */
    const char *etc_dir;     /* hosts, hostname, resolv.conf on the system disk
                                (rootfs_write_etc), bound over /etc's; NULL: none */
    const char *data_dir;    /* host path of the mounted data disk; NULL: none */
    const char *public_dir;  /* DATA/public (public-data.h), bound read-only, nosuid,
                                nodev, noexec at /root/public; NULL: none */
    const char *storage_dir; /* the renter's file storage (storage.h), bound read-write,
                                nosuid, nodev at /root/storage; NULL: none */
    const char *cgroup_path; /* e.g. "/suanli/<id>" */
    const char *lxcfs_dir;   /* an lxcfs mount (lxcfs.h) whose files are bound over
                                /proc's inside; NULL: the kernel's, the host's figures */
    bool lxcfs_own;          /* the agent's own lxcfs: started here when it is not live */
    unsigned cpu_millicores; /* 1000 = one core; 0: no limit */
    uint64_t memory_mib;     /* 0: no limit */
    int64_t pids_max;        /* 0: no limit */
    const unsigned *gpus;    /* host GPU indices assigned */
    size_t n_gpus;
};

/* The config as a new JSON reference (never NULL). */
json_t *oci_config(const struct oci_params *p);

/* Writes BUNDLE/config.json (created 0600) atomically. */
int oci_write_config(const char *bundle_dir, const struct oci_params *p, struct sl_error *err);

#endif
