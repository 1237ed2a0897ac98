/* Migrate: a stopped instance's disks copied to another host under its own
 * id, then dropped from the first (migrations.h). */
#include "migrations.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "billing.h"
#include "clones.h"
#include "instance-sync.h"
#include "instances.h"
#include "nodes.h"
#include "sched.h"
#include "secrets.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

static char *token_context(const char *id)
{
    return xasprintf("migration_token:%s", id);
}

/* The latest unfinished move of id: its seq, source host and state. */
struct move {
    int64_t seq, source_ssh_port;
    char source[SL_ID_MAX], target[SL_ID_MAX], state[32];
};

static int load_move(struct store *st, const char *id, struct move *mv, struct sl_error *err);

int migrations_check_idle(struct store *st, const char *id, struct sl_error *err)
{
    struct move mv;
    int rc = load_move(st, id, &mv, err);

    if (rc <= 0)
        return rc;
    return sl_fail(err, SL_E_CONFLICT, "being_migrated",
                   "instance '%s' is moving to another host now: wait for the move to finish "
                   "(suanli show %s), then try again",
                   id, id);
}

/* Whether the instance may move now: stopped, no copy of it running, no
 * plan holding its GPUs, its host online and serving copies. */
static int check_movable(struct server *srv, const char *id, const struct copy_source *m,
                         struct sl_error *err)
{
    struct store *st = srv->store;
    bool prepaid;

    if (strcmp(m->state, "stopped") != 0)
        return sl_fail(err, SL_E_CONFLICT, "instance_not_stopped",
                       "instance '%s' is %s: only a stopped instance moves (its disks must not "
                       "change while they are copied); stop it first (suanli stop %s), then "
                       "migrate it",
                       id, m->state, id);
    if (migrations_check_idle(st, id, err) < 0 || clones_verb_check(srv, id, VERB_START, err) < 0)
        return -1;
    if (billing_plan_active(st, id, &prepaid, err) < 0)
        return -1;
    if (prepaid)
        return sl_fail(err, SL_E_CONFLICT, "plan_holds_gpus",
                       "instance '%s' has a prepaid plan, which holds its GPUs on host %s until "
                       "the plan ends: it cannot move before; clone it instead (suanli clone "
                       "%s --host H)",
                       id, m->hostname, id);
    return clones_check_source_host(srv, id, m, err);
}

/* The host the instance moves to: the one pinned, or the online host of
 * its region, other than its own, not cordoned, that has its image, at
 * least its number of GPUs of its model and room for its disks; the one
 * with the most of those GPUs free first (it is started there next). 0 and
 * target filled, or -1 with what the pinned host lacks or 409 no_host. */
