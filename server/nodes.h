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

#endif
