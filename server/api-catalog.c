/* The catalog as renters see it (regions, GPU models, the market) and as
 * admins change it. */
#include "catalog.h"
#include "nodes.h"
#include "routes.h"
#include "sched.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* The market's filters (GET /v1/market?...); absent ones are 0 / NULL. */
struct market_filter {
    const char *region;
    const char *gpu_model;      /* a model's name or id */
    int64_t min_free;           /* GPUs free on the host */
    int64_t min_vram_gib;       /* the model's VRAM, to the nearest GiB (24564 MiB is 24 GiB) */
    int cuda_major, cuda_minor; /* the host's CUDA version at least; -1: any */
};

static int filter_int(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out,
                      struct sl_error *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "query parameter '%s' must be an integer from %" PRId64 " to %" PRId64
                       " (not '%s')",
                       name, lo, hi, s);
    *out = v;
    return 0;
}

/* "12.2" or "12": the major and minor version; -1 when s is not one. */
static int parse_cuda(const char *s, int *major, int *minor)
{
    char rest;
    *minor = 0;
    if (!s || strlen(s) > 8 || s[0] < '0' || s[0] > '9')
        return -1;
    int n = sscanf(s, "%d.%d%c", major, minor, &rest);
    if (n == 1 && strchr(s, '.'))
        return -1;
    return (n == 1 || n == 2) && *major >= 0 && *minor >= 0 ? 0 : -1;
}

static int market_filter_parse(struct api_request *req, struct market_filter *f,
                               struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *free = api_query(req, "min_free"), *vram = api_query(req, "min_vram_gib"),
               *cuda = api_query(req, "cuda");
    int64_t n;

    *f = (struct market_filter){ .region = api_query(req, "region"),
                                 .gpu_model = api_query(req, "gpu_model"),
                                 .cuda_major = -1,
                                 .cuda_minor = -1 };
    if (f->region && region_exists(st, f->region, err) < 0)
        return -1;
    if (f->gpu_model) {
        if (store_get_int(
                st, "SELECT COUNT(*) FROM gpu_models WHERE id = ?1 OR lower(name) = lower(?1)",
                DB_ARGS(DB_TEXT(f->gpu_model)), &n, err) < 0)
            return -1;
        if (n == 0)
            return sl_fail(err, SL_E_NOT_FOUND, "no_such_gpu_model",
                           "no GPU model '%s': the models are in suanli gpu-models", f->gpu_model);
    }
    if (free && filter_int("min_free", free, 0, 1024, &f->min_free, err) < 0)
        return -1;
    if (vram && filter_int("min_vram_gib", vram, 0, 1 << 20, &f->min_vram_gib, err) < 0)
        return -1;
    if (cuda && parse_cuda(cuda, &f->cuda_major, &f->cuda_minor) < 0)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "query parameter 'cuda' is a CUDA version such as 12 or 12.2 (the hosts "
                       "with it or newer), not '%s'",
                       cuda);
    return 0;
}

/* Whether model m (gpu_models_json's item) passes f's model filters. */
static bool model_passes(const struct market_filter *f, json_t *m)
{
    const char *id = json_string_value(json_object_get(m, "id")),
               *name = json_string_value(json_object_get(m, "name"));
    int64_t vram = json_integer_value(json_object_get(m, "vram_mib"));

    if (f->gpu_model && strcmp(f->gpu_model, id) != 0 && strcasecmp(f->gpu_model, name) != 0)
        return false;
    return (vram + 512) / 1024 >= f->min_vram_gib;
}

/* Whether a host's CUDA version ("12.2"; "simulated" on simulated GPUs,
 * which no version filter matches) is f's at least. */
static bool cuda_passes(const struct market_filter *f, const char *version)
{
    int major, minor;

    if (f->cuda_major < 0)
        return true;
    if (parse_cuda(version, &major, &minor) < 0)
        return false;
    return major > f->cuda_major || (major == f->cuda_major && minor >= f->cuda_minor);
}

/* The offers of region's online hosts, one per host and GPU model, as
 * AutoDL lists them: a GPU's share of the host's CPU and memory (sched.h),
 * the GPUs an instance could get now (free, with CPU and memory left for
 * them), the largest data disk that fits. Cordoned hosts take no instances
 * and are left out. No address, token or instance of anyone: a host is its
 * node id and host name. */
