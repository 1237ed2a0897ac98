#include "catalog.h"

#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"

#include <stdio.h>
#include <string.h>

int catalog_region_create(struct store *st, const char *id, const char *name, bool sample,
                          struct sl_error *err)
{
    if (store_exec(st, "INSERT INTO regions (id, name, sample, created_at) VALUES (?1, ?2, ?3, ?4)",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(name), DB_INT(sample), DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "region_exists", "region '%s' exists already", id);
        return -1;
    }
    return 0;
}

int catalog_price_set(struct store *st, const char *item, const char *region, int64_t amount,
                      int64_t free_gib, bool sample, const char *by, struct sl_error *err)
{
    return store_exec(st,
                      "INSERT INTO prices (item, region_id, amount_micros, free_gib,"
                      " effective_from, created_by, sample) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                      DB_ARGS(DB_TEXT(item), DB_TEXT(region ? region : ""), DB_INT(amount),
                              DB_INT(free_gib), DB_INT(sl_time_now()), DB_TEXT(by), DB_INT(sample)),
                      err) < 0
               ? -1
               : 0;
}

int catalog_gpu_model_create(struct store *st, const char *name, int64_t vram_mib,
                             int64_t cpu_cores, int64_t memory_mib, int64_t price_per_hour,
                             bool sample, const char *by, char *id_out, struct sl_error *err)
{
    char item[SL_ID_MAX + 8];

    sl_id_new(id_out, "gpu-");
    if (store_exec(st,
                   "INSERT INTO gpu_models (id, name, vram_mib, cpu_cores_per_gpu,"
                   " memory_mib_per_gpu, sample, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                   DB_ARGS(DB_TEXT(id_out), DB_TEXT(name), DB_INT(vram_mib), DB_INT(cpu_cores),
                           DB_INT(memory_mib), DB_INT(sample), DB_INT(sl_time_now())),
                   err) < 0) {
        if (err->kind == SL_E_CONFLICT)
            return sl_fail(err, SL_E_CONFLICT, "gpu_model_exists",
                           "GPU model '%s' exists already: change its price with "
                           "suanli admin gpu-model price",
                           name);
        return -1;
    }
    snprintf(item, sizeof(item), "gpu:%s", id_out);
    return catalog_price_set(st, item, "", price_per_hour, 0, sample, by, err);
}

int catalog_price_at(struct store *st, const char *item, const char *region, int64_t at,
                     int64_t *amount, int64_t *free_gib, struct sl_error *err)
{
    /* a region's own price first, then the price for every region */
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT amount_micros, free_gib FROM prices WHERE item = ?1"
                    " AND region_id IN (?2, '') AND effective_from <= ?3"
                    " ORDER BY CASE WHEN region_id = '' THEN 1 ELSE 0 END, effective_from DESC,"
                    " seq DESC LIMIT 1",
                    DB_ARGS(DB_TEXT(item), DB_TEXT(region ? region : ""), DB_INT(at)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 1) {
        *amount = db_int(rows, 0);
        if (free_gib)
            *free_gib = db_int(rows, 1);
    }
    return rc;
}

int catalog_hourly_price(struct store *st, const char *model_id, const char *region, int64_t *price,
                         struct sl_error *err)
{
    char item[SL_ID_MAX + 8];
    int rc;

    if (model_id)
        snprintf(item, sizeof(item), "gpu:%s", model_id);
    else
        snprintf(item, sizeof(item), "%s", CATALOG_NOGPU);
    rc = catalog_price_at(st, item, region, sl_time_now(), price, NULL, err);
    if (rc == 0)
        return sl_fail(err, SL_E_CONFLICT, "no_price",
                       "this machine has no price in region '%s' yet: ask the operator", region);
    return rc < 0 ? -1 : 0;
}

