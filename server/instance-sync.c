/* Node sync: desired state out, reports in (instance-sync.h). */
#include "instance-sync.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/timefmt.h"
#include "billing.h"
#include "clones.h"
#include "datasets.h"
#include "image-save.h"
#include "migrations.h"
#include "instance-states.h"
#include "instance-view.h"
#include "instances.h"
#include "ports.h"
#include "storage.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int instances_node_changed(struct store *st, const char *node_id, struct sl_error *err)
{
    if (store_exec(st, "UPDATE nodes SET desired_revision = desired_revision + 1 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(node_id)), err) < 0)
        return -1;
    store_note_change(st); /* waiting agents hear of it at commit (desired-wait.h) */
    return 0;
}

int instances_owner_changed(struct store *st, const char *user_id, struct sl_error *err)
{
    int n =
        store_exec(st,
                   "UPDATE nodes SET desired_revision = desired_revision + 1 WHERE id IN"
                   " (SELECT node_id FROM instances WHERE user_id = ?1 AND state != 'released')",
                   DB_ARGS(DB_TEXT(user_id)), err);
    if (n < 0)
        return -1;
    if (n > 0)
        store_note_change(st);
    return 0;
}

static json_t *authorized_keys(struct store *st, const char *user_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT public_key FROM ssh_keys WHERE user_id = ?1 ORDER BY created_at, id",
        DB_ARGS(DB_TEXT(user_id)), err);
    cleanup_buf struct sl_buf b = SL_BUF_INIT;
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1)
        sl_buf_addf(&b, "%s\n", db_text(rows, 0));
    json_t *j = rc < 0 ? NULL : json_string(b.data);
    return j;
}

