/* The catalog as renters see it (regions, GPU models, the market) and as
 * admins change it. */
#include "catalog.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"

#include <stdio.h>
#include <string.h>

#define PRICE_MAX_MICROS 1000000000000LL

static int region_exists(struct store *st, const char *region, struct sl_error *err)
{
    int64_t n;

    if (store_get_int(st, "SELECT COUNT(*) FROM regions WHERE id = ?1", DB_ARGS(DB_TEXT(region)),
                      &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                       "no region '%s': list them with suanli regions", region);
    return 0;
}

static json_t *regions_json(struct store *st, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st, "SELECT id, name, sample, created_at FROM regions ORDER BY id", DB_NO_ARGS, err);
    cleanup_json json_t *items = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1)
        json_array_append_new(items,
                              json_pack("{s:s, s:s, s:b, s:o}", "id", db_text(rows, 0), "name",
                                        db_text(rows, 1), "sample", (int)db_int(rows, 2),
                                        "created_at", api_time(db_int(rows, 3))));
    return rc < 0 ? NULL : json_pack("{s:O, s:n}", "items", items, "next_cursor");
}

/* GPU models with the price in effect now in region ("" for the default). */
static json_t *gpu_models_json(struct store *st, const char *region, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT id, name, vram_mib, cpu_cores_per_gpu, memory_mib_per_gpu, sample"
                    " FROM gpu_models ORDER BY vram_mib DESC, name",
                    DB_NO_ARGS, err);
    cleanup_json json_t *items = json_array();
    int64_t now = sl_time_now();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1) {
        char item[SL_ID_MAX + 8];
        int64_t price = 0;
        snprintf(item, sizeof(item), "gpu:%s", db_text(rows, 0));
        int found = catalog_price_at(st, item, region, now, &price, NULL, err);
        if (found < 0)
            return NULL;
        json_array_append_new(
            items,
            json_pack("{s:s, s:s, s:I, s:I, s:I, s:o, s:b}", "id", db_text(rows, 0), "name",
                      db_text(rows, 1), "vram_mib", (json_int_t)db_int(rows, 2),
                      "cpu_cores_per_gpu", (json_int_t)db_int(rows, 3), "memory_mib_per_gpu",
                      (json_int_t)db_int(rows, 4), "price_per_hour_micros",
                      found ? json_integer(price) : json_null(), "sample", (int)db_int(rows, 5)));
    }
    return rc < 0 ? NULL : json_pack("{s:O, s:n}", "items", items, "next_cursor");
}

static int reply_or_fail(struct api_response *res, json_t *j)
{
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

int api_regions(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return reply_or_fail(res, regions_json(req->srv->store, err));
}

int api_gpu_models(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *region = api_query(req, "region");

    if (region && region_exists(req->srv->store, region, err) < 0)
        return -1;
    return reply_or_fail(res, gpu_models_json(req->srv->store, region ? region : "", err));
}

static json_t *storage_price(struct store *st, const char *item, const char *region,
                             struct sl_error *err)
{
    int64_t amount = 0, free_gib = 0;
    int rc = catalog_price_at(st, item, region, sl_time_now(), &amount, &free_gib, err);

    if (rc < 0)
        return NULL;
    if (rc == 0)
        return json_null();
    return json_pack("{s:I, s:I}", "price_per_gib_day_micros", (json_int_t)amount, "free_gib",
                     (json_int_t)free_gib);
}

/* How many GPUs of model m the online hosts of region have, and how many are
 * free; simulated ones are counted apart so a renter always sees them. */
static int add_supply(struct server *srv, const char *region, json_t *m, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN g.instance_id IS NULL THEN 1 ELSE 0 END), 0),"
        " COUNT(DISTINCT g.node_id),"
        " COALESCE(SUM(CASE WHEN g.simulated = 1 THEN 1 ELSE 0 END), 0)"
        " FROM gpus g JOIN nodes n ON n.id = g.node_id"
        " WHERE n.region_id = ?1 AND g.gpu_model_id = ?2 AND n.last_heartbeat > ?3",
        DB_ARGS(DB_TEXT(region), DB_TEXT(json_string_value(json_object_get(m, "id"))),
                DB_INT(sl_time_now() - srv->cfg.node_offline_after)),
        err);

    if (!rows || db_next(rows, err) < 0)
        return -1;
    json_object_set_new(m, "gpus_total", json_integer(db_int(rows, 0)));
    json_object_set_new(m, "gpus_free", json_integer(db_int(rows, 1)));
    json_object_set_new(m, "hosts", json_integer(db_int(rows, 2)));
    json_object_set_new(m, "simulated_gpus", json_integer(db_int(rows, 3)));
    return 0;
}

