/* Instances: placement, the lifecycle of DESIGN.md section 3 as the control
 * plane sees it, and what nodes are told to converge to. suanlid never
 * touches a container: it records what should be (desired, generation) and
 * learns what is from the node's reports. */
#ifndef SL_INSTANCES_H
#define SL_INSTANCES_H

#include <jansson.h>
#include <stdint.h>

#include "server.h"

struct instance_request {
    const char *user_id;
    const char *name;      /* NULL: the id */
    const char *region;    /* NULL: any */
    const char *gpu_model; /* a catalog name ("RTX 4090") or id */
    int64_t gpus;
    const char *image;
    int64_t data_disk_gib;
    const char *plan; /* NULL: pay-as-you-go */
    int auto_renew;
};

/* Places and records a new instance in one transaction: picks an online
 * host of the region with enough free GPUs of the model that holds the
 * image, reserves the GPUs and an SSH port. id holds SL_ID_MAX bytes. */
int sched_place(struct server *srv, const struct instance_request *rq, char *id,
                struct sl_error *err);

/* The renter's verbs. mode is "gpu" or "nogpu" (start only). */
int instance_stop(struct server *srv, const char *id, const char *reason, struct sl_error *err);
int instance_start(struct server *srv, const char *id, const char *mode, struct sl_error *err);
int instance_restart(struct server *srv, const char *id, struct sl_error *err);
int instance_release(struct server *srv, const char *id, const char *reason, struct sl_error *err);

/* 0 when user_id owns the instance (NULL: any user), else 404
 * "no_such_instance" as for one that does not exist. */
int instance_require_owned(struct store *st, const char *id, const char *user_id,
                           struct sl_error *err);

/* The instance as its owner sees it; NULL and 404 when absent or not
 * owned by user_id (NULL: any owner). */
json_t *instance_json(struct server *srv, const char *id, const char *user_id,
                      struct sl_error *err);

/* GPUs: held back to the pool; or reserved again up to the instance's
 * count on its host (409 gpus_unavailable when too few are free). */
int instance_free_gpus(struct store *st, const char *instance_id, struct sl_error *err);
int instance_hold_gpus(struct store *st, const char *instance_id, struct sl_error *err);

/* Appends an event of an instance. */
int instance_event(struct store *st, const char *instance_id, const char *kind, const char *state,
                   const char *reason, const char *message, struct sl_error *err);

/* At start-up: seals the root passwords stored in plaintext before secrets
 * were sealed (secrets.h) and hashes them for the nodes of the instances
 * not released. Rows already sealed and hashed are left alone. */
int instances_seal_secrets(struct server *srv, struct sl_error *err);

/* A node's desired state: its revision and every instance not released
 * (root passwords as crypt(3) hashes only). */
json_t *instances_desired(struct server *srv, const char *node_id, struct sl_error *err);

/* Applies a node's report of what runs there: [{id, state, generation,
 * message}], states "running", "stopped", "absent", "failed". */
int instances_apply_report(struct server *srv, const char *node_id, json_t *report,
                           struct sl_error *err);

#endif
