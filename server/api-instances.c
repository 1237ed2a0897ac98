/* Instances through the API: create, list, show, events and the verbs.
 * Routes with {id} are API_INSTANCE: the dispatcher has found the caller's
 * instance (req->instance) before these run. */
#include "instances.h"
#include "routes.h"
#include "stops.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"
#include "../lib/when.h"
#include "../lib/xalloc.h"

#include <string.h>

static void secrets_free(void *p)
{
    sched_secrets_release(p);
    free(p);
}

/* The new instance's id and password, before the write transaction: only
 * for a body that names a model and an image, so that a malformed request
 * costs no password hash (the handler refuses it as before). */
int api_instances_create_prepare(struct api_request *req, struct sl_error *err)
{
    struct sl_error ignored = SL_ERROR_INIT;

    if (!req->json && req->body_len > 0)
        req->json = sl_json_parse_object(req->body, req->body_len, &ignored);
    if (!json_is_string(json_object_get(req->json, "gpu_model")) ||
        !json_is_string(json_object_get(req->json, "image")))
        return 0;
    struct instance_secrets *s = xzalloc(sizeof(*s));
    req->prepared = s;
    req->prepared_free = secrets_free;
    return sched_secrets_new(req->srv, s, err);
}

int api_instances_create(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *name = NULL, *region = NULL, *model = NULL, *image = NULL, *plan = NULL,
               *host = NULL;
    int64_t gpus = 1, disk = 50;
    bool auto_renew = false;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .max_len = 64, .out = &name },
        { "region", SL_JSON_STRING, .max_len = 32, .out = &region },
        { "host", SL_JSON_STRING, .max_len = 255, .out = &host },
        { "gpu_model", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64,
          .out = &model },
        { "gpus", SL_JSON_INT, .min = -1000, .max = 1000, .out = &gpus },
        { "image", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 128, .out = &image },
        { "data_disk_gib", SL_JSON_INT, .min = -1000000000, .max = 1000000000, .out = &disk },
        { "plan", SL_JSON_STRING, .max_len = 16, .out = &plan },
        { "auto_renew", SL_JSON_BOOL, .out = &auto_renew },
    };
    char id[SL_ID_MAX];

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    struct instance_request rq = {
        .user_id = req->caller.user_id,
        .name = name && *name ? name : NULL,
        .region = region && *region ? region : NULL,
        .host = host && *host ? host : NULL,
        .gpu_model = model,
        .gpus = gpus,
        .image = image,
        .data_disk_gib = disk,
        .plan = plan,
        .auto_renew = auto_renew,
        .secrets = req->prepared,
    };
    if (sched_place(req->srv, &rq, id, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 201, j);
    return 0;
}

struct rows_ctx {
    struct server *srv;
    const char *user_id;
    struct sl_error *err;
    bool failed;
};

static json_t *instance_row_json(struct db_rows *rows, void *p)
{
    struct rows_ctx *ctx = p;
    json_t *j = instance_json(ctx->srv, db_text(rows, 1), ctx->user_id, ctx->err);

    if (!j) {
        ctx->failed = true;
        return json_null();
    }
    return j;
}

/* ?state= and ?name= filter; a name is matched exactly (names are unique
 * among a renter's instances not released: the CLI resolves one to its id
 * with ?name=NAME). */
int api_instances_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *state = api_query(req, "state"), *name = api_query(req, "name");
    struct rows_ctx ctx = { req->srv, req->caller.user_id, err, false };
    int64_t limit, after;

    if (state && strcmp(state, "all") != 0 && instance_state_parse(state) < 0)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "state must be one of creating, running, stopping, stopped, starting, "
                       "releasing, released, failed or all");
    if (name && (!*name || strlen(name) > 64))
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "name must be an instance's name, 1 to 64 bytes");
    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    /* released instances are history: listed only when asked for */
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT seq, id FROM instances WHERE user_id = ?1 AND seq > ?2"
                    " AND (?3 = state OR (?3 IS NULL AND state != 'released') OR ?3 = 'all')"
                    " AND (?5 IS NULL OR name = ?5) ORDER BY seq LIMIT ?4",
                    DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_TEXT(state),
                            DB_INT(limit), DB_TEXT(name)),
                    err);
    if (!rows || api_reply_rows(res, rows, instance_row_json, &ctx, limit, err) < 0)
        return -1;
    return ctx.failed ? -1 : 0;
}