/* The market: per region, every GPU model with its price there. Hosts and
 * free GPUs join in when nodes enroll; until then the counts are zero. */
int api_market(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *only = api_query(req, "region");
    cleanup_json json_t *regions = regions_json(st, err);
    cleanup_json json_t *out = json_array();
    size_t i;
    json_t *r;

    if (!regions)
        return -1;
    if (only && region_exists(st, only, err) < 0)
        return -1;
    json_array_foreach(json_object_get(regions, "items"), i, r)
    {
        const char *rid = json_string_value(json_object_get(r, "id"));
        int64_t nogpu = 0;
        if (only && strcmp(only, rid) != 0)
            continue;
        cleanup_json json_t *models = gpu_models_json(st, rid, err);
        if (!models)
            return -1;
        size_t j;
        json_t *m;
        json_array_foreach(json_object_get(models, "items"), j, m)
        {
            if (add_supply(req->srv, rid, m, err) < 0)
                return -1;
        }
        int rc = catalog_price_at(st, CATALOG_NOGPU, rid, sl_time_now(), &nogpu, NULL, err);
        json_t *disk = storage_price(st, CATALOG_DATA_DISK, rid, err);
        json_t *files = storage_price(st, CATALOG_FILE_STORAGE, rid, err);
        if (rc < 0 || !disk || !files) {
            json_decref(disk);
            json_decref(files);
            return -1;
        }
        json_array_append_new(
            out,
            json_pack("{s:s, s:s, s:O, s:O, s:o, s:o, s:o}", "region", rid, "region_name",
                      json_string_value(json_object_get(r, "name")), "sample",
                      json_object_get(r, "sample"), "gpu_models", json_object_get(models, "items"),
                      "nogpu_price_per_hour_micros", rc ? json_integer(nogpu) : json_null(),
                      "data_disk", disk, "file_storage", files));
    }
    api_reply(res, 200,
              json_pack("{s:O, s:s, s:n}", "items", out, "currency", req->srv->cfg.currency,
                        "next_cursor"));
    return 0;
}

int api_admin_regions_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return api_regions(req, res, err);
}

int api_admin_regions_create(struct api_request *req, struct api_response *res,
                             struct sl_error *err)
{
    const char *id = NULL, *name = NULL;
    const struct sl_json_field fields[] = {
        { "id", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 32, .out = &id },
        { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 100, .out = &name },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    for (const char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return sl_fail(err, SL_E_INVALID, "invalid_field",
                           "a region id holds lowercase letters, digits and '-', such as bj-1");
    if (catalog_region_create(req->srv->store, id, name, false, err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:b, s:o}", "id", id, "name", name, "sample", 0, "created_at",
                        api_time(sl_time_now())));
    return 0;
}

int api_admin_gpu_models_list(struct api_request *req, struct api_response *res,
                              struct sl_error *err)
{
    return api_gpu_models(req, res, err);
}

int api_admin_gpu_models_create(struct api_request *req, struct api_response *res,
                                struct sl_error *err)
{
    const char *name = NULL;
    int64_t vram = 0, cpu = 0, mem = 0, price = 0;
    const struct sl_json_field fields[] = {
        { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &name },
        { "vram_mib", SL_JSON_INT, .required = true, .min = 1, .max = 1 << 24, .out = &vram },
        { "cpu_cores_per_gpu", SL_JSON_INT, .required = true, .min = 1, .max = 1024, .out = &cpu },
        { "memory_mib_per_gpu", SL_JSON_INT, .required = true, .min = 1, .max = 1 << 26,
          .out = &mem },
        { "price_per_hour_micros", SL_JSON_INT, .required = true, .min = 0, .max = PRICE_MAX_MICROS,
          .out = &price },
    };
    char id[SL_ID_MAX];

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        catalog_gpu_model_create(req->srv->store, name, vram, cpu, mem, price, false,
                                 req->caller.user_id, id, err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:b}", "id", id, "name", name, "vram_mib",
                        (json_int_t)vram, "cpu_cores_per_gpu", (json_int_t)cpu,
                        "memory_mib_per_gpu", (json_int_t)mem, "price_per_hour_micros",
                        (json_int_t)price, "sample", 0));
    return 0;
}

