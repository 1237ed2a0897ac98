/* What each running instance is doing, for the idle stop (server/stops.h):
 * its SSH sessions (established connections to port 22 in its network
 * namespace, read from /proc/<init pid>/net/tcp and tcp6; the desktop's
 * noVNC connections count as sessions too) and, where the
 * GPUs are real, the busiest of its GPUs (NVML utilisation). Reported with
 * every heartbeat as [{id, ssh_sessions, gpu_percent}]; gpu_percent is
 * absent for simulated GPUs and no-GPU mode. */
#ifndef SL_NODE_ACTIVITY_H
#define SL_NODE_ACTIVITY_H

#include <jansson.h>

#include "gpu.h"
#include "runtime.h"

/* Established connections whose local port is port, in the text of a
 * /proc/net/tcp or tcp6 file. */
unsigned activity_count_established(const char *text, unsigned port);

/* A renter's sessions in that text: SSH (port 22) and, when the instance
 * serves the desktop (desktop_port not 0), its noVNC connections, one long
 * websocket each that the proxy sees only when it opens. */
unsigned activity_count_sessions(const char *text, unsigned desktop_port);

/* The report for the instances of a desired state that run here. */
json_t *activity_report(const struct runtime *rt, struct gpu_source *gpus, json_t *instances);

#endif