static int pick_target(struct server *srv, const char *id, const struct copy_source *m,
                       const char *host, char *target, struct sl_error *err)
{
    char pinned[SL_ID_MAX] = "";
    int64_t cutoff = sl_time_now() - srv->cfg.node_offline_after;
    int64_t most_room = -1;
    int rc;

    if (host) {
        const struct instance_request rq = { .host = host };
        int64_t here;
        if (sched_find_host(srv, &rq, pinned, err) < 0 ||
            store_get_int(srv->store, "SELECT COUNT(*) FROM nodes WHERE id = ?1 AND region_id = ?2",
                          DB_ARGS(DB_TEXT(pinned), DB_TEXT(m->region)), &here, err) < 0)
            return -1;
        /* rates, limits and images are the region's */
        if (!here)
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "host '%s' is in another region than instance '%s' (%s): an instance "
                           "moves within its region; pick a host with suanli market --region %s",
                           host, id, m->region, m->region);
        if (nodes_check_placement(srv, pinned, err) < 0)
            return -1;
        if (strcmp(pinned, m->node_id) == 0)
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "instance '%s' is on host '%s' already: name another (suanli market "
                           "lists them), or leave out --host",
                           id, host);
    }
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT n.id, n.disk_free_bytes, n.instance_disks_bytes,"
        " (SELECT COALESCE(SUM(i.system_disk_gib + i.data_disk_gib), 0) FROM instances i"
        "  WHERE i.node_id = n.id AND i.state != 'released'),"
        " (SELECT COUNT(*) FROM gpus g WHERE g.node_id = n.id AND g.gpu_model_id = ?1"
        "  AND g.instance_id IS NULL) AS free"
        " FROM nodes n JOIN node_images ni ON ni.node_id = n.id AND ni.name = ?2"
        "  AND ni.state = 'ready'"
        " WHERE n.id != ?3 AND n.region_id = ?4 AND n.last_heartbeat > ?5"
        " AND n.cordoned_at IS NULL AND n.removed_at IS NULL AND (?6 = '' OR n.id = ?6)"
        " AND (SELECT COUNT(*) FROM gpus g WHERE g.node_id = n.id AND g.gpu_model_id = ?1) >= ?7"
        " ORDER BY free DESC, n.id",
        DB_ARGS(DB_TEXT(m->model_id), DB_TEXT(m->image), DB_TEXT(m->node_id), DB_TEXT(m->region),
                DB_INT(cutoff), DB_TEXT(pinned), DB_INT(m->gpus)),
        err);
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        int64_t room = nodes_disk_room_gib(srv, db_int(rows, 1), db_int(rows, 2), db_int(rows, 3));
        if (room >= (m->system_disk_gib + m->data_disk_gib)) {
            snprintf(target, SL_ID_MAX, "%s", db_text(rows, 0));
            return 0;
        }
        if (room > most_room)
            most_room = room;
    }
    if (rc < 0)
        return -1;
    if (most_room >= 0)
        return sl_fail(err, SL_E_CONFLICT, "insufficient_disk",
                       "%s%s has room for only %" PRId64 " GiB of disks now, and instance '%s' "
                       "has %" PRId64 " GiB: %s",
                       pinned[0] ? "host " : "no other host of its region", pinned[0] ? host : "",
                       most_room, id, (m->system_disk_gib + m->data_disk_gib),
                       pinned[0] ? "pick another (suanli market), or leave out --host"
                                 : "try again later");
    if (pinned[0])
        return sl_fail(err, SL_E_CONFLICT, "no_host",
                       "host '%s' cannot take instance '%s': it lacks image '%s' or %" PRId64
                       " GPU(s) of its model. Pick a host that has them (suanli market), or "
                       "leave out --host",
                       host, id, m->image, m->gpus);
    return sl_fail(err, SL_E_CONFLICT, "no_host",
                   "no other online host of region '%s' has image '%s', %" PRId64
                   " GPU(s) of the model of instance '%s' and room for its disks: try again "
                   "later",
                   m->region, m->image, m->gpus, id);
}

/* The SSH port on target: the one the instance has, when target's range
 * holds it and no instance there has it; else target's lowest free one. */
static int target_port(struct store *st, const char *target, int64_t port, int64_t *out,
                       struct sl_error *err)
{
    int64_t taken;

    if (store_get_int(st,
                      "SELECT (SELECT COUNT(*) FROM nodes WHERE id = ?1 AND ?2 BETWEEN"
                      "  ssh_port_min AND ssh_port_max) = 0 OR EXISTS (SELECT 1 FROM instances"
                      "  WHERE node_id = ?1 AND ssh_port = ?2 AND state != 'released')",
                      DB_ARGS(DB_TEXT(target), DB_INT(port)), &taken, err) < 0)
        return -1;
    if (!taken) {
        *out = port;
        return 0;
    }
    return sched_pick_port(st, target, out, err);
}

int migrations_create(struct server *srv, const char *id, const char *host, const char *reason,
                      char *target_out, struct sl_error *err)
{
    struct store *st = srv->store;
    struct copy_source m;
    char target[SL_ID_MAX], token[SL_TOKEN_MAX], hash[SL_HASH_HEX_MAX];
    int64_t port;

    if (clones_load_instance(st, id, &m, err) < 0 || check_movable(srv, id, &m, err) < 0 ||
        pick_target(srv, id, &m, host, target, err) < 0 ||
        target_port(st, target, m.ssh_port, &port, err) < 0)
        return -1;
    sl_token_new(token);
    sl_sha256_hex(token, strlen(token), hash);
    cleanup_free char *context = token_context(id);
    cleanup_free char *sealed = secrets_seal(srv, context, token);
    sodium_memzero(token, sizeof(token));
    cleanup_free char *msg = xasprintf("moving from host %s to host %s", m.node_id, target);
    /* the row is the target's from now on: the source's host only exports
     * the disks (migrations_desired); the GPUs are free (it is stopped) */
    if (instance_free_gpus(st, id, err) < 0 ||
        store_exec(st,
                   "UPDATE instances SET node_id = ?2, ssh_port = ?3, state_message = ?4,"
                   " updated_at = ?5 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(target), DB_INT(port), DB_TEXT(msg),
                           DB_INT(sl_time_now())),
                   err) < 0 ||
        store_exec(st,
                   "INSERT INTO migrations (instance_id, source_node_id, target_node_id,"
                   " source_ssh_port, reason, token_hash, token, state, created_at)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'copying', ?8)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(m.node_id), DB_TEXT(target), DB_INT(m.ssh_port),
                           DB_TEXT(reason), DB_TEXT(hash), DB_TEXT(sealed), DB_INT(sl_time_now())),
                   err) < 0 ||
        instance_event(st, id, "migrating", "stopped", reason, msg, err) < 0 ||
        instances_node_changed(st, m.node_id, err) < 0 ||
        instances_node_changed(st, target, err) < 0)
        return -1;
    if (target_out)
        snprintf(target_out, SL_ID_MAX, "%s", target);
    log_info("migrations: %s from host %s to host %s (%s)", id, m.node_id, target, reason);
    return 0;
}

