/* The lifecycle verbs (instances.h): each asks instance-states.c's table
 * what it does in the instance's state, records the move and its event, and
 * tells the node, which converges and reports (instance-sync.c). */
#include "instances.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/timefmt.h"
#include "billing.h"
#include "clones.h"
#include "image-save.h"
#include "migrations.h"
#include "nodes.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int instance_event(struct store *st, const char *instance_id, const char *kind, const char *state,
                   const char *reason, const char *message, struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO events (instance_id, user_id, kind, state, reason, message,"
                      " created_at) SELECT id, user_id, ?2, ?3, ?4, ?5, ?6 FROM instances"
                      " WHERE id = ?1",
                      DB_ARGS(DB_TEXT(instance_id), DB_TEXT(kind), DB_TEXT(state ? state : ""),
                              DB_TEXT(reason ? reason : ""), DB_TEXT(message ? message : ""),
                              DB_INT(sl_time_now())),
                      err) < 0
               ? -1
               : 0;
}

int instance_free_gpus(struct store *st, const char *instance_id, struct sl_error *err)
{
    return store_exec(st, "UPDATE gpus SET instance_id = NULL WHERE instance_id = ?1",
                      DB_ARGS(DB_TEXT(instance_id)), err) < 0
               ? -1
               : 0;
}

/* What the verbs need of an instance's row. */
struct instance_row {
    char node_id[SL_ID_MAX], model_id[SL_ID_MAX], region[64], user_id[SL_ID_MAX];
    enum instance_state state;
    int64_t gpus;
};

static int load(struct store *st, const char *id, struct instance_row *r, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT node_id, gpu_model_id, region_id, state, gpus, user_id FROM instances"
                    " WHERE id = ?1",
                    DB_ARGS(DB_TEXT(id)), err);
    int rc, state;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
    state = instance_state_parse(db_text(rows, 3));
    if (state < 0)
        return sl_fail(err, SL_E_INTERNAL, NULL, "instance '%s' has an unknown state '%s'", id,
                       db_text(rows, 3));
    snprintf(r->node_id, sizeof(r->node_id), "%s", db_text(rows, 0));
    snprintf(r->model_id, sizeof(r->model_id), "%s", db_text(rows, 1));
    snprintf(r->region, sizeof(r->region), "%s", db_text(rows, 2));
    r->state = state;
    r->gpus = db_int(rows, 4);
    snprintf(r->user_id, sizeof(r->user_id), "%s", db_text(rows, 5));
    return 0;
}

int instance_hold_gpus(struct store *st, const char *id, struct sl_error *err)
{
    struct instance_row r;
    int64_t held;

    if (load(st, id, &r, err) < 0 ||
        store_get_int(st, "SELECT COUNT(*) FROM gpus WHERE instance_id = ?1", DB_ARGS(DB_TEXT(id)),
                      &held, err) < 0)
        return -1;
    if (held >= r.gpus)
        return 0;
    if (instance_free_gpus(st, id, err) < 0)
        return -1;
    int rc = sched_reserve_gpus(st, r.node_id, r.model_id, r.gpus, id, err);
    if (rc < 0)
        return -1;
    if (rc == 1)
        return sl_fail(err, SL_E_CONFLICT, "gpus_unavailable",
                       "the host of instance '%s' has fewer than %" PRId64 " free GPUs now "
                       "(its disks live there). Ways out: start it in no-GPU mode (suanli "
                       "start --no-gpu %s), wait for GPUs to free up, or clone it to "
                       "another host",
                       id, r.gpus, id);
    return 0;
}

/* Loads the instance and asks the table what verb does in its state: 1 to
 * go on, 0 when there is nothing to do, -1 with the 409 when its state
 * refuses the verb. */
static int verb_begin(struct store *st, enum instance_verb verb, const char *id,
                      struct instance_row *r, struct sl_error *err)
{
    if (load(st, id, r, err) < 0)
        return -1;
    switch (instance_verb_check(verb, r->state)) {
    case VERB_APPLIES:
        return 1;
    case VERB_ALREADY:
        return 0;
    case VERB_REFUSED:
        break;
    }
    return sl_fail(err, SL_E_CONFLICT, "invalid_state", "instance '%s' is %s: %s", id,
                   instance_state_name(r->state), instance_verb_refusal(verb));
}

/* Moves the instance to the state and desired state verb leaves it in;
 * mode: NULL keeps it. */
static int verb_set_state(struct store *st, const char *id, enum instance_verb verb,
                          const char *mode, struct sl_error *err)
{
    return store_exec(st,
                      "UPDATE instances SET state = ?2, desired = ?3, mode = COALESCE(?4, mode),"
                      " state_message = '', updated_at = ?5 WHERE id = ?1",
                      DB_ARGS(DB_TEXT(id), DB_TEXT(instance_state_name(instance_verb_next(verb))),
                              DB_TEXT(instance_state_name(instance_verb_desired(verb))),
                              DB_TEXT(mode), DB_INT(sl_time_now())),
                      err) < 0
               ? -1
               : 0;
}

