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
#include "../lib/id.h"
#include "server.h"

/* A new instance's id and root password, made before its placement's
 * transaction: the password's crypt(3) hash costs some 0.5 ms of CPU,
 * which inside the transaction every other write would wait for. */
struct instance_secrets {
    char id[SL_ID_MAX];
    char *sealed; /* the password, sealed for the store (secrets.h) */
    char *hash;   /* its crypt(3) hash, for the host */
};

/* Makes s (a new id and password); release with sched_secrets_release. */
int sched_secrets_new(struct server *srv, struct instance_secrets *s, struct sl_error *err);
void sched_secrets_release(struct instance_secrets *s);

struct instance_request {
    const char *user_id;
    const char *name;      /* NULL: the id */
    const char *region;    /* NULL: any */
    const char *host;      /* NULL: any; else a node id or a host name, pinned */
    const char *gpu_model; /* a catalog name ("RTX 4090") or id */
    int64_t gpus;
    const char *image;
    int64_t data_disk_gib;
    const char *plan; /* NULL: pay-as-you-go */
    int auto_renew;
    const struct instance_secrets *secrets; /* NULL: sched_place makes them */
};

/* Offers per host (docs/design/control-plane.md, "Offers per host"): a
 * host's CPU and memory less the operator's reserve are divided among all
 * of its GPUs; an instance gets its GPUs' share, at most what the catalog
 * promises per GPU of the model. A share under these is no share at all:
 * such a host offers nothing (runc needs a quota of 10 ms per 100 ms; a
 * container in less memory than this is not worth renting). */
#define SCHED_MIN_MILLICORES 100
#define SCHED_MIN_MEMORY_MIB 256

/* The share per GPU of one resource: (total - reserve) / gpus, at most cap
 * (cap <= 0: no cap), 0 when the host has no GPUs or the share is under
 * min. Pure arithmetic, no overflow for totals and caps under 2^62. */
int64_t sched_per_gpu(int64_t total, int64_t reserve, int64_t gpus, int64_t cap, int64_t min);

/* An instance's CPU (millicores) or memory (MiB) limit from its own, fixed
 * when it was placed: in no-GPU mode at most no-GPU mode's (nogpu_limit,
 * instances.nogpu_*). */
static inline int64_t sched_instance_limit(bool nogpu, int64_t nogpu_limit, int64_t own)
{
    return nogpu && nogpu_limit < own ? nogpu_limit : own;
}

/* What a host can give to instances and what it gives now. */
struct host_resources {
    int64_t cpu_cores, memory_mib; /* as the host reported itself */
    int64_t gpus;                  /* all of its GPUs, free or not */
    int64_t cpu_used_millicores;   /* given to instances that hold GPUs or run without */
    int64_t memory_used_mib;
};

/* The share per GPU of model (its catalog CPU cores and memory per GPU) on
 * host h after the reserves of srv's configuration. */
void sched_host_share(const struct server *srv, const struct host_resources *h,
                      int64_t model_cpu_cores, int64_t model_memory_mib, int64_t *millicores,
                      int64_t *memory_mib);

/* How many GPUs of idle free ones an instance could get on h now, at
 * millicores and memory_mib per GPU: fewer when the CPU or memory left (the
 * host's less its reserve, less what instances hold) does not cover them.
 * Pure arithmetic. */
int64_t sched_host_fits(const struct server *srv, const struct host_resources *h, int64_t idle,
                        int64_t millicores, int64_t memory_mib);

/* Loads h for node_id, leaving instance except_id (may be NULL) out of what
 * is given: an instance counts while it holds GPUs (at its own CPU and
 * memory) and while it runs in no-GPU mode (at no-GPU mode's). */
int sched_host_resources(struct server *srv, const char *node_id, const char *except_id,
                         struct host_resources *h, struct sl_error *err);

/* Whether the host of stopped instance id has the CPU and memory to start
 * it again: 409 insufficient_cpu / insufficient_memory, saying what to do,
 * when it has not. In no-GPU mode (nogpu), the way to one's data on a host
 * whose GPUs are all rented, only memory is checked, and against all of the
 * host's (the reserve included). */
int sched_check_room(struct server *srv, const char *id, bool nogpu, struct sl_error *err);

/* Places and records a new instance in one transaction: picks an online
 * host of the region (or the one pinned) with enough free GPUs of the
 * model, CPU and memory for them, that holds the image and has disk room,
 * reserves the GPUs and an SSH port, records the instance's CPU and memory,
 * and tells the host (its desired revision). Fills id (SL_ID_MAX bytes).
 * The pointers of rq are borrowed. Errors: 400 invalid_field /
 * ambiguous_host, 404 no_such_gpu_model / no_such_image / no_such_region /
 * no_such_host, 403 verification_required, 409 too_many_instances /
 * name_taken / no_capacity / insufficient_disk / insufficient_cpu /
 * insufficient_memory / image_unavailable / host_offline / host_full /
 * insufficient_balance / no_ports; each message says what to do. */
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

/* The lowest free SSH port of node_id's range: 409 no_ports when none. */
int sched_pick_port(struct store *st, const char *node_id, int64_t *port, struct sl_error *err);

/* The node id (SL_ID_MAX) of rq->host (a node id or a host name): 404
 * no_such_host, 400 ambiguous_host when several hosts share the name,
 * invalid_field when it is in another region than rq->region, 409
 * host_offline. */
int sched_find_host(struct server *srv, const struct instance_request *rq, char *node_id,
                    struct sl_error *err);

#endif
