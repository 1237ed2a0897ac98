/* Instances as the API shows them (instance-view.h). */
#include "instance-view.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "billing.h"
#include "clones.h"
#include "hints.h"
#include "migrations.h"
#include "instance-passwords.h"
#include "nodes.h"
#include "ports.h"
#include "sched.h"
#include "stops.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

json_t *instance_gpu_indices(struct store *st, const char *id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT idx FROM gpus WHERE instance_id = ?1 ORDER BY idx", DB_ARGS(DB_TEXT(id)), err);
    cleanup_json json_t *out = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(out, json_integer(db_int(rows, 0)));
    return rc < 0 ? NULL : TAKE_PTR(out);
}

/* What the instance costs: its plan, what it has been charged, its rate
 * now, and when a stopped one will be released. Columns 23..26 of
 * instance_json's query. Consumes j. */
static json_t *billing_json(struct server *srv, json_t *j, struct db_rows *rows,
                            struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *state = json_string_value(json_object_get(j, "state"));
    const char *plan = json_string_value(json_object_get(j, "plan"));
    int64_t charged, rate;

    if (billing_instance_charged(srv->store, id, &charged, &rate, err) < 0) {
        json_decref(j);
        return NULL;
    }
    bool prepaid = strcmp(plan, "payg") != 0;
    bool counting = !prepaid && strcmp(state, "stopped") == 0 && !db_null(rows, 25);
    json_object_set_new(j, "plan_expires_at", prepaid ? api_time(db_int(rows, 23)) : json_null());
    json_object_set_new(j, "auto_renew", json_boolean(prepaid && db_int(rows, 24)));
    json_object_set_new(j, "plan_price_micros", json_integer(prepaid ? db_int(rows, 26) : 0));
    json_object_set_new(j, "stopped_at",
                        db_null(rows, 25) ? json_null() : api_time(db_int(rows, 25)));
    json_object_set_new(j, "release_at",
                        counting ? api_time(db_int(rows, 25) + srv->cfg.release_after)
                                 : json_null());
    json_object_set_new(j, "charged_micros", json_integer(charged));
    json_object_set_new(j, "rate_per_hour_micros", json_integer(rate));
    return j;
}

json_t *instance_json(struct server *srv, const char *id, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT i.id, i.name, i.user_id, i.region_id, i.node_id, m.name, i.gpus, i.image,"
        " i.state, i.desired, i.mode, i.plan, i.cpu_millicores,"
        " i.memory_mib, i.system_disk_gib, i.data_disk_gib, n.address,"
        " i.ssh_port, i.root_password, i.state_message, i.created_at, i.updated_at,"
        " (SELECT COUNT(*) FROM gpus g WHERE g.node_id = i.node_id AND g.simulated = 1"
        "  AND g.gpu_model_id = i.gpu_model_id) > 0,"
        " i.plan_expires_at, i.plan_auto_renew, i.stopped_at, i.plan_price_micros,"
        " n.terminals FROM instances i JOIN gpu_models m ON m.id = i.gpu_model_id"
        " JOIN nodes n ON n.id = i.node_id WHERE i.id = ?1 AND (?2 IS NULL OR i.user_id = ?2)",
        DB_ARGS(DB_TEXT(id), DB_TEXT(user_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return NULL;
    if (rc == 0) {
        sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                "no instance '%s': list yours with suanli ls", id);
        return NULL;
    }
    json_t *gpus = instance_gpu_indices(srv->store, id, err);
    if (!gpus)
        return NULL;
    bool nogpu = strcmp(db_text(rows, 10), "nogpu") == 0;
    cleanup_free char *password =
        instance_password_open(srv, db_text(rows, 0), db_text(rows, 18), err);
    if (!password) {
        json_decref(gpus);
        return NULL;
    }
    cleanup_free char *command =
        xasprintf("ssh -p %" PRId64 " root@%s", db_int(rows, 17), db_text(rows, 16));
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:o, s:b, s:s, s:s, s:s, s:s, s:s, s:f, s:I, s:I,"
        " s:I, s:{s:s, s:I, s:s, s:s, s:s}, s:s, s:o, s:o}",
        "id", db_text(rows, 0), "name", db_text(rows, 1), "user_id", db_text(rows, 2), "region",
        db_text(rows, 3), "node_id", db_text(rows, 4), "gpu_model", db_text(rows, 5), "gpus",
        (json_int_t)db_int(rows, 6), "gpu_indices", gpus, "simulated_gpus", (int)db_int(rows, 22),
        "image", db_text(rows, 7), "state", db_text(rows, 8), "desired", db_text(rows, 9), "mode",
        db_text(rows, 10), "plan", db_text(rows, 11), "cpu_cores",
        (double)sched_instance_limit(nogpu, srv->cfg.nogpu_millicores, db_int(rows, 12)) / 1000.0,
        "memory_mib",
        (json_int_t)sched_instance_limit(nogpu, srv->cfg.nogpu_memory_mib, db_int(rows, 13)),
        "system_disk_gib", (json_int_t)db_int(rows, 14), "data_disk_gib",
        (json_int_t)db_int(rows, 15), "ssh", "host", db_text(rows, 16), "port",
        (json_int_t)db_int(rows, 17), "user", "root", "password", password, "command", command,
        "state_message", db_text(rows, 19), "created_at", api_time(db_int(rows, 20)), "updated_at",
        api_time(db_int(rows, 21)));
    if (!j)
        return NULL;
    /* whether its host serves the terminal in the browser (terminal.h) */
    json_object_set_new(j, "terminal", json_boolean(db_int(rows, 27)));
    j = billing_json(srv, j, rows, err);
    if (j && ports_instance_json(srv, j, err) < 0) {
        json_decref(j);
        return NULL;
    }
    j = j ? stops_json(srv, j, err) : NULL;
    if (j && (clones_instance_json(srv, j, err) < 0 ||      /* a clone's copy */
              migrations_instance_json(srv, j, err) < 0)) { /* a move's */
        json_decref(j);
        return NULL;
    }
    /* what its metrics say (hints.h): none unless it runs */
    if (j) {
        json_t *hints =
            hints_of_instance(srv->store, json_string_value(json_object_get(j, "id")), err);
        if (!hints) {
            json_decref(j);
            return NULL;
        }
        json_object_set_new(j, "hints", hints);
    }
    /* last: a lost host shows host_lost in place of the recorded state */
    if (j && nodes_instance_view(srv, j, err) < 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}