static int load_move(struct store *st, const char *id, struct move *mv, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT seq, source_node_id, target_node_id, state, source_ssh_port FROM migrations"
        " WHERE instance_id = ?1 AND state IN ('copying', 'releasing') ORDER BY seq DESC LIMIT 1",
        DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    mv->seq = db_int(rows, 0);
    snprintf(mv->source, sizeof(mv->source), "%s", db_text(rows, 1));
    snprintf(mv->target, sizeof(mv->target), "%s", db_text(rows, 2));
    snprintf(mv->state, sizeof(mv->state), "%s", db_text(rows, 3));
    mv->source_ssh_port = db_int(rows, 4);
    return 1;
}

/* The copy is over (outcome: done, canceled): the source's host drops its
 * copy next (migrations_desired). */
static int move_release_source(struct store *st, const struct move *mv, const char *outcome,
                               struct sl_error *err)
{
    if (store_exec(st,
                   "UPDATE migrations SET state = 'releasing', outcome = ?2,"
                   " bytes_done = CASE WHEN ?2 = 'done' THEN bytes_total ELSE bytes_done END"
                   " WHERE seq = ?1",
                   DB_ARGS(DB_INT(mv->seq), DB_TEXT(outcome)), err) < 0)
        return -1;
    return instances_node_changed(st, mv->source, err);
}

int migrations_verb_check(struct server *srv, const char *id, enum instance_verb verb,
                          struct sl_error *err)
{
    struct store *st = srv->store;
    struct move mv;
    int rc;

    if (verb != VERB_START && verb != VERB_RELEASE)
        return 0;
    if ((rc = load_move(st, id, &mv, err)) <= 0)
        return rc;
    if (strcmp(mv.state, "copying") != 0)
        return 0; /* the copy is whole: the instance is the target's */
    if (verb == VERB_START)
        return sl_fail(err, SL_E_CONFLICT, "being_migrated",
                       "instance '%s' is moving to host %s: its disks are being copied. Wait "
                       "for the move to finish (suanli show %s), then start it",
                       id, mv.target, id);
    log_info("migrations: %s released while its disks were copied", id);
    return move_release_source(st, &mv, "canceled", err);
}

int migrations_desired(struct server *srv, const char *node_id, json_t *items, json_t *exports,
                       struct sl_error *err)
{
    struct store *st = srv->store;
    size_t i;
    json_t *item;
    int rc;

