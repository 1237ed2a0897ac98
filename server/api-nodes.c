/* Hosts: join tokens and the node list for admins; enrollment and
 * heartbeats for the agents (DESIGN.md section 1). */
#include "clones.h"
#include "datasets.h"
#include "hints.h"
#include "instance-metrics.h"
#include "instances.h"
#include "nodes.h"
#include "routes.h"
#include "stops.h"
#include "storage.h"
#include "terminal.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/timeconst.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_admin_join_tokens_create(struct api_request *req, struct api_response *res,
                                 struct sl_error *err)
{
    const char *region = NULL;
    int64_t hours = 0, max_uses = 1;
    const struct sl_json_field fields[] = {
        { "region", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 32, .out = &region },
        { "expires_in_hours", SL_JSON_INT, .min = 1, .max = 24 * 365, .out = &hours },
        { "max_uses", SL_JSON_INT, .min = 1, .max = 10000, .out = &max_uses },
    };
    char id[SL_ID_MAX], secret[SL_TOKEN_MAX];
    int64_t ttl;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    ttl = hours ? hours * SL_SEC_PER_HOUR : req->srv->cfg.join_token_ttl;
    if (nodes_join_token_create(req->srv, region, ttl, max_uses, req->caller.user_id, id, secret,
                                err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:s, s:o, s:I, s:I}", "id", id, "token", secret, "region",
                        region, "expires_at", api_time(sl_time_now() + ttl), "uses", (json_int_t)0,
                        "max_uses", (json_int_t)max_uses));
    return 0;
}

static json_t *join_token_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    /* max_uses null: a token made before uses were counted, reusable until
     * it expires */
    return json_pack("{s:s, s:s, s:o, s:o, s:I, s:o}", "id", db_text(rows, 1), "region",
                     db_text(rows, 2), "created_at", api_time(db_int(rows, 3)), "expires_at",
                     api_time(db_int(rows, 4)), "uses", (json_int_t)db_int(rows, 5), "max_uses",
                     db_null(rows, 6) ? json_null() : json_integer(db_int(rows, 6)));
}

int api_admin_join_tokens_list(struct api_request *req, struct api_response *res,
                               struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT seq, id, region_id, created_at, expires_at, uses, max_uses"
                    " FROM join_tokens"
                    " WHERE seq > ?1 AND expires_at > ?2 ORDER BY seq LIMIT ?3",
                    DB_ARGS(DB_INT(after), DB_INT(sl_time_now()), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, join_token_json, NULL, limit, err) : -1;
}

int api_admin_join_tokens_delete(struct api_request *req, struct api_response *res,
                                 struct sl_error *err)
{
    int n = store_exec(req->srv->store, "DELETE FROM join_tokens WHERE id = ?1",
                       DB_ARGS(DB_TEXT(req->params[0])), err);
    if (n < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_join_token", "no join token '%s'",
                       req->params[0]);
    api_reply(res, 204, NULL);
    return 0;
}

struct node_rows_ctx {
    struct server *srv;
    struct sl_error *err;
    bool failed;
};

static json_t *node_row_json(struct db_rows *rows, void *p)
{
    struct node_rows_ctx *ctx = p;
    json_t *j = nodes_json(ctx->srv, db_text(rows, 1), ctx->err);

    if (!j) {
        ctx->failed = true;
        return json_null();
    }
    return j;
}

int api_admin_nodes_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct node_rows_ctx ctx = { req->srv, err, false };
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, id FROM nodes WHERE seq > ?1 AND removed_at IS NULL ORDER BY seq LIMIT ?2",
        DB_ARGS(DB_INT(after), DB_INT(limit)), err);
    if (!rows || api_reply_rows(res, rows, node_row_json, &ctx, limit, err) < 0)
        return -1;
    return ctx.failed ? -1 : 0;
}

