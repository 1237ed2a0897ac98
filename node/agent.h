/* The node agent: enrolls once, then loops: fetch the desired state of its
 * instances, compare with what the host really has, converge, report. It is
 * level-triggered: any pass can start from any state the host is in, so a
 * restart of the agent (even kill -9) never stops an instance. */
#ifndef SL_NODE_AGENT_H
#define SL_NODE_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "gpu.h"
#include "image-layer.h"
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
    char *lxcfs; /* "auto", "off" or an lxcfs mount (lxcfs.h) */
    int64_t poll_ms;
    int64_t stop_grace_ms;
    int64_t ssh_wait_ms;
    char *proxy_listen; /* the service ports' nginx (nginx.h) */
    char *proxy_nginx;
    int64_t metadata_port;             /* the metadata endpoint (metadata.h); 0: off */
    char *terminal_socket;             /* the browser's terminal (terminal.h); "": the default */
    int64_t terminal_max_per_instance; /* 0: no terminals */
    int64_t transfer_port;             /* disk copies for clones (transfer.h); 0: off */
    int64_t transfer_retry_s;
    int64_t image_max_bytes; /* image imports' limits (images.*, image-layer.h) */
    int64_t image_max_entries;
    int64_t image_max_file_bytes;
    int64_t image_max_path_depth;
    int64_t image_min_free_bytes;
    int64_t metrics_interval_s; /* metrics per instance (metrics.h) */
    char *metrics_listen;
};

extern const struct sl_option agent_options[];
extern const size_t agent_options_count;

/* The limits an image import runs within, from the images.* options. */
void agent_image_limits(const struct agent_config *cfg, struct image_limits *out);

/* Checks the value of --join (option `join`): "-" (read the token from
 * stdin) or a file holding it. A join token itself is SL_E_INVALID with what
 * to do instead: on the command line it shows in the process list. A file
 * that does not exist passes (it is read only to enroll; an enrolled host
 * needs it no more). */
int agent_join_source_check(const char *value, struct sl_error *err);

/* Runs until *stop becomes true (SIGTERM). Returns 0 on a clean stop. */
int agent_run(struct agent_config *cfg, volatile bool *stop, struct sl_error *err);

#endif