    /* instances moving here: copied from their source's host (the stopped
     * ones only: a released one's copy is told to stop) */
    json_array_foreach(items, i, item)
    {
        const char *id = json_string_value(json_object_get(item, "id"));
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT m.token, n.address, n.transfer_port FROM migrations m"
                        " JOIN nodes n ON n.id = m.source_node_id WHERE m.instance_id = ?1"
                        " AND m.target_node_id = ?2 AND m.state = 'copying'",
                        DB_ARGS(DB_TEXT(id), DB_TEXT(node_id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return -1;
        if (rc == 0)
            continue;
        cleanup_free char *context = token_context(id);
        cleanup_free char *token = secrets_open(srv, context, db_text(rows, 0), err);
        if (!token)
            return -1;
        cleanup_free char *url = xasprintf("http://%s:%" PRId64, db_text(rows, 1), db_int(rows, 2));
        json_object_set_new(item, "copy_from",
                            json_pack("{s:s, s:s, s:s, s:b}", "url", url, "token", token,
                                      "instance", id, "failed", 0));
    }
    /* instances moving away: their disks exported while copied, then
     * released */
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT m.instance_id, m.state, m.token_hash, m.source_ssh_port, i.image,"
        " i.system_disk_gib, i.data_disk_gib FROM migrations m"
        " JOIN instances i ON i.id = m.instance_id"
        " WHERE m.source_node_id = ?1 AND m.state IN ('copying', 'releasing') ORDER BY m.seq",
        DB_ARGS(DB_TEXT(node_id)), err);
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        const char *id = db_text(rows, 0);
        if (strcmp(db_text(rows, 1), "copying") == 0) {
            json_array_append_new(exports,
                                  json_pack("{s:s, s:s, s:s}", "instance", id, "token_sha256",
                                            db_text(rows, 2), "clone", id));
            continue;
        }
        json_array_append_new(
            items, json_pack("{s:s, s:s, s:I, s:s, s:s, s:[], s:I, s:I, s:I, s:I, s:I, s:s, s:s}",
                             "id", id, "desired", "released", "generation", (json_int_t)0, "image",
                             db_text(rows, 4), "mode", "gpu", "gpus", "cpu_millicores",
                             (json_int_t)0, "memory_mib", (json_int_t)0, "system_disk_gib",
                             (json_int_t)db_int(rows, 5), "data_disk_gib",
                             (json_int_t)db_int(rows, 6), "ssh_port", (json_int_t)db_int(rows, 3),
                             "root_password_crypt", "", "authorized_keys", ""));
    }
    return rc < 0 ? -1 : 0;
}

/* The copy failed: the instance goes back to its source's host, whose
 * disks were never touched. */
static int move_failed(struct store *st, const char *id, const struct move *mv, const char *message,
                       struct sl_error *err)
{
    cleanup_free char *msg =
        xasprintf("the move to host %s failed, the instance stays on host %s: %s", mv->target,
                  mv->source, message && message[0] ? message : "the copy failed");
    if (store_exec(st,
                   "UPDATE migrations SET state = 'failed', message = ?2, ended_at = ?3"
                   " WHERE seq = ?1",
                   DB_ARGS(DB_INT(mv->seq), DB_TEXT(message ? message : ""), DB_INT(sl_time_now())),
                   err) < 0 ||
        store_exec(st,
                   "UPDATE instances SET node_id = ?2, ssh_port = ?3, state_message = ?4,"
                   " updated_at = ?5 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(mv->source), DB_INT(mv->source_ssh_port),
                           DB_TEXT(msg), DB_INT(sl_time_now())),
                   err) < 0 ||
        instance_event(st, id, "migrate_failed", "stopped", "node", msg, err) < 0 ||
        instances_node_changed(st, mv->source, err) < 0 ||
        instances_node_changed(st, mv->target, err) < 0)
        return -1;
    log_info("migrations: %s: %s", id, msg);
    return 0;
}

int migrations_apply_report(struct server *srv, const char *node_id, const char *id,
                            const char *reported, json_t *copy, const char *message,
                            struct sl_error *err)
{
    struct store *st = srv->store;
    struct move mv;
    int rc;

    if ((rc = load_move(st, id, &mv, err)) <= 0)
        return rc;
    if (strcmp(mv.state, "copying") != 0 || strcmp(mv.target, node_id) != 0)
        return 0;
    if (strcmp(reported, "failed") == 0)
        return move_failed(st, id, &mv, message, err) < 0 ? -1 : 1;
    if (!copy)
        return 1; /* nothing of the move yet: the state stays */
    if (json_is_true(json_object_get(copy, "done"))) {
        if (move_release_source(st, &mv, "done", err) < 0)
            return -1;
        cleanup_free char *msg = xasprintf("moved to host %s: the disks were copied and "
                                           "verified; start it there (suanli start %s)",
                                           mv.target, id);
        if (store_exec(st, "UPDATE instances SET state_message = '' WHERE id = ?1",
                       DB_ARGS(DB_TEXT(id)), err) < 0 ||
            instance_event(st, id, "migrated", "stopped", "node", msg, err) < 0)
            return -1;
        log_info("migrations: %s copied to host %s", id, mv.target);
        return 1;
    }
    return clones_progress(st, "migrations", "seq", DB_INT(mv.seq), id, "migrate", "stopped", copy,
                           err) < 0
               ? -1
               : 1;
}