int instance_stop(struct server *srv, const char *id, const char *reason, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;
    int rc = verb_begin(st, VERB_STOP, id, &r, err);

    if (rc <= 0)
        return rc;
    /* billing stops when the stop is asked for, not when it is done */
    if (verb_set_state(st, id, VERB_STOP, NULL, err) < 0 ||
        /* a stop ends any scheduled stop and idle period (server/stops.c) */
        store_exec(st,
                   "UPDATE instances SET stopped_at = ?2, release_warnings = 0, stop_at = NULL,"
                   " idle_since = NULL, idle_warned = 0 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(sl_time_now())), err) < 0 ||
        billing_close(srv, id, false, err) < 0 ||
        instance_event(st, id, "stop", "stopping", reason, NULL, err) < 0)
        return -1;
    return instances_node_changed(st, r.node_id, err);
}

int instance_start(struct server *srv, const char *id, const char *mode, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;
    bool nogpu = strcmp(mode, "nogpu") == 0;
    bool prepaid;
    int rc = verb_begin(st, VERB_START, id, &r, err);

    if (rc <= 0)
        return rc;
    /* a source being copied, a clone whose copy failed (clones.h) */
    if (clones_verb_check(srv, id, VERB_START, err) < 0 ||
        migrations_verb_check(srv, id, VERB_START, err) < 0 ||
        image_save_verb_check(srv, id, VERB_START, err) < 0)
        return -1;
    if (billing_plan_active(st, id, &prepaid, err) < 0 ||
        sched_check_start(srv, r.user_id, r.model_id, r.gpus, r.region, nogpu, prepaid, err) < 0 ||
        nodes_check_start(srv, id, r.node_id, prepaid, nogpu, err) < 0) {
        clones_start_hint(srv, id, err); /* a full host: names a host with room */
        return -1;
    }
    if (nogpu) {
        /* a plan keeps its GPUs even while they are not used */
        if (!prepaid && instance_free_gpus(st, id, err) < 0)
            return -1;
    } else if (instance_hold_gpus(st, id, err) < 0) {
        clones_start_hint(srv, id, err); /* names a host with room */
        return -1;
    }
    /* the CPU and memory that come with the GPUs (sched.h); after them, so
     * that GPUs taken are said first. A refusal rolls the hold back. */
    if (sched_check_room(srv, id, nogpu, err) < 0) {
        clones_start_hint(srv, id, err);
        return -1;
    }
    /* a new generation: the node retries even a start that failed before */
    if (store_exec(st, "UPDATE instances SET generation = generation + 1 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id)), err) < 0 ||
        verb_set_state(st, id, VERB_START, nogpu ? "nogpu" : "gpu", err) < 0 ||
        store_exec(st, "UPDATE instances SET stopped_at = NULL WHERE id = ?1", DB_ARGS(DB_TEXT(id)),
                   err) < 0 ||
        instance_event(st, id, "start", "starting", "user", nogpu ? "no-GPU mode" : NULL, err) < 0)
        return -1;
    return instances_node_changed(st, r.node_id, err);
}

int instance_restart(struct server *srv, const char *id, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;
    int rc = verb_begin(st, VERB_RESTART, id, &r, err);

    if (rc <= 0)
        return rc;
    /* a new generation of the same container: the node stops and starts it */
    if (image_save_verb_check(srv, id, VERB_RESTART, err) < 0 ||
        store_exec(st, "UPDATE instances SET generation = generation + 1 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id)), err) < 0 ||
        verb_set_state(st, id, VERB_RESTART, NULL, err) < 0 ||
        instance_event(st, id, "restart", "starting", "user", NULL, err) < 0)
        return -1;
    return instances_node_changed(st, r.node_id, err);
}

int instance_release(struct server *srv, const char *id, const char *reason, struct sl_error *err)
{
    struct store *st = srv->store;
    struct instance_row r;
    int rc = verb_begin(st, VERB_RELEASE, id, &r, err);

    if (rc <= 0)
        return rc;
    /* not a source being copied; a clone still copying ends its copy */
    if (clones_verb_check(srv, id, VERB_RELEASE, err) < 0 ||
        migrations_verb_check(srv, id, VERB_RELEASE, err) < 0 ||
        image_save_verb_check(srv, id, VERB_RELEASE, err) < 0)
        return -1;
    /* the unused part of a plan comes back; nothing is billed after this */
    if (billing_plan_end(srv, id, reason, err) < 0 || billing_close(srv, id, true, err) < 0 ||
        verb_set_state(st, id, VERB_RELEASE, NULL, err) < 0 ||
        store_exec(st, "UPDATE instances SET released_at = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(sl_time_now())), err) < 0 ||
        instance_event(st, id, "release", "releasing", reason, NULL, err) < 0)
        return -1;
    return instances_node_changed(st, r.node_id, err);
}
