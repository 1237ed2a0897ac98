/* A fleet (nodes.h): hosts that are lost, cordoned, drained and removed,
 * and what that means to the instances on them (docs/operations.md, "A
 * fleet"; docs/design/instances.md, "Hosts lost and drained"). */
#include "nodes.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "billing.h"
#include "instance-states.h"
#include "instances.h"
#include "migrations.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int64_t lost_after(const struct server_config *cfg)
{
    return cfg->node_lost_after > cfg->node_offline_after ? cfg->node_lost_after
                                                          : cfg->node_offline_after;
}

enum node_condition nodes_condition(const struct server_config *cfg, int64_t last_heartbeat,
                                    int64_t now)
{
    if (last_heartbeat <= 0)
        return NODE_OFFLINE;
    if (now - last_heartbeat >= lost_after(cfg))
        return NODE_LOST;
    return now - last_heartbeat < cfg->node_offline_after ? NODE_ONLINE : NODE_OFFLINE;
}

const char *nodes_condition_name(enum node_condition c)
{
    static const char *const names[] = {
        [NODE_ONLINE] = "online", [NODE_OFFLINE] = "offline", [NODE_LOST] = "lost"
    };
    return (unsigned)c < ARRAY_SIZE(names) ? names[c] : "offline";
}

int nodes_status(struct server *srv, const char *node_id, struct node_status *ns,
                 struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT last_heartbeat, cordoned_at, draining_at, cordon_reason FROM nodes"
                    " WHERE id = ?1 AND removed_at IS NULL",
                    DB_ARGS(DB_TEXT(node_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_node",
                       "no node '%s': list them with suanli admin node ls", node_id);
    memset(ns, 0, sizeof(*ns));
    ns->last_heartbeat = db_null(rows, 0) ? 0 : db_int(rows, 0);
    ns->condition = nodes_condition(&srv->cfg, ns->last_heartbeat, sl_time_now());
    ns->cordoned = !db_null(rows, 1);
    ns->draining = !db_null(rows, 2);
    snprintf(ns->reason, sizeof(ns->reason), "%s", db_text(rows, 3));
    return 0;
}

const char *nodes_start_refusal(const struct node_status *ns, bool holds_gpus, bool nogpu)
{
    if (ns->condition == NODE_LOST)
        return "host_lost";
    /* a plan's GPUs are its own to the end: neither mark takes them */
    if (holds_gpus)
        return NULL;
    if (ns->draining)
        return "host_unavailable";
    /* no-GPU mode places nothing on the host's GPUs: a renter reaches their
     * data that way while the host takes no new work */
    if (ns->cordoned && !nogpu)
        return "host_unavailable";
    return NULL;
}

/* " (REASON)" when the operator gave one. */
static char *reason_text(const struct node_status *ns)
{
    return ns->reason[0] ? xasprintf(" (%s)", ns->reason) : xstrdup("");
}

int nodes_check_start(struct server *srv, const char *instance_id, const char *node_id,
                      bool holds_gpus, bool nogpu, struct sl_error *err)
{
    struct node_status ns;

    if (nodes_status(srv, node_id, &ns, err) < 0)
        return -1;
    const char *code = nodes_start_refusal(&ns, holds_gpus, nogpu);
    if (!code)
        return 0;
    cleanup_free char *why = reason_text(&ns);
    if (ns.condition == NODE_LOST) {
        char since[SL_TIME_FORMAT_MAX];
        return sl_fail(err, SL_E_CONFLICT, code,
                       "the host of instance '%s' has not reported since %s: nothing starts "
                       "there until it is back. Ways out: wait (the instance keeps its state and "
                       "nothing is billed meanwhile), or release it (suanli release %s)",
                       instance_id, sl_time_format(ns.last_heartbeat, since), instance_id);
    }
    if (ns.draining)
        return sl_fail(err, SL_E_CONFLICT, code,
                       "the host of instance '%s' is being drained for maintenance%s: nothing "
                       "starts there until the operator reopens it; its disks stay there. Ways "
                       "out: move it to another host and start it there (suanli migrate %s), "
                       "copy it to one (suanli clone %s), wait for the host to reopen, or "
                       "release it (suanli release %s)",
                       instance_id, why, instance_id, instance_id, instance_id);
    return sl_fail(err, SL_E_CONFLICT, code,
                   "the host of instance '%s' takes no new work%s: its GPUs cannot be given to "
                   "a start now. Ways out: start it in no-GPU mode to reach your data (suanli "
                   "start --no-gpu %s), move it to another host (suanli migrate %s) or copy "
                   "it to one (suanli clone %s), wait for the host to reopen, or release it "
                   "(suanli release %s)",
                   instance_id, why, instance_id, instance_id, instance_id, instance_id);
}

int nodes_check_placement(struct server *srv, const char *node_id, struct sl_error *err)
{
    struct node_status ns;

    if (nodes_status(srv, node_id, &ns, err) < 0)
        return -1;
    if (!ns.cordoned)
        return 0;
    cleanup_free char *why = reason_text(&ns);
    return sl_fail(err, SL_E_CONFLICT, "host_unavailable",
                   "host '%s' takes no new instances%s: the operator closed it for maintenance. "
                   "Leave out --host (the host field) to place it anywhere, or pick another "
                   "host with suanli market",
                   node_id, why);
}

/* The node's row, not removed: 404 otherwise. */
static int node_exists(struct store *st, const char *node_id, struct sl_error *err)
{
    int64_t n;

    if (store_get_int(st, "SELECT COUNT(*) FROM nodes WHERE id = ?1 AND removed_at IS NULL",
                      DB_ARGS(DB_TEXT(node_id)), &n, err) < 0)
        return -1;
    return n ? 0
             : sl_fail(err, SL_E_NOT_FOUND, "no_such_node",
                       "no node '%s': list them with suanli admin node ls", node_id);
}

int nodes_cordon(struct server *srv, const char *node_id, const char *reason, struct sl_error *err)
{
    if (node_exists(srv->store, node_id, err) < 0 ||
        store_exec(srv->store,
                   "UPDATE nodes SET cordoned_at = COALESCE(cordoned_at, ?2),"
                   " cordon_reason = COALESCE(?3, cordon_reason) WHERE id = ?1",
                   DB_ARGS(DB_TEXT(node_id), DB_INT(sl_time_now()), DB_TEXT(reason)), err) < 0)
        return -1;
    log_info("nodes: %s cordoned%s%s", node_id, reason ? ": " : "", reason ? reason : "");
    return 0;
}

int nodes_uncordon(struct server *srv, const char *node_id, struct sl_error *err)
{
    if (node_exists(srv->store, node_id, err) < 0 ||
        store_exec(srv->store,
                   "UPDATE nodes SET cordoned_at = NULL, draining_at = NULL, cordon_reason = '',"
                   " drain_migrate = 0 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(node_id)), err) < 0)
        return -1;
    log_info("nodes: %s uncordoned", node_id);
    return 0;
}

/* An instance on a host: what the fleet operations need of it. */
struct hosted {
    char id[SL_ID_MAX];
    char state[16];
    char plan[16];
};

/* The instances of node_id not released, oldest first: a new array. */
static struct hosted *hosted_load(struct store *st, const char *node_id, size_t *n,
                                  struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT id, state, plan FROM instances WHERE node_id = ?1"
                    " AND state != 'released' ORDER BY seq",
                    DB_ARGS(DB_TEXT(node_id)), err);
    cleanup_free struct hosted *out = xcalloc(1, sizeof(*out));
    int rc;

    *n = 0;
    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1) {
        out = xrealloc(out, (*n + 1) * sizeof(*out));
        struct hosted *h = &out[(*n)++];
        snprintf(h->id, sizeof(h->id), "%s", db_text(rows, 0));
        snprintf(h->state, sizeof(h->state), "%s", db_text(rows, 1));
        snprintf(h->plan, sizeof(h->plan), "%s", db_text(rows, 2));
    }
    return rc < 0 ? NULL : TAKE_PTR(out);
}

int nodes_drain(struct server *srv, const char *node_id, const char *reason, bool migrate,
                json_t **stopped, json_t **kept, json_t **moving, json_t **stuck,
                struct sl_error *err)
{
    struct store *st = srv->store;
    cleanup_json json_t *stops = json_array(), *keeps = json_array(), *moves = json_array(),
                        *stucks = json_array();
    int64_t first;
    size_t n;

    if (node_exists(st, node_id, err) < 0 ||
        store_get_int(st, "SELECT COUNT(*) FROM nodes WHERE id = ?1 AND draining_at IS NULL",
                      DB_ARGS(DB_TEXT(node_id)), &first, err) < 0 ||
        nodes_cordon(srv, node_id, reason, err) < 0 ||
        store_exec(st,
                   "UPDATE nodes SET draining_at = COALESCE(draining_at, ?2),"
                   " drain_migrate = CASE WHEN ?3 > drain_migrate THEN ?3 ELSE drain_migrate END"
                   " WHERE id = ?1",
                   DB_ARGS(DB_TEXT(node_id), DB_INT(sl_time_now()), DB_INT(migrate)), err) < 0)
        return -1;
    struct node_status ns;
    if (nodes_status(srv, node_id, &ns, err) < 0)
        return -1;
    cleanup_free char *why = reason_text(&ns);
    cleanup_free struct hosted *hs = hosted_load(st, node_id, &n, err);
    if (!hs)
        return -1;
    for (size_t i = 0; i < n; i++) {
        struct hosted *h = &hs[i];
        int state = instance_state_parse(h->state);
        bool prepaid;
        if (state < 0 || instance_state_gone(state))
            continue;
        if (billing_plan_active(st, h->id, &prepaid, err) < 0)
            return -1;
        cleanup_free char *notice = NULL;
        if (prepaid) {
            if (instance_state_up(state))
                json_array_append_new(keeps, json_string(h->id));
            if (!first)
                continue;
            notice = xasprintf("the host is being drained for maintenance%s: this instance's "
                               "plan runs to its end and is not renewed on this host; after it "
                               "the instance stops and cannot start there until the operator "
                               "reopens the host",
                               why);
        } else if (instance_verb_check(VERB_STOP, state) == VERB_APPLIES) {
            if (instance_stop(srv, h->id, "host_drain", err) < 0)
                return -1;
            json_array_append_new(stops, json_string(h->id));
            notice = xasprintf("the host is being drained for maintenance%s: the instance was "
                               "stopped (its disks stay on the host) and cannot start there "
                               "until the operator reopens it. Ways out: move it to another "
                               "host and start it there (suanli migrate %s), copy it to one "
                               "(suanli clone %s), wait, or release it (suanli release %s)",
                               why, h->id, h->id, h->id);
        } else {
            if (!first)
                continue;
            notice = xasprintf("the host is being drained for maintenance%s: the instance "
                               "cannot start there until the operator reopens it; its disks "
                               "stay on the host. Ways out: wait, or release it (suanli "
                               "release %s)",
                               why, h->id);
        }
        if (instance_event(st, h->id, "host_drain", h->state, "host_drain", notice, err) < 0)
            return -1;
    }
    /* the stopped ones move now; those stopping move once their host says
     * they stopped (migrations_after_stop) */
    if (migrate && migrations_drain(srv, node_id, moves, stucks, err) < 0)
        return -1;
    log_info("nodes: %s draining: %zu instances stopped, %zu on a plan left running, %zu moving",
             node_id, json_array_size(stops), json_array_size(keeps), json_array_size(moves));
    if (moving)
        *moving = TAKE_PTR(moves);
    if (stuck)
        *stuck = TAKE_PTR(stucks);
    if (stopped)
        *stopped = TAKE_PTR(stops);
    if (kept)
        *kept = TAKE_PTR(keeps);
    return 0;
}

int nodes_remove(struct server *srv, const char *node_id, struct sl_error *err)
{
    struct store *st = srv->store;
    struct node_status ns;
    size_t n;

    if (nodes_status(srv, node_id, &ns, err) < 0)
        return -1;
    cleanup_free struct hosted *hs = hosted_load(st, node_id, &n, err);
    if (!hs)
        return -1;
    cleanup_free char *left = xstrdup("");
    size_t n_left = 0;
    for (size_t i = 0; i < n; i++) {
        if (ns.condition == NODE_LOST && strcmp(hs[i].state, "releasing") == 0)
            continue;
        if (n_left < 10) {
            char *more = xasprintf("%s%s%s (%s, %s)", left, n_left ? ", " : "", hs[i].id,
                                   hs[i].state, hs[i].plan);
            free(left);
            left = more;
        }
        n_left++;
    }
    int64_t moves;
    if (migrations_node_busy(st, node_id, &moves, err) < 0)
        return -1;
    if (moves && !n_left)
        return sl_fail(err, SL_E_CONFLICT, "node_not_empty",
                       "node '%s' still copies the disks of %" PRId64 " moved instance%s, or "
                       "has yet to delete them: remove it once the moves are done (suanli "
                       "show ID of each)",
                       node_id, moves, moves == 1 ? "" : "s");
    if (n_left)
        return sl_fail(err, SL_E_CONFLICT, "node_not_empty",
                       "node '%s' still holds %zu instance%s not released: %s%s. Drain it "
                       "(suanli admin node drain %s) and remove it once its renters have "
                       "released them",
                       node_id, n_left, n_left == 1 ? "" : "s", left, n_left > 10 ? ", ..." : "",
                       node_id);
    /* on a lost host, what renters released is finished: it is unreachable */
    int64_t now = sl_time_now();
    for (size_t i = 0; i < n; i++) {
        if (store_exec(st,
                       "UPDATE instances SET state = 'released', updated_at = ?2,"
                       " state_message = 'released with its host, which was lost and removed'"
                       " WHERE id = ?1",
                       DB_ARGS(DB_TEXT(hs[i].id), DB_INT(now)), err) < 0 ||
            instance_free_gpus(st, hs[i].id, err) < 0 ||
            instance_event(st, hs[i].id, "released", "released", "host_removed",
                           "the host was lost and the operator removed it", err) < 0)
            return -1;
    }
    /* a token hash no token has (a hash is hex): the agent's token is dead */
    if (store_exec(st, "DELETE FROM gpus WHERE node_id = ?1", DB_ARGS(DB_TEXT(node_id)), err) < 0 ||
        store_exec(st, "DELETE FROM node_images WHERE node_id = ?1", DB_ARGS(DB_TEXT(node_id)),
                   err) < 0 ||
        store_exec(st, "DELETE FROM node_datasets WHERE node_id = ?1", DB_ARGS(DB_TEXT(node_id)),
                   err) < 0 ||
        store_exec(st,
                   "UPDATE nodes SET removed_at = ?2, token_hash = 'removed:' || id,"
                   " cordoned_at = COALESCE(cordoned_at, ?2) WHERE id = ?1",
                   DB_ARGS(DB_TEXT(node_id), DB_INT(now)), err) < 0)
        return -1;
    log_info("nodes: %s removed", node_id);
    return 0;
}

int nodes_instance_host_draining(struct store *st, const char *instance_id, bool *draining,
                                 struct sl_error *err)
{
    int64_t n;

    if (store_get_int(st,
                      "SELECT COUNT(*) FROM instances i JOIN nodes n ON n.id = i.node_id"
                      " WHERE i.id = ?1 AND n.draining_at IS NOT NULL",
                      DB_ARGS(DB_TEXT(instance_id)), &n, err) < 0)
        return -1;
    *draining = n > 0;
    return 0;
}

/* message, then notice: one sentence after the other. */
static void set_message(json_t *j, const char *notice)
{
    const char *was = json_string_value(json_object_get(j, "state_message"));

    if (was && *was) {
        cleanup_free char *both = xasprintf("%s; %s", was, notice);
        json_object_set_new(j, "state_message", json_string(both));
    } else {
        json_object_set_new(j, "state_message", json_string(notice));
    }
}

int nodes_instance_view(struct server *srv, json_t *j, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(j, "id"));
    const char *node = json_string_value(json_object_get(j, "node_id"));
    const char *plan = json_string_value(json_object_get(j, "plan"));
    int state = instance_state_parse(json_string_value(json_object_get(j, "state")));
    struct node_status ns;
    struct sl_error ignored = SL_ERROR_INIT;

    if (!id || !node || state < 0 || instance_state_gone(state))
        return 0;
    /* a removed host holds no instance that is not released */
    if (nodes_status(srv, node, &ns, &ignored) < 0)
        return ignored.kind == SL_E_NOT_FOUND ? 0 : (*err = ignored, -1);
    cleanup_free char *why = reason_text(&ns);
    cleanup_free char *notice = NULL;
    if (ns.condition == NODE_LOST) {
        char since[SL_TIME_FORMAT_MAX];
        notice = xasprintf(
            "its host has not reported since %s (the instance was %s; its disks are on that "
            "host) and nothing is billed while it is silent. Ways out: wait (when the host "
            "reports again the instance returns to its state), or release it (suanli release "
            "%s)",
            sl_time_format(ns.last_heartbeat, since), instance_state_name(state), id);
        json_object_set_new(j, "state", json_string("host_lost"));
        json_object_set_new(j, "state_message", json_string(notice));
        return 0;
    }
    if (ns.draining)
        notice = plan && strcmp(plan, "payg") != 0
                     ? xasprintf("the host is being drained for maintenance%s: this instance's "
                                 "plan runs to its end and is not renewed here",
                                 why)
                     : xasprintf("the host is being drained for maintenance%s: nothing starts "
                                 "there until the operator reopens it. Ways out: wait, or "
                                 "release it (suanli release %s)",
                                 why, id);
    else if (ns.cordoned && !instance_state_up(state) && !(plan && strcmp(plan, "payg") != 0))
        notice = xasprintf("the host takes no new work%s: a start with GPUs waits until it "
                           "reopens (a no-GPU start reaches your data: suanli start --no-gpu %s)",
                           why, id);
    if (notice)
        set_message(j, notice);
    return 0;
}

