/* Clones (docs/design/instances.md, "Clones"): a new instance made from a
 * stopped one's disks, copied agent to agent. suanlid places the clone as
 * any instance (sched_place, the host pin included), records the copy in
 * the `clones` table and hands both hosts what they need in their desired
 * state: the source's host an export (the source instance and the SHA-256
 * of a one-time transfer token), the clone's host a copy_from (the source
 * agent's transfer URL, the token, the source instance). The token's
 * plaintext is stored sealed (secrets.h), for the clone's host only; the
 * source's host holds its hash. While the copy runs the clone is
 * `copying` and the source can neither start nor be released; once the
 * clone runs, fails or is released the export is withdrawn. */
#ifndef SL_CLONES_H
#define SL_CLONES_H

#include <jansson.h>
#include <stdint.h>

#include "../lib/error.h"
#include "../lib/id.h"
#include "instance-states.h"
#include "server.h"

struct clone_request {
    const char *gpu_model; /* NULL: the source's */
    int64_t gpus;          /* 0: the source's */
    const char *host;      /* NULL: placement picks; else a node id or hostname */
    const char *name;      /* NULL: the new id */
};

/* What copying an instance's disks needs of it and its host. */
struct copy_source {
    char user_id[SL_ID_MAX], node_id[SL_ID_MAX], model_id[SL_ID_MAX], state[32];
    char image[160], hostname[256], region[64];
    int64_t gpus, system_disk_gib, data_disk_gib, last_heartbeat, transfer_port, ssh_port;
};

/* Loads s for instance id: 404 no_such_instance when there is none. */
int clones_load_instance(struct store *st, const char *id, struct copy_source *s,
                         struct sl_error *err);

/* 409 host_unavailable when the host of instance id (as s has it) is
 * offline or serves no copies. */
int clones_check_source_host(struct server *srv, const char *id, const struct copy_source *s,
                             struct sl_error *err);

/* Clones source_id (the caller's, stopped) for user_id: places the new
 * instance, records the copy and tells both hosts. Fills id (SL_ID_MAX).
 * Inside the caller's transaction. 409 instance_not_stopped, source_busy,
 * host_unavailable; placement's errors otherwise. */
int clones_create(struct server *srv, const char *source_id, const char *user_id,
                  const struct clone_request *rq, char *id, struct sl_error *err);

/* What a copy in progress forbids: starting or releasing its source (409
 * being_cloned), starting a clone whose copy failed (409 copy_failed). A
 * clone released while copying ends its copy (the export is withdrawn).
 * Call it when the verb applies, inside its transaction. */
int clones_verb_check(struct server *srv, const char *id, enum instance_verb verb,
                      struct sl_error *err);

/* A start refused with gpus_unavailable (instance_hold_gpus): rewrites the
 * message to name `suanli clone ID --host H` with a host that has room for
 * it now, when there is one. Keeps err otherwise. */
void clones_start_hint(struct server *srv, const char *id, struct sl_error *err);

/* The desired state of node_id: adds copy_from to its instances that are
 * clones still to copy, and returns the node's exports ([{instance,
 * token_sha256}], a new reference; NULL on error). items is the desired
 * instances array. */
json_t *clones_desired(struct server *srv, const char *node_id, json_t *items,
                       struct sl_error *err);

/* A node's report of one instance: copy (may be NULL) is {bytes_done,
 * bytes_total} of a copy under way; next is the state the report moved
 * the instance to, or -1 when it stayed. Records progress (an event at
 * each quarter) and ends the copy when the clone runs or failed. */
int clones_apply_report(struct server *srv, const char *id, json_t *copy, int next,
                        struct sl_error *err);

/* Records a copy's progress ({bytes_done, bytes_total, done}) in the row
 * of table (clones or migrations) whose key_column is key, with an event
 * of kind in state at each quarter. table and key_column are constants. */
int clones_progress(struct store *st, const char *table, const char *key_column, struct db_arg key,
                    const char *id, const char *kind, const char *state, json_t *copy,
                    struct sl_error *err);

/* The port a node serves disk transfers on (its heartbeat's
 * transfer_port; 0: none). */
int clones_node_transfer_port(struct server *srv, const char *node_id, int64_t port,
                              struct sl_error *err);

/* Adds "copy" ({source_id, state, bytes_done, bytes_total, message}, or
 * null) to an instance's JSON. */
int clones_instance_json(struct server *srv, json_t *j, struct sl_error *err);

#endif
