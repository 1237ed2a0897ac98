/* Stops nobody clicks, through the API: what an instance learns about
 * itself and how it stops itself (asked by its node's agent, which answers
 * http://169.254.169.254/ inside: node/metadata.c), a renter's idle stop
 * settings, and the account's default idle period. Scheduled stops ride on
 * POST /v1/instances/{id}/stop (api-instances.c). */
#include "billing.h"
#include "instances.h"
#include "ledger.h"
#include "routes.h"
#include "stops.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"

#include <string.h>

/* What the instance may know about itself: who it is, its state and plan,
 * its scheduled and idle stops, and its owner's balance with how long it
 * lasts at the owner's current spend. */
static json_t *metadata_json(struct api_request *req, struct sl_error *err)
{
    const char *user_id = req->instance.user_id;
    struct store *st = req->srv->store;
    char account[LEDGER_ACCOUNT_MAX];
    int64_t balance, spend;
    static const char *const fields[] = {
        "name",
        "state",
        "desired",
        "mode",
        "gpu_model",
        "gpus",
        "region",
        "node_id",
        "plan",
        "plan_expires_at",
        "stop_at",
        "idle_stop_after_seconds",
        "idle_since",
        "charged_micros",
        "rate_per_hour_micros",
    };

    if (ledger_balance(st, ledger_user_account(account, user_id), &balance, err) < 0 ||
        billing_spend_per_hour(st, user_id, &spend, err) < 0)
        return NULL;
    cleanup_json json_t *inst = instance_json(req->srv, req->instance.id, NULL, err);
    if (!inst)
        return NULL;
    json_t *j =
        json_pack("{s:s, s:I, s:s, s:I, s:o}", "instance_id", req->instance.id, "balance_micros",
                  (json_int_t)balance, "currency", req->srv->cfg.currency, "spend_per_hour_micros",
                  (json_int_t)spend, "covers_seconds",
                  spend > 0 ? json_integer(sl_money_covers_seconds(balance, spend)) : json_null());
    for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
        json_t *v = json_object_get(inst, fields[i]);
        if (v)
            json_object_set(j, fields[i], v);
    }
    return j;
}

/* GET /v1/nodes/{id}/instances/{instance}/metadata: API_NODE | API_INSTANCE,
 * so the instance is one the calling node holds (req->instance). */
int api_nodes_instance_metadata(struct api_request *req, struct api_response *res,
                                struct sl_error *err)
{
    json_t *j = metadata_json(req, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

int api_nodes_instance_stop(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    if (api_body_fields(req, NULL, 0, err) < 0)
        return -1;
    /* the renter's own stop, made from inside: reason `user` */
    if (instance_stop(req->srv, req->instance.id, "user", err) < 0 ||
        instance_event(req->srv->store, req->instance.id, "shutdown", "stopping", "user",
                       "stopped from inside the instance (shutdown, or POST "
                       "http://169.254.169.254/stop)",
                       err) < 0)
        return -1;
    json_t *j = metadata_json(req, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

int api_instances_idle_stop(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t after = -2;
    bool inherit = false;
    const struct sl_json_field fields[] = {
        { "after_seconds", SL_JSON_INT, .min = 0, .max = INT64_MAX, .out = &after },
        { "inherit", SL_JSON_BOOL, .out = &inherit },
    };
    const char *id = req->instance.id;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if ((after >= 0) == inherit)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "give either after_seconds (0 turns idle stop off) or inherit: true "
                       "(follow the account's default)");
    if (stops_set_idle(req->srv, id, inherit ? -1 : after, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

static int reply_idle_default(struct api_request *req, struct api_response *res,
                              struct sl_error *err)
{
    int64_t after;

    if (store_get_int(req->srv->store, "SELECT idle_stop_default FROM users WHERE id = ?1",
                      DB_ARGS(DB_TEXT(req->caller.user_id)), &after, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:o, s:I, s:I}", "after_seconds",
                        after > 0 ? json_integer(after) : json_null(), "min_seconds",
                        (json_int_t)req->srv->cfg.idle_stop_min, "max_seconds",
                        (json_int_t)req->srv->cfg.idle_stop_max));
    return 0;
}

int api_me_idle_stop_get(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return reply_idle_default(req, res, err);
}

int api_me_idle_stop_set(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t after = 0;
    const struct sl_json_field fields[] = {
        { "after_seconds", SL_JSON_INT, .required = true, .min = 0, .max = INT64_MAX,
          .out = &after },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        stops_check_idle_period(req->srv, after, err) < 0)
        return -1;
    if (store_exec(req->srv->store, "UPDATE users SET idle_stop_default = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after)), err) < 0)
        return -1;
    /* instances that follow the default start a new idle period with it */
    if (store_exec(req->srv->store,
                   "UPDATE instances SET idle_since = ?2, idle_warned = 0 WHERE user_id = ?1"
                   " AND idle_stop_after IS NULL AND idle_since IS NOT NULL",
                   DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(sl_time_now())), err) < 0)
        return -1;
    return reply_idle_default(req, res, err);
}