int migrations_source_report(struct server *srv, const char *node_id, const char *id,
                             const char *reported, struct sl_error *err)
{
    struct store *st = srv->store;
    struct move mv;
    int rc;

    if (strcmp(reported, "absent") != 0 || (rc = load_move(srv->store, id, &mv, err)) == 0)
        return 0;
    if (rc < 0)
        return -1;
    if (strcmp(mv.state, "releasing") != 0 || strcmp(mv.source, node_id) != 0)
        return 0;
    if (store_exec(st, "UPDATE migrations SET state = outcome, ended_at = ?2 WHERE seq = ?1",
                   DB_ARGS(DB_INT(mv.seq), DB_INT(sl_time_now())), err) < 0)
        return -1;
    log_info("migrations: %s: host %s dropped its copy", id, node_id);
    return instances_node_changed(st, node_id, err);
}

int migrations_instance_json(struct server *srv, json_t *j, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT source_node_id, target_node_id, state, outcome, reason, bytes_done, bytes_total,"
        " message, created_at FROM migrations WHERE instance_id = ?1 ORDER BY seq DESC LIMIT 1",
        DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0) {
        json_object_set_new(j, "migration", json_null());
        return 0;
    }
    /* releasing: the copy is over; the renter sees how it ended */
    const char *state = db_text(rows, 2);
    if (strcmp(state, "releasing") == 0)
        state = db_text(rows, 3);
    const char *shown = json_string_value(json_object_get(j, "state"));
    if (strcmp(state, "copying") == 0 && shown && strcmp(shown, "stopped") == 0)
        json_object_set_new(j, "state", json_string("migrating"));
    json_object_set_new(j, "migration",
                        json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:o}", "from_node",
                                  db_text(rows, 0), "to_node", db_text(rows, 1), "state", state,
                                  "reason", db_text(rows, 4), "bytes_done",
                                  (json_int_t)db_int(rows, 5), "bytes_total",
                                  (json_int_t)db_int(rows, 6), "message", db_text(rows, 7),
                                  "started_at", api_time(db_int(rows, 8))));
    return 0;
}

int migrations_node_busy(struct store *st, const char *node_id, int64_t *n, struct sl_error *err)
{
    return store_get_int(st,
                         "SELECT COUNT(*) FROM migrations WHERE state IN ('copying', 'releasing')"
                         " AND (source_node_id = ?1 OR target_node_id = ?1)",
                         DB_ARGS(DB_TEXT(node_id)), n, err);
}

/* Starts the drain's move of id; a refusal (no host with room, a plan, a
 * copy of it running) is said in an event and in stuck, not an error. */
static int drain_one(struct server *srv, const char *id, json_t *moving, json_t *stuck,
                     struct sl_error *err)
{
    struct sl_error why = SL_ERROR_INIT;

    if (migrations_create(srv, id, NULL, "host_drain", NULL, &why) == 0) {
        if (moving)
            json_array_append_new(moving, json_string(id));
        return 0;
    }
    if (why.kind == SL_E_INTERNAL) {
        *err = why;
        return -1;
    }
    if (stuck)
        json_array_append_new(stuck, json_pack("{s:s, s:s}", "id", id, "reason", why.message));
    cleanup_free char *msg = xasprintf("the host is being drained, and this instance could not "
                                       "be moved to another host now: %s",
                                       why.message);
    return instance_event(srv->store, id, "host_drain", "stopped", "host_drain", msg, err);
}

int migrations_drain(struct server *srv, const char *node_id, json_t *moving, json_t *stuck,
                     struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT id FROM instances WHERE node_id = ?1 AND state = 'stopped'"
                    " ORDER BY seq",
                    DB_ARGS(DB_TEXT(node_id)), err);
    int rc;

    if (!rows)
        return -1;
    /* collected first: each move changes the rows read */
    cleanup_json json_t *ids = json_array();
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(ids, json_string(db_text(rows, 0)));
    if (rc < 0)
        return -1;
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v)
    {
        if (drain_one(srv, json_string_value(v), moving, stuck, err) < 0)
            return -1;
    }
    return 0;
}

int migrations_after_stop(struct server *srv, const char *node_id, const char *id,
                          struct sl_error *err)
{
    int64_t wanted;

    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM nodes WHERE id = ?1 AND draining_at IS NOT NULL"
                      " AND drain_migrate = 1",
                      DB_ARGS(DB_TEXT(node_id)), &wanted, err) < 0)
        return -1;
    return wanted ? drain_one(srv, id, NULL, NULL, err) : 0;
}
