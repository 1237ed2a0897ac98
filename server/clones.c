/* Clones: a stopped instance's disks copied agent to agent into a new
 * instance (clones.h). */
#include "clones.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "instances.h"
#include "migrations.h"
#include "secrets.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* The copy's states: copying (the export stands), done, failed, canceled
 * (the clone was released before its copy ended). */
#define CLONE_COPYING "copying"

static char *token_context(const char *id)
{
    return xasprintf("clone_token:%s", id);
}

int clones_load_instance(struct store *st, const char *id, struct copy_source *s,
                         struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT i.user_id, i.node_id, i.gpu_model_id, i.state, i.image, i.gpus,"
        " i.system_disk_gib, i.data_disk_gib, COALESCE(n.last_heartbeat, 0), n.transfer_port,"
        " n.hostname, i.region_id, i.ssh_port"
        " FROM instances i JOIN nodes n ON n.id = i.node_id WHERE i.id = ?1",
        DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                       "no instance '%s': list yours with suanli ls", id);
    snprintf(s->user_id, sizeof(s->user_id), "%s", db_text(rows, 0));
    snprintf(s->node_id, sizeof(s->node_id), "%s", db_text(rows, 1));
    snprintf(s->model_id, sizeof(s->model_id), "%s", db_text(rows, 2));
    snprintf(s->state, sizeof(s->state), "%s", db_text(rows, 3));
    snprintf(s->image, sizeof(s->image), "%s", db_text(rows, 4));
    s->gpus = db_int(rows, 5);
    s->system_disk_gib = db_int(rows, 6);
    s->data_disk_gib = db_int(rows, 7);
    s->last_heartbeat = db_int(rows, 8);
    s->transfer_port = db_int(rows, 9);
    snprintf(s->hostname, sizeof(s->hostname), "%s", db_text(rows, 10));
    snprintf(s->region, sizeof(s->region), "%s", db_text(rows, 11));
    s->ssh_port = db_int(rows, 12);
    return 0;
}

int clones_check_source_host(struct server *srv, const char *id, const struct copy_source *s,
                             struct sl_error *err)
{
    if (s->last_heartbeat <= sl_time_now() - srv->cfg.node_offline_after)
        return sl_fail(err, SL_E_CONFLICT, "host_unavailable",
                       "the host of instance '%s' (%s) is offline: its disks cannot be copied "
                       "now; try again when it is back",
                       id, s->hostname);
    if (s->transfer_port <= 0)
        return sl_fail(err, SL_E_CONFLICT, "host_unavailable",
                       "the host of instance '%s' (%s) does not serve disk copies (its agent is "
                       "older, or its transfer.port is 0): ask the operator",
                       id, s->hostname);
    return 0;
}

/* The clone copying from source_id now, into target (SL_ID_MAX): 1 found,
 * 0 none. */