int api_admin_nodes_get(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *j = nodes_json(req->srv, req->params[0], err);

    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

/* The operator's reason for a cordon or a drain, shown to the host's
 * renters: one line (NULL when not given). */
static int cordon_reason(struct api_request *req, const char **reason, struct sl_error *err)
{
    const struct sl_json_field fields[] = {
        { "reason", SL_JSON_STRING, .min_len = 1, .max_len = 200, .out = reason },
    };

    *reason = NULL;
    return api_body_fields(req, fields, ARRAY_SIZE(fields), err);
}

static int reply_node(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *j = nodes_json(req->srv, req->params[0], err);

    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

int api_admin_nodes_cordon(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *reason;

    if (cordon_reason(req, &reason, err) < 0 ||
        nodes_cordon(req->srv, req->params[0], reason, err) < 0)
        return -1;
    return reply_node(req, res, err);
}

int api_admin_nodes_drain(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *reason = NULL;
    bool migrate = false;
    const struct sl_json_field fields[] = {
        { "reason", SL_JSON_STRING, .min_len = 1, .max_len = 200, .out = &reason },
        { "migrate", SL_JSON_BOOL, .out = &migrate },
    };
    json_t *stopped = NULL, *kept = NULL, *moving = NULL, *stuck = NULL;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        nodes_drain(req->srv, req->params[0], reason, migrate, &stopped, &kept, &moving, &stuck,
                    err) < 0)
        return -1;
    json_t *node = nodes_json(req->srv, req->params[0], err);
    if (!node) {
        json_decref(stopped);
        json_decref(kept);
        json_decref(moving);
        json_decref(stuck);
        return -1;
    }
    api_reply(res, 200,
              json_pack("{s:o, s:o, s:o, s:o, s:o}", "node", node, "stopped", stopped,
                        "running_on_plan", kept, "migrating", moving, "not_migrated", stuck));
    return 0;
}

int api_admin_nodes_uncordon(struct api_request *req, struct api_response *res,
                             struct sl_error *err)
{
    if (api_body_fields(req, NULL, 0, err) < 0 || nodes_uncordon(req->srv, req->params[0], err) < 0)
        return -1;
    return reply_node(req, res, err);
}

int api_admin_nodes_remove(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    if (nodes_remove(req->srv, req->params[0], err) < 0)
        return -1;
    api_reply(res, 204, NULL);
    return 0;
}

int api_nodes_enroll(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *join = NULL, *hostname = NULL, *address = NULL;
    json_t *inventory = NULL;
    const struct sl_json_field fields[] = {
        { "join_token", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 128,
          .out = &join },
        { "hostname", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 253,
          .out = &hostname },
        { "address", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 253,
          .out = &address },
        { "inventory", SL_JSON_OBJECT, .required = true, .out = &inventory },
    };
    char node_id[SL_ID_MAX], token[SL_TOKEN_MAX];

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        nodes_enroll(req->srv, join, hostname, address, inventory, node_id, token, err) < 0)
        return -1;
    json_t *node = nodes_json(req->srv, node_id, err);
    if (!node)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:I, s:o}", "node_id", node_id, "node_token", token,
                        "heartbeat_interval_seconds",
                        (json_int_t)req->srv->cfg.node_heartbeat_interval, "node", node));
    return 0;
}

/* The metrics of the node's instances; an entry about an instance that is
 * not the node's is skipped (and logged), never stored. At most once a
 * minute, every instance's rows past their keep go too. */
static int heartbeat_metrics(struct api_request *req, json_t *metrics, struct sl_error *err)
{
    static _Atomic int64_t last_sweep;
    struct metrics_policy p;
    int64_t now = sl_time_now(), swept = atomic_load(&last_sweep);
    size_t skipped;

    api_metrics_policy(req->srv, &p);
    if (instance_metrics_apply(req->srv->store, &p, req->params[0], metrics, now, &skipped, err) <
        0)
        return -1;
    if (skipped)
        log_warn("metrics: node %s sent %zu entries suanlid skipped (another node's instance, "
                 "a released one, or malformed)",
                 req->params[0], skipped);
    /* what the newest samples say (hints.h): of this node's instances only */
    size_t i;
    json_t *e;
    json_array_foreach(metrics, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (id && hints_observe_latest(req->srv->store, id, req->params[0], req->srv->cfg.currency,
                                       err) < 0)
            return -1;
    }
    if (now - swept >= 60 && atomic_compare_exchange_strong(&last_sweep, &swept, now))
        return instance_metrics_sweep(req->srv->store, &p, now, err) < 0 ||
                       hints_sweep(req->srv->store, err) < 0
                   ? -1
                   : 0;
    return 0;
}

