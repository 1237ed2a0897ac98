/* The node agent: enrolls once, then loops: fetch the desired state of its
 * instances, compare with what the host really has, converge, report. It is
 * level-triggered: any pass can start from any state the host is in, so a
 * restart of the agent (even kill -9) never stops an instance. */
#ifndef SL_NODE_AGENT_H
#define SL_NODE_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu.h"
#include "instance.h"
#include "../lib/error.h"
#include "../lib/config.h"
#include "../lib/id.h"

struct agent_config {
    char *data_dir;
    char *server;
    char *join;
    char *simulate_gpus;
    char *address;
    char *hostname;
    char *bridge;
    char *subnet;
    char *runtime;
    int64_t poll_ms;
    int64_t stop_grace_ms;
    int64_t ssh_wait_ms;
    char *proxy_listen; /* the service ports' nginx (proxy.h) */
    char *proxy_nginx;
    int64_t metadata_port; /* the metadata endpoint (metadata.h); 0: off */
};

extern const struct sl_option agent_options[];
extern const size_t agent_options_count;

/* Runs until *stop becomes true (SIGTERM). Returns 0 on a clean stop. */
int agent_run(struct agent_config *cfg, volatile bool *stop, struct sl_error *err);

#endif
