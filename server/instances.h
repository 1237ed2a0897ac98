/* Instances: the lifecycle of DESIGN.md section 3 as the control plane sees
 * it. suanlid never touches a container: it records what should be
 * (desired, generation) and learns what is from the node's reports.
 *
 * The parts, one file each (docs/design/instances.md):
 *   instance-states.h    states and transitions, as tables
 *   sched.h              placement of a new instance (sched_place)
 *   instances.h          the verbs: start, stop, restart, release; events
 *   instance-view.h      the instance's JSON (instance_json)
 *   instance-sync.h      the nodes' desired state out, their reports in
 *   instance-passwords.h root passwords, sealed and hashed
 * This header includes the others, so a caller names one. */
#ifndef SL_INSTANCES_H
#define SL_INSTANCES_H

#include <stdbool.h>

#include "../lib/error.h"
#include "instance-passwords.h"
#include "instance-states.h"
#include "instance-sync.h"
#include "instance-view.h"
#include "sched.h"
#include "server.h"

/* The verbs, on an instance that exists (404 no_such_instance otherwise;
 * ownership is the caller's business: the API's API_INSTANCE routes).
 * Each runs inside the caller's transaction, writes its event (reason:
 * "user", or the loop that acts: "balance", "schedule", "idle",
 * "auto_release", "plan_expired") and tells the node. A verb asked of an
 * instance already there or on its way succeeds doing nothing; one its
 * state refuses is 409 invalid_state saying what to do
 * (instance-states.h has the table).
 *
 * start: mode "gpu" (the GPUs again, on the same host: 409
 * gpus_unavailable when too few are free) or "nogpu"; needs a verified
 * account and a balance for an hour unless a plan covers it. stop: the
 * meter stops at once, the disks are kept. release: the unused part of a
 * plan comes back, nothing is billed after it. */
int instance_start(struct server *srv, const char *id, const char *mode, struct sl_error *err);
int instance_stop(struct server *srv, const char *id, const char *reason, struct sl_error *err);
int instance_restart(struct server *srv, const char *id, struct sl_error *err);
int instance_release(struct server *srv, const char *id, const char *reason, struct sl_error *err);

/* GPUs: gives the instance's back to the pool; or reserves them again up
 * to its count on its host (409 gpus_unavailable when too few are free). */
int instance_free_gpus(struct store *st, const char *instance_id, struct sl_error *err);
int instance_hold_gpus(struct store *st, const char *instance_id, struct sl_error *err);

/* Appends an event of an instance (GET /v1/instances/{id}/events, and the
 * account's GET /v1/events); state, reason and message may be NULL. */
int instance_event(struct store *st, const char *instance_id, const char *kind, const char *state,
                   const char *reason, const char *message, struct sl_error *err);

#endif