int api_instances_get(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    json_t *j = instance_json(req->srv, req->instance.id, req->caller.user_id, err);

    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

static json_t *event_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:I, s:s, s:s, s:s, s:s, s:o}", "seq", (json_int_t)db_int(rows, 0), "kind",
                     db_text(rows, 1), "state", db_text(rows, 2), "reason", db_text(rows, 3),
                     "message", db_text(rows, 4), "created_at", api_time(db_int(rows, 5)));
}

int api_instances_events(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT seq, kind, state, reason, message, created_at FROM events"
                    " WHERE instance_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    DB_ARGS(DB_TEXT(req->instance.id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, event_json, NULL, limit, err) : -1;
}

/* Runs verb on one of the caller's instances and answers with it. */
static int do_verb(struct api_request *req, struct api_response *res, struct sl_error *err,
                   int (*verb)(struct server *, const char *, const char *, struct sl_error *),
                   const char *arg)
{
    const char *id = req->instance.id;

    if (verb(req->srv, id, arg, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

static int restart_verb(struct server *srv, const char *id, const char *unused,
                        struct sl_error *err)
{
    (void)unused;
    return instance_restart(srv, id, err);
}

/* arg: the time to stop at (an int64_t), or NULL to cancel. */
static int schedule_verb(struct server *srv, const char *id, const char *arg, struct sl_error *err)
{
    int64_t at = 0;

    if (arg)
        memcpy(&at, arg, sizeof(at));
    return stops_schedule(srv, id, at, err);
}

static int no_fields(struct api_request *req, struct sl_error *err)
{
    return api_body_fields(req, NULL, 0, err);
}

int api_instances_start(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *mode = NULL;
    const struct sl_json_field fields[] = {
        { "mode", SL_JSON_STRING, .max_len = 8, .out = &mode },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (!mode)
        mode = "gpu";
    if (strcmp(mode, "gpu") != 0 && strcmp(mode, "nogpu") != 0)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "mode must be gpu or nogpu");
    return do_verb(req, res, err, instance_start, mode);
}

/* Without a body: stop now. With {at | in_seconds}: schedule the stop;
 * with {cancel: true}: cancel the scheduled one (server/stops.c). */
int api_instances_stop(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *at_text = NULL;
    int64_t in_seconds = -1, at = 0;
    bool cancel = false;
    const struct sl_json_field fields[] = {
        { "at", SL_JSON_STRING, .max_len = 64, .out = &at_text },
        { "in_seconds", SL_JSON_INT, .min = 1, .max = INT64_MAX / 2, .out = &in_seconds },
        { "cancel", SL_JSON_BOOL, .out = &cancel },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    int given = (at_text != NULL) + (in_seconds >= 0) + cancel;
    if (given == 0)
        return do_verb(req, res, err, instance_stop, "user");
    if (given > 1)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "give one of at (an RFC 3339 time), in_seconds or cancel, not several");
    if (at_text && sl_rfc3339_parse(at_text, &at, err) < 0)
        return -1;
    if (in_seconds >= 0)
        at = sl_time_now() + in_seconds;
    return do_verb(req, res, err, schedule_verb, cancel ? NULL : (const char *)&at);
}

int api_instances_restart(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return no_fields(req, err) < 0 ? -1 : do_verb(req, res, err, restart_verb, NULL);
}

int api_instances_release(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return no_fields(req, err) < 0 ? -1 : do_verb(req, res, err, instance_release, "user");
}
