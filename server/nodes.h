/* GPU hosts: enrollment with a join token, inventory reported by the agent,
 * online/offline from heartbeats, and the mapping of their GPUs to catalog
 * models. */
#ifndef SL_NODES_H
#define SL_NODES_H

#include <jansson.h>

#include "server.h"

/* Creates a join token for region that max_uses hosts may enroll with;
 * secret (SL_TOKEN_MAX) is shown once. */
int nodes_join_token_create(struct server *srv, const char *region, int64_t ttl, int64_t max_uses,
                            const char *by, char *id, char *secret, struct sl_error *err);

/* Enrolls a host with a join token, taking one of its uses (401
 * "join_token_used" when none is left, "invalid_join_token" when it is
 * unknown or expired); fills node_id and its own token. Call it inside a
 * write transaction: the check and the count of a use are one statement. */
int nodes_enroll(struct server *srv, const char *join_token, const char *hostname,
                 const char *address, json_t *inventory, char *node_id, char *node_token,
                 struct sl_error *err);

/* Records a heartbeat: the time and the inventory (GPUs upserted by index;
 * reservations are never touched). */
int nodes_heartbeat(struct server *srv, const char *node_id, json_t *inventory,
                    struct sl_error *err);

/* Records the images a node reports: [{name, state, os, python, cuda,
 * framework, size_bytes, message}] with state "ready", "building" or
 * "failed". Images it no longer reports are forgotten. */
int nodes_apply_images(struct server *srv, const char *node_id, json_t *images,
                       struct sl_error *err);

/* The node as the admin API shows it, with its GPUs and state. */
json_t *nodes_json(struct server *srv, const char *node_id, struct sl_error *err);

/* What a host may promise to instance disks (the free bytes of its data
 * directory plus what its instance disk files take, less
 * nodes.disk_reserve_gib, plus nodes.disk_overcommit_percent of that) less
 * promised_gib (the system and data disks of the host's instances not
 * released): the most a new instance's disks may take. */
int64_t nodes_disk_room_gib(const struct server *srv, int64_t free_bytes, int64_t disks_bytes,
                            int64_t promised_gib);

/* A fleet (docs/operations.md, "A fleet"; server/nodes-fleet.c). */

/* How a host stands, from its heartbeats: online (heard within
 * nodes.offline_after), offline, or lost (silent nodes.lost_after, and never
 * sooner than offline). A host never heard from is offline. */
enum node_condition {
    NODE_ONLINE,
    NODE_OFFLINE,
    NODE_LOST,
};
enum node_condition nodes_condition(const struct server_config *cfg, int64_t last_heartbeat,
                                    int64_t now);
/* "online", "offline", "lost". */
const char *nodes_condition_name(enum node_condition c);

/* What the fleet knows of a host: its condition and the operator's marks. */
struct node_status {
    enum node_condition condition;
    int64_t last_heartbeat; /* 0: never */
    bool cordoned, draining;
    char reason[256]; /* the operator's, "" for none */
};

/* Fills ns for node_id (404 no_such_node when there is none, or it was
 * removed). */
int nodes_status(struct server *srv, const char *node_id, struct node_status *ns,
                 struct sl_error *err);

/* Why an instance may not start on a host that stands as ns: NULL when it
 * may, else the error code ("host_lost", "host_unavailable"). holds_gpus:
 * its GPUs are still its own (a plan keeps them while stopped); nogpu: a
 * start in no-GPU mode. Pure. */
const char *nodes_start_refusal(const struct node_status *ns, bool holds_gpus, bool nogpu);

/* The 409 for a start of instance_id on node_id, or 0 when the host lets
 * it start (nodes_start_refusal). */
int nodes_check_start(struct server *srv, const char *instance_id, const char *node_id,
                      bool holds_gpus, bool nogpu, struct sl_error *err);

/* The 409 host_unavailable for a new instance pinned to a cordoned host,
 * or 0. */
int nodes_check_placement(struct server *srv, const char *node_id, struct sl_error *err);

/* Cordons a host: no new placement, no start that needs its GPUs again.
 * reason (may be NULL) is shown to its renters. Idempotent. */
int nodes_cordon(struct server *srv, const char *node_id, const char *reason, struct sl_error *err);

/* Drains a host: cordons it, and stops its pay-as-you-go instances (reason
 * host_drain, an event with what to do); instances on a plan run to its
 * end. migrate: its stopped instances also move to other hosts
 * (migrations.h), now and as they stop. stopped/kept/moving: new arrays of
 * the instance ids stopped, left running and moving; stuck: [{id, reason}]
 * of those that cannot move now (callers may pass NULL). Call it inside a
 * transaction. */
int nodes_drain(struct server *srv, const char *node_id, const char *reason, bool migrate,
                json_t **stopped, json_t **kept, json_t **moving, json_t **stuck,
                struct sl_error *err);
/* Ends a cordon or a drain: the host takes placements again. */
int nodes_uncordon(struct server *srv, const char *node_id, struct sl_error *err);

/* Removes a host: 409 node_not_empty, naming them, while any instance not
 * released lives there (on a lost host, those already being released are
 * finished with it: nothing of them can be reached). Its token stops
 * working, its GPUs leave the pool; its row stays for the history. Call it
 * inside a transaction. */
int nodes_remove(struct server *srv, const char *node_id, struct sl_error *err);

/* Whether the host of instance_id is being drained (a plan is not renewed
 * there). */
int nodes_instance_host_draining(struct store *st, const char *instance_id, bool *draining,
                                 struct sl_error *err);

/* The instance view (instance-view.c) as its host makes it: on a lost host
 * state becomes "host_lost" with a state_message naming the ways out; on a
 * drained or cordoned one the message says what that means for it. j is
 * the Instance object; 0 or -1. */
int nodes_instance_view(struct server *srv, json_t *j, struct sl_error *err);

/* Notices hosts that became lost: marks each once and tells the renters of
 * its instances (event host_lost); lost: how many. Its own transactions. */
int nodes_watch(struct server *srv, int64_t *lost, struct sl_error *err);

#endif
