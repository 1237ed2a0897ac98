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
#include "net.h"
#include "nginx.h"
#include "runtime.h"
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
    int64_t heartbeat_s;
    int64_t revision;
    json_t *failures; /* {id: {"generation": g, "message": m}} */
    bool first_pass;  /* the first convergence since the agent started */
    pthread_mutex_t lock;
    json_t *builds; /* {name: "building" | "failed: ..."}, guarded by lock */
    struct proxy proxy;
    char *proxy_dir;
    bool proxy_warned;
    bool pin_warned;                  /* net_pin failed; said once until it works again */
    struct metadata_server *metadata; /* http://169.254.169.254/ inside */
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
 * is desired: starts, restarts, stops or releases it. A failed start is
 * kept in a->failures and not tried again until its generation changes.
 * True when it acted (the heartbeat then goes at once). */
bool agent_converge_instance(struct agent *a, json_t *d);

/* What the host has of one desired instance, for the heartbeat: {id, state
 * (running, stopped, absent or failed), generation, and message or
 * oom_kills}. A new reference. */
json_t *agent_instance_report(struct agent *a, json_t *d);

/* image-fetch.c: images the desired state names. */

/* Starts a background thread for each wanted image ([{name, recipe,
 * sha256}]) the host has not and is not already making: it fetches an
 * uploaded archive or builds a recipe. a->builds tracks them. */
void agent_images_converge(struct agent *a, json_t *wanted);

/* The images for the heartbeat: those on the host (ready), and those being
 * made (building) or whose making failed (with its message). A new
 * reference. */
json_t *agent_images_report(struct agent *a);

/* heartbeat.c */

/* Posts the inventory, the report of each desired instance, the images and
 * the instances' activity to suanlid, and takes the heartbeat interval it
 * answers with. */
int agent_heartbeat(struct agent *a, json_t *desired, struct sl_error *err);

#endif
