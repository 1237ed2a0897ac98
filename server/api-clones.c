/* POST /v1/instances/{id}/clone (clones.h) and /migrate (migrations.h):
 * API_INSTANCE, so the dispatcher has found the caller's own instance; a
 * stranger's id is 404 as everywhere. */
#include "clones.h"
#include "instances.h"
#include "migrations.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"

int api_instances_clone(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *model = NULL, *host = NULL, *name = NULL;
    int64_t gpus = 0;
    const struct sl_json_field fields[] = {
        { "gpu_model", SL_JSON_STRING, .min_len = 1, .max_len = 64, .out = &model },
        { "gpus", SL_JSON_INT, .min = 1, .max = 1000, .out = &gpus },
        { "host", SL_JSON_STRING, .min_len = 1, .max_len = 253, .out = &host },
        { "name", SL_JSON_STRING, .min_len = 1, .max_len = 64, .out = &name },
    };
    char id[SL_ID_MAX];

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    const struct clone_request rq = {
        .gpu_model = model, .gpus = gpus, .host = host, .name = name
    };
    if (clones_create(req->srv, req->instance.id, req->caller.user_id, &rq, id, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 201, j);
    return 0;
}

int api_instances_migrate(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *host = NULL;
    const struct sl_json_field fields[] = {
        { "host", SL_JSON_STRING, .min_len = 1, .max_len = 253, .out = &host },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        migrations_create(req->srv, req->instance.id, host, "user", NULL, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, req->instance.id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}
