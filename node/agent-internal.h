/* What the parts of the agent share: the running agent's state and each
 * part's entry points. agent.c sets up and runs the loop; enroll.c makes
 * the host known to suanlid; converge.c brings each instance to its desired
 * state; image-fetch.c fetches and builds images in the background;
 * heartbeat.c reports to suanlid. Only these files include it: agent.h is
 * the agent's interface. */
#ifndef SL_NODE_AGENT_INTERNAL_H
#define SL_NODE_AGENT_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent.h"
#include "gpu.h"
#include "instance.h"
#include "metadata.h"
#include "metrics.h"
#include "net.h"
#include "nginx.h"
#include "runtime.h"
#include "terminal.h"
#include "../lib/client.h"
#include "../lib/crypto.h"
#include "../lib/error.h"
#include "../lib/id.h"

/* the version the agent reports in its inventory */
#define AGENT_VERSION "0.1.0"

struct agent {
    struct agent_config *cfg;
    char node_id[SL_ID_MAX];
    char token[SL_TOKEN_MAX];
    struct sl_client client;
    struct gpu_source gpus;
    struct runtime rt;
    struct net_config net;
    struct node_host host;
    char *runc_root, *net_state;
    char *lxcfs_dir;  /* lxcfs.h; NULL: none */
    char *public_dir; /* DATA/public: /root/public inside (public-data.h) */
    int64_t heartbeat_s;
    volatile bool *stop; /* set by a signal: the agent is stopping */
    bool first_pass;     /* the first convergence since the agent started */
    /* Guarded by lock: what the poller, the instance workers (converge.c),
     * the image threads and the loop share. */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* the loop waits on it: a new desired state, a worker done */
    bool kicked;         /* something the loop should look at at once */
    bool acted;          /* a worker acted: the heartbeat goes at once */
    json_t *desired;     /* the newest desired state; the poller replaces it */
    int64_t revision;    /* its revision */
    int64_t desired_us;  /* when it came, wall-clock µs (steps.h: a start's trace) */
    json_t *failures;    /* {id: {"generation": g, "message": m}} */
    json_t *retries;     /* {id: {"message": m, "delay_ms": d, "next_ms": t}}: a step backing off */
    json_t *inflight;    /* {id: true}: a worker is converging it */
    json_t *builds;      /* {name: {state: building|failed, message, source}}: image-fetch.c */
    json_t *datasets;    /* {name: {source, state, message}}: public-data.c */
    struct proxy proxy;
    char *proxy_dir;
    bool proxy_warned;
    bool pin_warned;                  /* net_pin failed; said once until it works again */
    struct metadata_server *metadata; /* http://169.254.169.254/ inside */
    struct terminal_server *terminal; /* the browser's terminal; NULL: none */
    char *terminal_socket;
    struct metrics_collector *metrics; /* metrics per instance (metrics.h) */
};

/* enroll.c: who this host is to suanlid (DATA/node.json). */

/* Reads DATA/node.json into a->node_id and a->token: 1 when it did, 0 when
 * there is none (the host is not enrolled yet), -1 when it is damaged. */
int agent_identity_load(struct agent *a, struct sl_error *err);

/* Enrolls the host with the join token that --join names (a->cfg->join),
 * fills a->node_id and a->token and writes them to DATA/node.json (0600). */
int agent_enroll(struct agent *a, struct sl_error *err);

/* converge.c: each instance of the desired state. */

/* Brings one desired instance (d: {id, desired, generation, ...}) to what
 * is desired: starts, restarts, stops or releases it, or brings a running
 * one's SSH keys up to date. A failed start is kept in a->failures and not
 * tried again until its generation changes; a stop or release that fails
 * is tried again after a delay that doubles up to a minute (a->retries),
 * its message logged once and reported to suanlid. Runs in a worker of its
 * own (agent_converge_start); first_pass: the agent's first pass. True
 * when it acted (the heartbeat then goes at once). */
bool agent_converge_instance(struct agent *a, json_t *d, bool first_pass);

/* Hands each desired instance that no worker holds and that is not backing
 * off to a worker thread of its own, so a slow start (an image, a large
 * disk) never holds up another's. revision: the desired state's; a worker
 * that ends after a newer one came wakes the loop for it. */
void agent_converge_start(struct agent *a, json_t *instances, int64_t revision);

/* Waits until no worker runs (the agent is stopping). */
void agent_converge_drain(struct agent *a);

/* What the host has of one desired instance, for the heartbeat: {id, state
 * (running, stopped, absent or failed), generation, and message or
 * oom_kills}; NULL while a worker converges it (its state is moving). A
 * new reference. */
json_t *agent_instance_report(struct agent *a, json_t *d);

/* image-fetch.c: images the desired state names. */

/* Starts a background thread for each wanted image ([{name, recipe,
 * sha256}]) the host has not and is not already making: it fetches an
 * uploaded archive or builds a recipe. a->builds tracks them. */
void agent_images_converge(struct agent *a, json_t *wanted);

/* Starts a thread for each save the desired state asks of this host
 * ([{image, instance, parent}]) that none is doing: the instance's system
 * disk's changes captured as a layer, uploaded to suanlid and stacked on
 * the parent image here (image-save.h). */
void agent_saves_converge(struct agent *a, json_t *saves);

/* The images for the heartbeat: those on the host (ready), and those being
 * made (building) or whose making failed (with its message). A new
 * reference. */
json_t *agent_images_report(struct agent *a);

/* public-data.c: the public datasets the desired state names. */

/* Starts a background thread for each wanted dataset ([{name, sha256} or
 * {name, path}]) the host has not from that source: it fetches and unpacks
 * an uploaded tar or binds a host directory; removes datasets no longer
 * wanted. wanted NULL (not said): nothing is removed. */
void agent_public_converge(struct agent *a, json_t *wanted);

/* The datasets for the heartbeat: [{name, state (ready, building, failed),
 * message, size_bytes}]. A new reference. */
json_t *agent_public_report(struct agent *a);

/* heartbeat.c */

/* Posts the inventory, the report of each desired instance, the images and
 * the instances' activity to suanlid, and takes the heartbeat interval it
 * answers with. */
int agent_heartbeat(struct agent *a, json_t *desired, struct sl_error *err);

#endif