/* A price change applies from now on; earlier rows stay for the record and
 * for instances whose rates were snapshotted under them. */
int api_admin_gpu_models_update(struct api_request *req, struct api_response *res,
                                struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *region = NULL;
    int64_t price = -1, exists;
    const struct sl_json_field fields[] = {
        { "price_per_hour_micros", SL_JSON_INT, .required = true, .min = 0, .max = PRICE_MAX_MICROS,
          .out = &price },
        { "region", SL_JSON_STRING, .max_len = 32, .out = &region },
    };
    char item[SL_ID_MAX + 8];

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (store_get_int(st, "SELECT COUNT(*) FROM gpu_models WHERE id = ?1",
                      DB_ARGS(DB_TEXT(req->params[0])), &exists, err) < 0)
        return -1;
    if (!exists)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_gpu_model",
                       "no GPU model '%s': list them with suanli admin gpu-model ls",
                       req->params[0]);
    if (region && !*region)
        region = NULL; /* "" names the price for every region */
    if (region && region_exists(st, region, err) < 0)
        return -1;
    snprintf(item, sizeof(item), "gpu:%s", req->params[0]);
    if (catalog_price_set(st, item, region, price, 0, false, req->caller.user_id, err) < 0)
        return -1;
    json_t *models = gpu_models_json(st, region ? region : "", err);
    if (!models)
        return -1;
    size_t i;
    json_t *m, *found = NULL;
    json_array_foreach(json_object_get(models, "items"), i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "id")), req->params[0]) == 0)
            found = json_incref(m);
    }
    json_decref(models);
    api_reply(res, 200, found);
    return 0;
}

static json_t *price_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:I, s:s, s:s, s:I, s:I, s:o, s:o, s:b}", "seq", (json_int_t)db_int(rows, 0),
                     "item", db_text(rows, 1), "region", db_text(rows, 2), "amount_micros",
                     (json_int_t)db_int(rows, 3), "free_gib", (json_int_t)db_int(rows, 4),
                     "effective_from", api_time(db_int(rows, 5)), "created_by",
                     db_null(rows, 6) ? json_null() : json_string(db_text(rows, 6)), "sample",
                     (int)db_int(rows, 7));
}

int api_admin_prices_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, item, region_id, amount_micros, free_gib, effective_from, created_by,"
        " sample FROM prices WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        DB_ARGS(DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, price_json, NULL, limit, err) : -1;
}

int api_admin_prices_create(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *item = NULL, *region = NULL;
    int64_t amount = 0, free_gib = 0;
    const struct sl_json_field fields[] = {
        { "item", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &item },
        { "region", SL_JSON_STRING, .max_len = 32, .out = &region },
        { "amount_micros", SL_JSON_INT, .required = true, .min = 0, .max = PRICE_MAX_MICROS,
          .out = &amount },
        { "free_gib", SL_JSON_INT, .min = 0, .max = 1 << 20, .out = &free_gib },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (strcmp(item, CATALOG_NOGPU) && strcmp(item, CATALOG_DATA_DISK) &&
        strcmp(item, CATALOG_FILE_STORAGE))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "item must be nogpu, data_disk or file_storage (GPU prices change with "
                       "PATCH /v1/admin/gpu-models/{id})");
    if (strcmp(item, CATALOG_NOGPU) == 0 && free_gib)
        return sl_fail(err, SL_E_INVALID, "invalid_field", "free_gib applies to disks only");
    if (region && !*region)
        region = NULL; /* "" names the price for every region */
    if (region && region_exists(st, region, err) < 0)
        return -1;
    if (catalog_price_set(st, item, region, amount, free_gib, false, req->caller.user_id, err) < 0)
        return -1;
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:I, s:I, s:o}", "item", item, "region", region ? region : "",
                        "amount_micros", (json_int_t)amount, "free_gib", (json_int_t)free_gib,
                        "effective_from", api_time(sl_time_now())));
    return 0;
}