int nodes_watch(struct server *srv, int64_t *lost, struct sl_error *err)
{
    struct store *st = srv->store;
    int64_t now = sl_time_now();
    cleanup_json json_t *found = json_array();
    json_t *v;
    size_t i;

    *lost = 0;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT id, last_heartbeat FROM nodes WHERE removed_at IS NULL"
                        " AND lost_at IS NULL AND last_heartbeat IS NOT NULL"
                        " AND last_heartbeat <= ?1",
                        DB_ARGS(DB_INT(now - lost_after(&srv->cfg))), err);
        int rc;
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1)
            json_array_append_new(
                found, json_pack("[s, I]", db_text(rows, 0), (json_int_t)db_int(rows, 1)));
        if (rc < 0)
            return -1;
    }
    json_array_foreach(found, i, v)
    {
        const char *node = json_string_value(json_array_get(v, 0));
        int64_t last = json_integer_value(json_array_get(v, 1));
        char since[SL_TIME_FORMAT_MAX];
        cleanup_free char *message =
            xasprintf("the host has not reported since %s: the instance shows host_lost. "
                      "Nothing is billed while it is silent; when the host reports again the "
                      "instance returns to its state. Ways out: wait, or release it (suanli "
                      "release ",
                      sl_time_format(last, since));
        cleanup_tx struct store *tx = NULL;
        if (store_begin(st, err) < 0)
            return -1;
        tx = st;
        /* the heartbeat that brings it back clears lost_at: once per loss */
        int changed = store_exec(st,
                                 "UPDATE nodes SET lost_at = ?2 WHERE id = ?1 AND lost_at IS NULL"
                                 " AND last_heartbeat = ?3",
                                 DB_ARGS(DB_TEXT(node), DB_INT(now), DB_INT(last)), err);
        if (changed < 0 ||
            (changed > 0 &&
             store_exec(st,
                        "INSERT INTO events (instance_id, user_id, kind, state, reason, message,"
                        " created_at) SELECT id, user_id, 'host_lost', state, 'host_lost',"
                        " ?2 || id || ')', ?3"
                        " FROM instances WHERE node_id = ?1 AND state NOT IN ('released',"
                        " 'releasing')",
                        DB_ARGS(DB_TEXT(node), DB_TEXT(message), DB_INT(now)), err) < 0) ||
            store_commit(st, err) < 0)
            return -1;
        tx = NULL;
        if (changed > 0) {
            log_warn("nodes: %s lost: silent since %s", node, since);
            (*lost)++;
        }
    }
    return 0;
}