int api_nodes_heartbeat(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *inventory = NULL, *instances = NULL, *activity = NULL, *metrics = NULL;
    int64_t revision = 0, transfer_port = 0;
    bool terminals = false;
    const struct sl_json_field fields[] = {
        { "inventory", SL_JSON_OBJECT, .required = true, .out = &inventory },
        { "revision", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &revision },
        { "instances", SL_JSON_ARRAY, .max_len = 4096, .out = &instances },
        { "activity", SL_JSON_ARRAY, .max_len = 4096, .out = &activity },
        { "images", SL_JSON_ARRAY, .max_len = 1024 },
        /* the public datasets it holds (datasets.h) */
        { "datasets", SL_JSON_ARRAY, .max_len = 1024 },
        /* the use of the file storage directories it mounts (storage.h) */
        { "storage", SL_JSON_ARRAY, .max_len = 4096 },
        /* where the node serves disk copies (clones.h); 0: it does not */
        { "transfer_port", SL_JSON_INT, .min = 0, .max = 65535, .out = &transfer_port },
        /* whether it serves the browser's terminal (terminal.h) */
        { "terminals", SL_JSON_BOOL, .out = &terminals },
        /* samples of its instances' metrics (instance-metrics.h); agents
         * before it send none */
        { "metrics", SL_JSON_ARRAY, .max_len = 4096, .out = &metrics },
    };
    int64_t desired;

    json_t *images = NULL;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        nodes_heartbeat(req->srv, req->params[0], inventory, err) < 0)
        return -1;
    if (clones_node_transfer_port(req->srv, req->params[0], transfer_port, err) < 0 ||
        terminal_node_serves(req->srv, req->params[0], terminals, err) < 0)
        return -1;
    if (instances && instances_apply_report(req->srv, req->params[0], instances, err) < 0)
        return -1;
    /* after the states: an instance that just reached running starts idle */
    if (activity && stops_apply_activity(req->srv, req->params[0], activity, err) < 0)
        return -1;
    if (metrics && heartbeat_metrics(req, metrics, err) < 0)
        return -1;
    /* how far the node has caught up, for operators */
    if (store_exec(req->srv->store, "UPDATE nodes SET reported_revision = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(req->params[0]), DB_INT(revision)), err) < 0)
        return -1;
    images = json_object_get(req->json, "images");
    if (images && nodes_apply_images(req->srv, req->params[0], images, err) < 0)
        return -1;
    json_t *datasets = json_object_get(req->json, "datasets");
    if (datasets && datasets_apply_report(req->srv->store, req->params[0], datasets, err) < 0)
        return -1;
    json_t *storage = json_object_get(req->json, "storage");
    if ((storage && storage_apply_report(req->srv->store, req->params[0], storage, err) < 0) ||
        storage_node_dirs_ensure(req->srv->store, req->params[0], err) < 0)
        return -1;
    if (store_get_int(req->srv->store, "SELECT desired_revision FROM nodes WHERE id = ?1",
                      DB_ARGS(DB_TEXT(req->params[0])), &desired, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:I, s:I}", "desired_revision", (json_int_t)desired,
                        "heartbeat_interval_seconds",
                        (json_int_t)req->srv->cfg.node_heartbeat_interval));
    return 0;
}

/* The longest ?wait= (seconds); an agent asks for 25. */
#define DESIRED_WAIT_MAX 60

/* ?after=REVISION: 304 while the node's desired revision is not past it;
 * with &wait=SECONDS the answer waits (the transport holds the connection,
 * no thread) until it is or the time is up. Without them: the state. */
int api_nodes_desired(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *after_text = api_query(req, "after"), *wait_text = api_query(req, "wait");
    int64_t after = 0, wait = 0, revision;
    char *end;

    if (after_text) {
        after = strtoll(after_text, &end, 10);
        if (!*after_text || *end || after < 0)
            return sl_fail(err, SL_E_INVALID, "invalid_after",
                           "'after' must be the revision the agent has, an integer >= 0");
    }
    if (wait_text) {
        wait = strtoll(wait_text, &end, 10);
        if (!*wait_text || *end || wait < 0 || wait > DESIRED_WAIT_MAX)
            return sl_fail(err, SL_E_INVALID, "invalid_wait", "'wait' must be seconds from 0 to %d",
                           DESIRED_WAIT_MAX);
    }
    if (after_text) {
        if (store_get_int(req->srv->store, "SELECT desired_revision FROM nodes WHERE id = ?1",
                          DB_ARGS(DB_TEXT(req->params[0])), &revision, err) < 0)
            return -1;
        if (revision <= after) {
            if (wait > 0 && req->may_wait) {
                res->wait.requested = true;
                snprintf(res->wait.node_id, sizeof(res->wait.node_id), "%s", req->params[0]);
                res->wait.after = after;
                res->wait.seconds = wait;
            }
            api_reply(res, 304, NULL);
            return 0;
        }
    }
    json_t *j = instances_desired(req->srv, req->params[0], err);

    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}