static int seed_prices(struct store *st, json_t *prices, struct sl_error *err)
{
    static const struct {
        const char *item, *price_key, *free_key;
    } rows[] = {
        { CATALOG_NOGPU, "nogpu_per_hour_micros", NULL },
        { CATALOG_DATA_DISK, "data_disk_per_gib_day_micros", "data_disk_free_gib" },
        { CATALOG_FILE_STORAGE, "file_storage_per_gib_day_micros", "file_storage_free_gib" },
        /* optional: catalogs older than saved images have none */
        { CATALOG_IMAGE_STORAGE, "image_storage_per_gib_day_micros", "image_storage_free_gib" },
    };

    for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
        json_t *p = json_object_get(prices, rows[i].price_key);
        if (!p && strcmp(rows[i].item, CATALOG_IMAGE_STORAGE) == 0)
            continue;
        json_t *f = rows[i].free_key ? json_object_get(prices, rows[i].free_key) : NULL;
        if (!json_is_integer(p) || json_integer_value(p) < 0 || (f && !json_is_integer(f)))
            return sl_fail(err, SL_E_INVALID, "invalid_catalog",
                           "prices.%s must be a non-negative integer", rows[i].price_key);
        if (catalog_price_set(st, rows[i].item, "", json_integer_value(p),
                              f ? json_integer_value(f) : 0, true, NULL, err) < 0)
            return -1;
    }
    return 0;
}

int catalog_seed_file(struct server *srv, const char *path, struct sl_error *err)
{
    struct store *st = srv->store;
    cleanup_json json_t *root = NULL;
    cleanup_tx struct store *tx = NULL;
    json_error_t jerr;
    int64_t have;
    size_t i;
    json_t *v;

    if (store_get_int(st, "SELECT (SELECT COUNT(*) FROM regions) + (SELECT COUNT(*) FROM prices)",
                      DB_NO_ARGS, &have, err) < 0)
        return -1;
    if (have > 0)
        return 0;
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sl_fail(err, SL_E_INVALID, "invalid_catalog", "%s:%d: %s", path, jerr.line,
                       jerr.text);
    bool sample = json_is_true(json_object_get(root, "sample"));
    if (store_begin(st, err) < 0)
        return -1;
    tx = st;
    json_array_foreach(json_object_get(root, "regions"), i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        const char *name = json_string_value(json_object_get(v, "name"));
        if (!id || !name)
            return sl_fail(err, SL_E_INVALID, "invalid_catalog",
                           "%s: regions[%zu] needs an id and a name", path, i);
        if (catalog_region_create(st, id, name, sample, err) < 0)
            return -1;
    }
    json_array_foreach(json_object_get(root, "gpu_models"), i, v)
    {
        const char *name = NULL;
        int64_t vram = 0, cpu = 0, mem = 0, price = 0;
        const struct sl_json_field f[] = {
            { "name", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &name },
            { "vram_mib", SL_JSON_INT, .required = true, .min = 1, .max = 1 << 24, .out = &vram },
            { "cpu_cores_per_gpu", SL_JSON_INT, .required = true, .min = 1, .max = 1024,
              .out = &cpu },
            { "memory_mib_per_gpu", SL_JSON_INT, .required = true, .min = 1, .max = 1 << 26,
              .out = &mem },
            { "price_per_hour_micros", SL_JSON_INT, .required = true, .min = 0,
              .max = 1000000000000LL, .out = &price },
        };
        char id[SL_ID_MAX];
        if (sl_json_fields(v, f, ARRAY_SIZE(f), err) < 0) {
            sl_error_prefix(err, "%s: gpu_models[%zu]", path, i);
            return -1;
        }
        if (catalog_gpu_model_create(st, name, vram, cpu, mem, price, sample, NULL, id, err) < 0)
            return -1;
    }
    if (seed_prices(st, json_object_get(root, "prices"), err) < 0) {
        sl_error_prefix(err, "%s", path);
        return -1;
    }
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    log_info("catalog: loaded %s%s", path, sample ? " (a sample: replace it with your own)" : "");
    return 0;
}