static int copying_from(struct store *st, const char *source_id, char *target, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT instance_id FROM clones WHERE source_id = ?1 AND state = 'copying'"
                    " ORDER BY created_at LIMIT 1",
                    DB_ARGS(DB_TEXT(source_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc)
        snprintf(target, SL_ID_MAX, "%s", db_text(rows, 0));
    return rc;
}

int clones_create(struct server *srv, const char *source_id, const char *user_id,
                  const struct clone_request *rq, char *id, struct sl_error *err)
{
    struct store *st = srv->store;
    struct copy_source s;
    char busy[SL_ID_MAX], token[SL_TOKEN_MAX], hash[SL_HASH_HEX_MAX];
    int rc;

    if (clones_load_instance(st, source_id, &s, err) < 0)
        return -1;
    if (strcmp(s.state, "stopped") != 0)
        return sl_fail(err, SL_E_CONFLICT, "instance_not_stopped",
                       "instance '%s' is %s: only a stopped instance is cloned (its disks must "
                       "not change while they are copied); stop it first (suanli stop %s), "
                       "then clone it",
                       source_id, s.state, source_id);
    if (migrations_check_idle(st, source_id, err) < 0 ||
        (rc = copying_from(st, source_id, busy, err)) < 0)
        return -1;
    if (rc)
        return sl_fail(err, SL_E_CONFLICT, "being_cloned",
                       "instance '%s' is being cloned to '%s' now: wait for that copy to finish "
                       "(suanli show %s), then clone it again",
                       source_id, busy, busy);
    if (clones_check_source_host(srv, source_id, &s, err) < 0)
        return -1;
    struct instance_request ir = {
        .user_id = user_id,
        .name = rq->name,
        .host = rq->host,
        .gpu_model = rq->gpu_model ? rq->gpu_model : s.model_id,
        .gpus = rq->gpus > 0 ? rq->gpus : s.gpus,
        .image = s.image,
        .data_disk_gib = s.data_disk_gib,
    };
    if (sched_place(srv, &ir, id, err) < 0)
        return -1;
    sl_token_new(token);
    sl_sha256_hex(token, strlen(token), hash);
    cleanup_free char *context = token_context(id);
    cleanup_free char *sealed = secrets_seal(srv, context, token);
    cleanup_free char *msg =
        xasprintf("copying the disks of %s from host %s", source_id, s.hostname);
    cleanup_free char *note = xasprintf("being cloned to %s", id);
    int64_t now = sl_time_now();
    /* the disks are copies: the clone's system disk is the source's size.
     * It is recorded `creating` (the states table's CHECK holds); the view
     * shows `copying` while the copy runs (clones_instance_json). */
    if (store_exec(st,
                   "UPDATE instances SET state_message = ?2, system_disk_gib = ?3 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(msg), DB_INT(s.system_disk_gib)), err) < 0 ||
        store_exec(st,
                   "INSERT INTO clones (instance_id, source_id, source_node_id, token_hash, token,"
                   " state, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'copying', ?6)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(source_id), DB_TEXT(s.node_id), DB_TEXT(hash),
                           DB_TEXT(sealed), DB_INT(now)),
                   err) < 0 ||
        instance_event(st, id, "copying", "creating", "user", msg, err) < 0 ||
        instance_event(st, source_id, "clone", "stopped", "user", note, err) < 0 ||
        instances_node_changed(st, s.node_id, err) < 0)
        return -1;
    sodium_memzero(token, sizeof(token));
    log_info("clones: %s from %s (host %s)", id, source_id, s.node_id);
    return 0;
}

/* The copy of a clone: its state, or "" when id is no clone. */
static int clone_state(struct store *st, const char *id, char *state, size_t size,
                       char *source_node, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT state, source_node_id FROM clones WHERE instance_id = ?1",
                    DB_ARGS(DB_TEXT(id)), err);
    int rc;

    state[0] = '\0';
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc) {
        snprintf(state, size, "%s", db_text(rows, 0));
        if (source_node)
            snprintf(source_node, SL_ID_MAX, "%s", db_text(rows, 1));
    }
    return 0;
}

/* Ends a clone's copy (state: done, failed, canceled): its export goes from
 * the source's host. */
static int clone_end(struct store *st, const char *id, const char *state, const char *message,
                     struct sl_error *err)
{
    char now_state[32], source_node[SL_ID_MAX];

