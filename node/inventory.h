/* What a host has to offer: CPU, memory, disk and GPUs, as the enroll and
 * heartbeat routes take it. */
#ifndef SL_NODE_INVENTORY_H
#define SL_NODE_INVENTORY_H

#include <jansson.h>
#include <stddef.h>

#include "gpu.h"

/* A new {cpu_cores, memory_mib, disk_total_gib, disk_free_gib,
 * disk_free_bytes, instance_disks_bytes, driver_version, cuda_version,
 * agent_version, gpus: [...]} object. The disk figures are of data_dir's
 * file system; instance_disks_bytes is what the instance disk files under
 * data_dir/instances take of it (they are sparse). */
json_t *inventory_json(struct gpu_source *gpus, const char *data_dir, const char *agent_version,
                       struct sl_error *err);

/* The first non-loopback IPv4 address of the host, else "127.0.0.1". */
void inventory_default_address(char *buf, size_t len);

#endif
