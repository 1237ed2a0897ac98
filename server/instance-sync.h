/* Node sync (docs/design/instances.md, "Who does what"): the desired state
 * suanlid hands each host, and the host's reports of what runs there, which
 * move the recorded states along (instance-states.h) with their events,
 * meters and GPUs. */
#ifndef SL_INSTANCE_SYNC_H
#define SL_INSTANCE_SYNC_H

#include <jansson.h>

#include "../lib/error.h"
#include "server.h"

/* A node's desired state, a new reference: {revision, instances, images}
 * with every instance of the node not released (root passwords as crypt(3)
 * hashes only, the owner's SSH keys, the service ports) and the images of
 * its region. NULL on a store error. */
json_t *instances_desired(struct server *srv, const char *node_id, struct sl_error *err);

/* Tells node_id that its desired state changed: bumps its revision, inside
 * the caller's transaction. */
int instances_node_changed(struct store *st, const char *node_id, struct sl_error *err);

/* Tells every node holding one of user_id's instances that its desired
 * state changed (the owner's SSH keys did), inside the caller's
 * transaction. */
int instances_owner_changed(struct store *st, const char *user_id, struct sl_error *err);

/* Applies a node's report of what runs there: [{id, state, generation,
 * message, oom_kills}], states "running", "stopped", "absent", "failed".
 * Instances that are not the node's are ignored (it will be told to drop
 * them); a malformed item is 400 naming its index. report is borrowed. */
int instances_apply_report(struct server *srv, const char *node_id, json_t *report,
                           struct sl_error *err);

#endif