json_t *instances_desired(struct server *srv, const char *node_id, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t revision;
    int rc;

    if (store_get_int(st, "SELECT desired_revision FROM nodes WHERE id = ?1",
                      DB_ARGS(DB_TEXT(node_id)), &revision, err) < 0)
        return NULL;
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT i.id, i.desired, i.generation, i.image, i.mode, i.cpu_millicores,"
                    " i.memory_mib, i.system_disk_gib, i.data_disk_gib, i.ssh_port,"
                    " i.root_password_crypt, i.user_id FROM instances i"
                    " JOIN gpu_models m ON m.id = i.gpu_model_id"
                    " WHERE i.node_id = ?1 AND i.state != 'released' ORDER BY i.seq",
                    DB_ARGS(DB_TEXT(node_id)), err);
    if (!rows)
        return NULL;
    cleanup_json json_t *items = json_array();
    while ((rc = db_next(rows, err)) == 1) {
        const char *id = db_text(rows, 0);
        bool nogpu = strcmp(db_text(rows, 4), "nogpu") == 0;
        /* a plan keeps its GPUs in no-GPU mode; they are not attached */
        json_t *gpus = nogpu ? json_array() : instance_gpu_indices(st, id, err);
        json_t *keys = gpus ? authorized_keys(st, db_text(rows, 11), err) : NULL;
        if (!keys) {
            json_decref(gpus);
            return NULL;
        }
        json_array_append_new(
            items,
            json_pack(
                "{s:s, s:s, s:I, s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:s, s:o}", "id", id,
                "desired", db_text(rows, 1), "generation", (json_int_t)db_int(rows, 2), "image",
                db_text(rows, 3), "mode", db_text(rows, 4), "gpus", gpus, "cpu_millicores",
                (json_int_t)sched_instance_limit(nogpu, srv->cfg.nogpu_millicores, db_int(rows, 5)),
                "memory_mib",
                (json_int_t)sched_instance_limit(nogpu, srv->cfg.nogpu_memory_mib, db_int(rows, 6)),
                "system_disk_gib", (json_int_t)db_int(rows, 7), "data_disk_gib",
                (json_int_t)db_int(rows, 8), "ssh_port", (json_int_t)db_int(rows, 9),
                "root_password_crypt", db_text(rows, 10), "authorized_keys", keys));
        /* the AutoDL paths, made by the init at the start (node/boot.c) */
        json_object_set_new(json_array_get(items, json_array_size(items) - 1), "autodl_paths",
                            json_boolean(srv->cfg.autodl_paths));
        /* the renter, for the agent's /metrics labels (node/metrics.h) */
        json_object_set_new(json_array_get(items, json_array_size(items) - 1), "user_id",
                            json_string(db_text(rows, 11)));
    }
    if (rc < 0 || ports_desired(srv, items, err) < 0)
        return NULL;
    /* clones to copy here, and this host's disks others copy (clones.h) */
    cleanup_json json_t *exports = clones_desired(srv, node_id, items, err);
    if (!exports || migrations_desired(srv, node_id, items, exports, err) < 0)
        return NULL;
    cleanup_rows struct db_rows *images = store_query(
        st,
        "SELECT i.name, i.recipe, i.parent FROM images i JOIN nodes n ON n.id = ?1"
        " WHERE i.recipe != '' AND (i.region_id = '' OR i.region_id = n.region_id) ORDER BY i.name",
        DB_ARGS(DB_TEXT(node_id)), err);
    if (!images)
        return NULL;
    cleanup_json json_t *wanted = json_array();
    while ((rc = db_next(images, err)) == 1) {
        const char *recipe = db_text(images, 1);
        if (strncmp(recipe, "upload:", 7) == 0)
            json_array_append_new(wanted, json_pack("{s:s, s:s, s:s}", "name", db_text(images, 0),
                                                    "recipe", "upload", "sha256", recipe + 7));
        else if (strncmp(recipe, "layer:", 6) == 0) /* a saved image (image-save.h) */
            json_array_append_new(wanted, json_pack("{s:s, s:s, s:s, s:s}", "name",
                                                    db_text(images, 0), "recipe", "layer", "sha256",
                                                    recipe + 6, "parent", db_text(images, 2)));
        else
            json_array_append_new(
                wanted, json_pack("{s:s, s:s}", "name", db_text(images, 0), "recipe", recipe));
    }
    if (rc < 0)
        return NULL;
    cleanup_json json_t *datasets = datasets_desired(st, node_id, err);
    if (!datasets)
        return NULL;
    /* file storage: the region's backend, each instance's directory */
    cleanup_json json_t *storage = storage_desired(st, node_id, items, err);
    if (!storage)
        return NULL;
    /* saved images to capture here (image-save.h) */
    cleanup_json json_t *saves = image_saves_desired(srv, node_id, err);
    if (!saves)
        return NULL;
    return json_pack("{s:I, s:O, s:O, s:O, s:O, s:O, s:O}", "revision", (json_int_t)revision,
                     "instances", items, "images", wanted, "exports", exports, "datasets", datasets,
                     "storage", storage, "saves", saves);
}

/* At most this many `oom` events per report: a loop that keeps running out
 * of memory catches up over a few heartbeats instead of in one. */
#define OOM_EVENTS_PER_REPORT 20

/* One `oom` event per process the kernel killed. oom_kills counts since the
 * container started (a new one starts at 0), so what is already recorded is
 * the number of `oom` events since the instance's latest `running` event. */
