/* Placement (docs/design/instances.md, "Placement"): which host a new
 * instance goes to, with which GPUs, SSH port and disk room, within the
 * renter's limit and balance. Everything is decided and recorded in one
 * write transaction, so concurrent creates cannot share a GPU, a port or the
 * last of a host's disk. */
#ifndef SL_SCHED_H
#define SL_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "../lib/error.h"
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
 * image and has disk room, reserves the GPUs and an SSH port, and tells the
 * host (its desired revision). Fills id (SL_ID_MAX bytes). The pointers of
 * rq are borrowed. Errors: 400 invalid_field, 404 no_such_gpu_model /
 * no_such_image / no_such_region, 403 verification_required, 409
 * too_many_instances / name_taken / no_capacity / insufficient_disk /
 * image_unavailable / insufficient_balance / no_ports; each message says
 * what to do. */
int sched_place(struct server *srv, const struct instance_request *rq, char *id,
                struct sl_error *err);

/* Whether user_id may start an instance of gpus GPUs of model_id in region
 * (nogpu: in no-GPU mode) now: verified when the operator requires it (403
 * verification_required) and, unless a prepaid plan covers it, a balance
 * that pays an hour (409 insufficient_balance). */
int sched_check_start(struct server *srv, const char *user_id, const char *model_id, int64_t gpus,
                      const char *region, bool nogpu, bool prepaid, struct sl_error *err);

/* Reserves n free GPUs of model_id on node_id for instance_id: 0, or 1
 * when there are too few (then nothing is reserved). Inside the caller's
 * transaction. */
int sched_reserve_gpus(struct store *st, const char *node_id, const char *model_id, int64_t n,
                       const char *instance_id, struct sl_error *err);

#endif
