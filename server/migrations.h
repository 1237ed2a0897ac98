/* Migrate (docs/design/instances.md, "Migrate"): a stopped instance moves
 * to another host under its own id, name and (when free there) SSH port.
 * Its disks are copied agent to agent as a clone's are (node/transfer.h);
 * the row moves to the target host when the copy starts, and the source's
 * host drops its copy only once the target reports the copy whole and
 * verified. A copy that fails moves the row back: the source's disks were
 * never touched. An instance is "on two hosts" only in the `migrations`
 * table: the target holds it (node_id), the source's host is told to
 * export its disks (copying) and then to release them (releasing). */
#ifndef SL_MIGRATIONS_H
#define SL_MIGRATIONS_H

#include <jansson.h>
#include <stdbool.h>

#include "../lib/error.h"
#include "instance-states.h"
#include "server.h"

/* Starts moving stopped instance id to host (a node id or host name; NULL:
 * the online host of its region with the most free GPUs of its model, its
 * image and room for its disks). reason: user or host_drain. Fills target
 * (SL_ID_MAX) when not NULL. Inside the caller's transaction. 409
 * instance_not_stopped, being_cloned, being_migrated, plan_holds_gpus,
 * host_unavailable, no_host; 400 invalid_field for its own host. */
int migrations_create(struct server *srv, const char *id, const char *host, const char *reason,
                      char *target, struct sl_error *err);

/* A drain's moves (nodes_drain with migrate): starts moving every stopped
 * instance of node_id that can move (not on a plan, not moving or copied
 * now) to a host chosen as for a renter's move. Appends the ids moving to
 * moving, and {id, reason} of those that cannot move now to stuck (each
 * also gets an event saying why). */
int migrations_drain(struct server *srv, const char *node_id, json_t *moving, json_t *stuck,
                     struct sl_error *err);

/* An instance of node_id just reported stopped: when the host is being
 * drained with its instances moved away, it moves too. */
int migrations_after_stop(struct server *srv, const char *node_id, const char *id,
                          struct sl_error *err);

/* What a move in progress forbids: starting the instance (409
 * being_migrated). A release while the copy runs ends it: both hosts drop
 * their copies. Inside the verb's transaction. */
int migrations_verb_check(struct server *srv, const char *id, enum instance_verb verb,
                          struct sl_error *err);

/* 409 being_migrated when id is moving now (a clone of it must wait). */
int migrations_check_idle(struct store *st, const char *id, struct sl_error *err);

/* The desired state of node_id: adds copy_from to its instances moving
 * here, appends to exports the disks others copy from here, and appends to
 * items the moved instances whose copy here is to go (desired released). */
int migrations_desired(struct server *srv, const char *node_id, json_t *items, json_t *exports,
                       struct sl_error *err);

/* A report of instance id (held by node_id) with state reported and copy
 * (may be NULL): records progress, ends the copy when it is whole (copy
 * done) or failed (the row moves back). 1 when the report was the move's
 * and must not move the instance's state, 0 otherwise. */
int migrations_apply_report(struct server *srv, const char *node_id, const char *id,
                            const char *reported, json_t *copy, const char *message,
                            struct sl_error *err);

/* A report of instance id from node_id that no longer holds it: the source
 * of a move saying its copy is gone ends the move. */
int migrations_source_report(struct server *srv, const char *node_id, const char *id,
                             const char *reported, struct sl_error *err);

/* Adds "migration" (the latest move: {from_node, to_node, state, reason,
 * bytes_done, bytes_total, message}, or null) to an instance's JSON, and
 * shows the state `migrating` while its copy runs. */
int migrations_instance_json(struct server *srv, json_t *j, struct sl_error *err);

/* How many moves from or to node_id are not finished (a host is not
 * removed while its disks are copied or still to be dropped). */
int migrations_node_busy(struct store *st, const char *node_id, int64_t *n, struct sl_error *err);

#endif