    if (clone_state(st, id, now_state, sizeof(now_state), source_node, err) < 0)
        return -1;
    if (strcmp(now_state, CLONE_COPYING) != 0)
        return 0;
    if (store_exec(st,
                   "UPDATE clones SET state = ?2, message = ?3, ended_at = ?4,"
                   " bytes_done = CASE WHEN ?2 = 'done' THEN bytes_total ELSE bytes_done END"
                   " WHERE instance_id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(state), DB_TEXT(message ? message : ""),
                           DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    log_info("clones: copy into %s %s", id, state);
    return instances_node_changed(st, source_node, err);
}

int clones_verb_check(struct server *srv, const char *id, enum instance_verb verb,
                      struct sl_error *err)
{
    struct store *st = srv->store;
    char target[SL_ID_MAX], state[32];
    int rc;

    if (verb != VERB_START && verb != VERB_RELEASE)
        return 0;
    if ((rc = copying_from(st, id, target, err)) < 0)
        return -1;
    if (rc)
        return sl_fail(err, SL_E_CONFLICT, "being_cloned",
                       "instance '%s' is being cloned: its disks are being copied to '%s'. Wait "
                       "for the copy to finish (suanli show %s), or release %s to stop it",
                       id, target, target, target);
    if (clone_state(st, id, state, sizeof(state), NULL, err) < 0)
        return -1;
    if (verb == VERB_RELEASE)
        return strcmp(state, CLONE_COPYING) == 0 ? clone_end(st, id, "canceled", NULL, err) : 0;
    /* a clone whose copy never finished has no disks worth starting */
    if (strcmp(state, "failed") == 0 || strcmp(state, "canceled") == 0)
        return sl_fail(err, SL_E_CONFLICT, "copy_failed",
                       "instance '%s' is a clone whose copy failed: it has no disks to start. "
                       "Release it (suanli release %s) and clone the source again",
                       id, id);
    return 0;
}

void clones_start_hint(struct server *srv, const char *id, struct sl_error *err)
{
    struct sl_error e = SL_ERROR_INIT;
    int64_t cutoff = sl_time_now() - srv->cfg.node_offline_after;
    bool gpus = strcmp(err->code, "gpus_unavailable") == 0;

    if (!gpus && strcmp(err->code, "insufficient_cpu") != 0 &&
        strcmp(err->code, "insufficient_memory") != 0)
        return;
    /* an online host, not cordoned, with the instance's GPUs free and its
     * image: the clone's placement decides for good (CPU, memory, disk) */
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT n.id, n.hostname, i.gpus, COUNT(*) FROM instances i"
        " JOIN nodes n ON n.id != i.node_id AND n.last_heartbeat > ?2"
        "  AND n.cordoned_at IS NULL AND n.removed_at IS NULL"
        " JOIN gpus g ON g.node_id = n.id AND g.gpu_model_id = i.gpu_model_id"
        "  AND g.instance_id IS NULL"
        " JOIN node_images ni ON ni.node_id = n.id AND ni.name = i.image AND ni.state = 'ready'"
        " WHERE i.id = ?1 GROUP BY n.id, n.hostname, i.gpus"
        " HAVING COUNT(*) >= i.gpus ORDER BY COUNT(*) DESC, n.id LIMIT 1",
        DB_ARGS(DB_TEXT(id), DB_INT(cutoff)), &e);
    if (!rows || db_next(rows, &e) != 1)
        return;
    const char *host = db_text(rows, 1)[0] ? db_text(rows, 1) : db_text(rows, 0);
    if (gpus) {
        sl_fail(err, SL_E_CONFLICT, "gpus_unavailable",
                "the host of instance '%s' has fewer than %" PRId64 " free GPUs now (its disks "
                "live there). Ways out: clone it to a host that has them (suanli clone %s --host "
                "%s; it must be stopped) or move it there (suanli migrate %s --host %s), start "
                "it in no-GPU mode (suanli start --no-gpu %s), or wait for GPUs to free up",
                id, db_int(rows, 2), id, host, id, host, id);
        return;
    }
    char code[sizeof(err->code)], message[sizeof(err->message)];
    snprintf(code, sizeof(code), "%s", err->code);
    snprintf(message, sizeof(message), "%s", err->message);
    sl_fail(err, SL_E_CONFLICT, code,
            "%s; or clone it to a host with room (suanli clone %s --host %s)", message, id, host);
}

json_t *clones_desired(struct server *srv, const char *node_id, json_t *items, struct sl_error *err)
{
    struct store *st = srv->store;
    size_t i;
    json_t *item;
    int rc;

    /* the clones of this host still to copy (a failed one keeps its
     * copy_from: its host must never make it empty disks instead) */
    json_array_foreach(items, i, item)
    {
        const char *id = json_string_value(json_object_get(item, "id"));
        cleanup_rows struct db_rows *rows = store_query(
            st,
            "SELECT c.source_id, c.token, c.state, n.address, n.transfer_port FROM clones c"
            " JOIN nodes n ON n.id = c.source_node_id WHERE c.instance_id = ?1"
            " AND c.state != 'done'",
            DB_ARGS(DB_TEXT(id)), err);
        if (!rows || (rc = db_next(rows, err)) < 0)
            return NULL;
        if (rc == 0)
            continue;
        cleanup_free char *context = token_context(id);
        cleanup_free char *token = secrets_open(srv, context, db_text(rows, 1), err);
        if (!token)
            return NULL;
        cleanup_free char *url = xasprintf("http://%s:%" PRId64, db_text(rows, 3), db_int(rows, 4));
        json_object_set_new(item, "copy_from",
                            json_pack("{s:s, s:s, s:s, s:b}", "url", url, "token", token,
                                      "instance", db_text(rows, 0), "failed",
                                      strcmp(db_text(rows, 2), CLONE_COPYING) != 0));
    }
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT source_id, token_hash, instance_id FROM clones"
                    " WHERE source_node_id = ?1 AND state = 'copying' ORDER BY created_at",
                    DB_ARGS(DB_TEXT(node_id)), err);
    if (!rows)
        return NULL;
    cleanup_json json_t *exports = json_array();
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(exports, json_pack("{s:s, s:s, s:s}", "instance", db_text(rows, 0),
                                                 "token_sha256", db_text(rows, 1), "clone",
                                                 db_text(rows, 2)));
    return rc < 0 ? NULL : TAKE_PTR(exports);
}

