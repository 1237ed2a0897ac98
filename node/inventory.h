/* What a host has to offer: CPU, memory, disk and GPUs, as the enroll and
 * heartbeat routes take it. */
#ifndef SL_NODE_INVENTORY_H
#define SL_NODE_INVENTORY_H

#include <jansson.h>
#include <stddef.h>

#include "gpu.h"

/* A new {cpu_cores, memory_mib, disk_total_gib, disk_free_gib,
 * driver_version, cuda_version, agent_version, gpus: [...]} object. */
json_t *inventory_json(struct gpu_source *gpus, const char *data_dir, const char *agent_version,
                       struct sl_error *err);

/* The first non-loopback IPv4 address of the host, else "127.0.0.1". */
void inventory_default_address(char *buf, size_t len);

#endif