static int record_oom_kills(struct store *st, const char *id, int64_t oom_kills,
                            struct sl_error *err)
{
    int64_t recorded;
    int rc;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT COUNT(*) FROM events WHERE instance_id = ?1 AND kind = 'oom'"
                        " AND seq > (SELECT COALESCE(MAX(seq), 0) FROM events"
                        " WHERE instance_id = ?1 AND kind = 'running')",
                        DB_ARGS(DB_TEXT(id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        recorded = rc ? db_int(rows, 0) : 0;
    }
    for (int64_t n = recorded; n < oom_kills && n < recorded + OOM_EVENTS_PER_REPORT; n++) {
        if (instance_event(st, id, "oom", "running", "node",
                           "out of memory: a process went past the instance's memory limit and"
                           " was killed",
                           err) < 0)
            return -1;
    }
    return 0;
}

/* One reported instance: moves the recorded state along when the node has
 * reached what was asked, and records processes killed for lack of memory.
 * Fields: id, state (running|stopped|absent|failed), generation, message,
 * and oom_kills (running only: the OOM killer's count since the container
 * started, from its memory cgroup). */
static int apply_one(struct server *srv, const char *node_id, json_t *rep, struct sl_error *err)
{
    struct store *st = srv->store;
    const char *id = NULL, *state = NULL, *message = NULL;
    int64_t generation = 0, oom_kills = 0;
    json_t *copy = NULL;
    const struct sl_json_field f[] = {
        { "id", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &id },
        { "state", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 16, .out = &state },
        { "generation", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &generation },
        { "message", SL_JSON_STRING, .max_len = 500, .multiline = true, .out = &message },
        { "oom_kills", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &oom_kills },
        { "copy", SL_JSON_OBJECT, .out = &copy }, /* a clone's copy under way */
    };
    int now = -1, desired = -1, reported;
    int64_t want_generation = 0;
    enum instance_state next;
    int rc;

    if (sl_json_fields(rep, f, ARRAY_SIZE(f), err) < 0)
        return -1;
    {
        cleanup_rows struct db_rows *rows = store_query(
            st, "SELECT state, desired, generation FROM instances WHERE id = ?1 AND node_id = ?2",
            DB_ARGS(DB_TEXT(id), DB_TEXT(node_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0) /* not ours: the source of a move may say its copy is gone */
            return migrations_source_report(srv, node_id, id, state, err);
        now = instance_state_parse(db_text(rows, 0));
        desired = instance_state_parse(db_text(rows, 1));
        want_generation = db_int(rows, 2);
    }
    /* a move's copy here: its progress, its end (migrations.h) */
    if ((rc = migrations_apply_report(srv, node_id, id, state, copy, message, err)) != 0)
        return rc < 0 ? -1 : 0;
    /* a state this build does not know (a newer agent's) changes nothing */
    reported = instance_report_parse(state);
    if (now < 0 || desired < 0 || reported < 0 ||
        !instance_after_report(now, desired, reported, generation >= want_generation, &next)) {
        if (copy && clones_apply_report(srv, id, copy, -1, err) < 0)
            return -1;
        if (oom_kills > 0 && reported == REPORT_RUNNING && now == INSTANCE_RUNNING)
            return record_oom_kills(st, id, oom_kills, err);
        /* a step the node keeps trying (a stop or release that fails)
         * says why while the state waits; "" once it worked */
        if (message && reported != REPORT_FAILED &&
            store_exec(st,
                       "UPDATE instances SET state_message = ?2 WHERE id = ?1"
                       " AND state_message != ?2",
                       DB_ARGS(DB_TEXT(id), DB_TEXT(message)), err) < 0)
            return -1;
        return 0;
    }
    const char *name = instance_state_name(next);
    if (store_exec(st,
                   "UPDATE instances SET state = ?2, state_message = ?3, updated_at = ?4"
                   " WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(name), DB_TEXT(message ? message : ""),
                           DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    /* the meter runs from the moment the node says it runs */
    if (next == INSTANCE_RUNNING && billing_open_compute(srv, id, err) < 0)
        return -1;
    if (next == INSTANCE_FAILED && billing_close(srv, id, false, err) < 0)
        return -1;
    /* a clone that runs, failed or is gone: its copy ends (clones.h) */
    if (clones_apply_report(srv, id, copy, (int)next, err) < 0)
        return -1;
    /* GPUs go back to the pool once nothing runs on them, unless a plan
     * keeps them */
    bool prepaid;
    if (next != INSTANCE_RUNNING && (billing_plan_active(st, id, &prepaid, err) < 0 ||
                                     (!prepaid && instance_free_gpus(st, id, err) < 0)))
        return -1;
    /* the event has the name of the state reached; a stopped instance of a
     * host drained with moves moves away (migrations.h) */
    if (instance_event(st, id, name, name, "node", message, err) < 0)
        return -1;
    return next == INSTANCE_STOPPED ? migrations_after_stop(srv, node_id, id, err) : 0;
}

int instances_apply_report(struct server *srv, const char *node_id, json_t *report,
                           struct sl_error *err)
{
    size_t i;
    json_t *rep;

    json_array_foreach(report, i, rep)
    {
        if (apply_one(srv, node_id, rep, err) < 0) {
            sl_error_prefix(err, "instances[%zu]", i);
            return -1;
        }
    }
    return 0;
}