int clones_apply_report(struct server *srv, const char *id, json_t *copy, int next,
                        struct sl_error *err)
{
    struct store *st = srv->store;
    char state[32];

    if (clone_state(st, id, state, sizeof(state), NULL, err) < 0)
        return -1;
    if (strcmp(state, CLONE_COPYING) != 0)
        return 0;
    if (next == INSTANCE_RUNNING)
        return clone_end(st, id, "done", NULL, err) < 0 ||
                       instance_event(st, id, "copied", "running", "node",
                                      "the disks were copied and verified", err) < 0
                   ? -1
                   : 0;
    if (next == INSTANCE_FAILED)
        return clone_end(st, id, "failed", NULL, err);
    if (next == INSTANCE_RELEASED)
        return clone_end(st, id, "canceled", NULL, err);
    if (!copy || json_is_true(json_object_get(copy, "done")))
        return 0; /* done: the run that follows ends the copy */
    return clones_progress(st, "clones", "instance_id", DB_TEXT(id), id, "copy", "creating", copy,
                           err);
}

int clones_progress(struct store *st, const char *table, const char *key_column, struct db_arg key,
                    const char *id, const char *kind, const char *state, json_t *copy,
                    struct sl_error *err)
{
    int64_t done = 0, total = 0, step, prev;
    bool finished = false;
    const struct sl_json_field f[] = {
        { "bytes_done", SL_JSON_INT, .min = 0, .max = INT64_MAX / 4, .out = &done },
        { "bytes_total", SL_JSON_INT, .min = 0, .max = INT64_MAX / 4, .out = &total },
        { "done", SL_JSON_BOOL, .out = &finished },
    };
    if (sl_json_fields(copy, f, ARRAY_SIZE(f), err) < 0) {
        sl_error_prefix(err, "copy");
        return -1;
    }
    if (done > total)
        done = total;
    step = total > 0 ? done * 4 / total : 0; /* quarters */
    /* table and key_column are the callers' constants, never input */
    cleanup_free char *get =
        xasprintf("SELECT progress_step FROM %s WHERE %s = ?1", table, key_column);
    cleanup_free char *set = xasprintf("UPDATE %s SET bytes_done = ?2, bytes_total = ?3,"
                                       " progress_step = ?4 WHERE %s = ?1",
                                       table, key_column);
    if (store_get_int(st, get, DB_ARGS(key), &prev, err) < 0 ||
        store_exec(st, set,
                   DB_ARGS(key, DB_INT(done), DB_INT(total), DB_INT(step > prev ? step : prev)),
                   err) < 0)
        return -1;
    if (step <= prev || step >= 4)
        return 0;
    cleanup_free char *msg = xasprintf("copied %" PRId64 "%% (%" PRId64 " of %" PRId64 " MiB)",
                                       step * 25, done >> 20, total >> 20);
    return instance_event(st, id, kind, state, "node", msg, err);
}

int clones_node_transfer_port(struct server *srv, const char *node_id, int64_t port,
                              struct sl_error *err)
{
    return store_exec(srv->store,
                      "UPDATE nodes SET transfer_port = ?2 WHERE id = ?1 AND transfer_port != ?2",
                      DB_ARGS(DB_TEXT(node_id), DB_INT(port)), err) < 0
               ? -1
               : 0;
}

int clones_instance_json(struct server *srv, json_t *j, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT source_id, state, bytes_done, bytes_total, message FROM clones"
                    " WHERE instance_id = ?1",
                    DB_ARGS(DB_TEXT(id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0) {
        json_object_set_new(j, "copy", json_null());
        return 0;
    }
    /* recorded `creating`: shown as what it is doing */
    const char *state = json_string_value(json_object_get(j, "state"));
    if (state && strcmp(state, "creating") == 0 && strcmp(db_text(rows, 1), CLONE_COPYING) == 0)
        json_object_set_new(j, "state", json_string("copying"));
    json_object_set_new(j, "copy",
                        json_pack("{s:s, s:s, s:I, s:I, s:s}", "source_id", db_text(rows, 0),
                                  "state", db_text(rows, 1), "bytes_done",
                                  (json_int_t)db_int(rows, 2), "bytes_total",
                                  (json_int_t)db_int(rows, 3), "message", db_text(rows, 4)));
    return 0;
}