static json_t *host_offers(struct server *srv, const char *region, const struct market_filter *f,
                           struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT n.id, n.hostname, m.id, m.name, m.vram_mib, m.cpu_cores_per_gpu,"
        " m.memory_mib_per_gpu, COUNT(*), COALESCE(SUM(CASE WHEN g.instance_id IS NULL THEN 1"
        " ELSE 0 END), 0), MIN(g.simulated), n.driver_version, n.cuda_version,"
        " n.disk_free_bytes, n.instance_disks_bytes,"
        " (SELECT COALESCE(SUM(i.system_disk_gib + i.data_disk_gib), 0) FROM instances i"
        "  WHERE i.node_id = n.id AND i.state != 'released')"
        " FROM nodes n JOIN gpus g ON g.node_id = n.id"
        " JOIN gpu_models m ON m.id = g.gpu_model_id"
        " WHERE n.region_id = ?1 AND n.last_heartbeat > ?2 AND n.cordoned_at IS NULL"
        " GROUP BY n.id, m.id ORDER BY m.vram_mib DESC, m.name, n.hostname, n.id",
        DB_ARGS(DB_TEXT(region), DB_INT(sl_time_now() - srv->cfg.node_offline_after)), err);
    cleanup_json json_t *out = json_array();
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) == 1) {
        struct host_resources h;
        int64_t millicores, memory_mib, price = 0;
        char item[SL_ID_MAX + 8];
        cleanup_json json_t *model =
            json_pack("{s:s, s:s, s:I}", "id", db_text(rows, 2), "name", db_text(rows, 3),
                      "vram_mib", (json_int_t)db_int(rows, 4));
        if (!model_passes(f, model) || !cuda_passes(f, db_text(rows, 11)))
            continue;
        if (sched_host_resources(srv, db_text(rows, 0), NULL, &h, err) < 0)
            return NULL;
        sched_host_share(srv, &h, db_int(rows, 5), db_int(rows, 6), &millicores, &memory_mib);
        int64_t free = sched_host_fits(srv, &h, db_int(rows, 8), millicores, memory_mib);
        if (free < f->min_free)
            continue;
        int64_t disk =
            nodes_disk_room_gib(srv, db_int(rows, 12), db_int(rows, 13), db_int(rows, 14)) -
            srv->cfg.system_disk_gib;
        snprintf(item, sizeof(item), "gpu:%s", db_text(rows, 2));
        int found = catalog_price_at(srv->store, item, region, sl_time_now(), &price, NULL, err);
        if (found < 0)
            return NULL;
        json_array_append_new(
            out,
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:I, s:f, s:I, s:I,"
                      " s:s, s:s, s:o}",
                      "node_id", db_text(rows, 0), "hostname", db_text(rows, 1), "region", region,
                      "gpu_model", db_text(rows, 3), "gpu_model_id", db_text(rows, 2), "vram_mib",
                      (json_int_t)db_int(rows, 4), "gpus_total", (json_int_t)db_int(rows, 7),
                      "gpus_free", (json_int_t)free, "simulated", (int)db_int(rows, 9),
                      "cpu_millicores_per_gpu", (json_int_t)millicores, "cpu_cores_per_gpu",
                      (double)millicores / 1000.0, "memory_mib_per_gpu", (json_int_t)memory_mib,
                      "data_disk_free_gib", (json_int_t)(disk > 0 ? disk : 0), "driver_version",
                      db_text(rows, 10), "cuda_version", db_text(rows, 11), "price_per_hour_micros",
                      found ? json_integer(price) : json_null()));
    }
    return rc < 0 ? NULL : json_incref(out);
}

json_t *api_market_offers(struct server *srv, const char *region, struct sl_error *err)
{
    const struct market_filter f = { .region = region, .cuda_major = -1, .cuda_minor = -1 };
    cleanup_json json_t *regions = regions_json(srv->store, err);
    cleanup_json json_t *out = json_array();
    size_t i;
    json_t *r;

    if (!regions || (region && region_exists(srv->store, region, err) < 0))
        return NULL;
    json_array_foreach(json_object_get(regions, "items"), i, r)
    {
        const char *rid = json_string_value(json_object_get(r, "id"));
        if (region && strcmp(region, rid) != 0)
            continue;
        cleanup_json json_t *hosts = host_offers(srv, rid, &f, err);
        if (!hosts)
            return NULL;
        json_array_extend(out, hosts);
    }
    return json_incref(out);
}

/* The market: per region, every GPU model with its price there, and the
 * offers of its hosts (host_offers). Hosts and free GPUs join in when nodes
 * enroll; until then the counts are zero and the hosts none. */
int api_market(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    struct market_filter f;
    cleanup_json json_t *regions = regions_json(st, err);
    cleanup_json json_t *out = json_array();
    size_t i;
    json_t *r;

    if (!regions || market_filter_parse(req, &f, err) < 0)
        return -1;
    json_array_foreach(json_object_get(regions, "items"), i, r)
    {
        const char *rid = json_string_value(json_object_get(r, "id"));
        int64_t nogpu = 0;
        if (f.region && strcmp(f.region, rid) != 0)
            continue;
        cleanup_json json_t *models = gpu_models_json(st, rid, err);
        cleanup_json json_t *hosts = models ? host_offers(req->srv, rid, &f, err) : NULL;
        cleanup_json json_t *shown = json_array();
        if (!hosts)
            return -1;
        size_t j;
        json_t *m;
        json_array_foreach(json_object_get(models, "items"), j, m)
        {
            if (!model_passes(&f, m))
                continue;
            if (add_supply(req->srv, rid, m, err) < 0)
                return -1;
            json_array_append(shown, m);
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
            out, json_pack("{s:s, s:s, s:O, s:O, s:O, s:o, s:o, s:o}", "region", rid, "region_name",
                           json_string_value(json_object_get(r, "name")), "sample",
                           json_object_get(r, "sample"), "gpu_models", shown, "hosts", hosts,
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
        strcmp(item, CATALOG_FILE_STORAGE) && strcmp(item, CATALOG_IMAGE_STORAGE))
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "item must be nogpu, data_disk, file_storage or image_storage (GPU prices "
                       "change with PATCH /v1/admin/gpu-models/{id})");
    if (strcmp(item, CATALOG_IMAGE_STORAGE) == 0 && region && *region)
        return sl_fail(err, SL_E_INVALID, "invalid_field",
                       "image_storage has one price for every region: leave region out");
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
