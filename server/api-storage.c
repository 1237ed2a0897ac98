/* File storage as renters see it and operators set it (storage.h):
 * GET /v1/storage, GET and POST /v1/admin/storage. */
#include "billing.h"
#include "catalog.h"
#include "routes.h"
#include "storage.h"

#include "../lib/cleanup.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"

#include <string.h>

#define GIB (1024LL * 1024 * 1024)

/* The file_storage price of the region now, and its free size. */
static int price(struct store *st, const char *region, int64_t *per_gib_day, int64_t *free_gib,
                 struct sl_error *err)
{
    *per_gib_day = 0;
    *free_gib = 0;
    return catalog_price_at(st, CATALOG_FILE_STORAGE, region, sl_time_now(), per_gib_day, free_gib,
                            err) < 0
               ? -1
               : 0;
}

static json_t *dir_json(struct db_rows *rows, void *ctx)
{
    struct store *st = ctx;
    const char *region = db_text(rows, 1);
    int64_t used = db_int(rows, 2), per = 0, free_gib = 0;
    struct storage_backend b;
    struct sl_error err = SL_ERROR_INIT;

    if (storage_backend_get(st, region, &b, &err) < 0 ||
        price(st, region, &per, &free_gib, &err) < 0)
        return NULL;
    /* whole GiB over the free size, rounded up (for reading); the meter
     * bills whole MiB over it, rounded down, at the price of when its
     * quantity last changed (docs/design/billing.md, "Storage meters") */
    int64_t used_gib = (used + GIB - 1) / GIB;
    int64_t over_gib = used_gib > free_gib ? used_gib - free_gib : 0;
    int64_t mib = billing_storage_mib_over(used, free_gib), per_day = 0;
    if (sl_money_prorate(mib, per, 1024, &per_day, &err) < 0)
        per_day = 0;
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:o}", "region",
                     region, "kind", b.kind, "path", "/root/storage", "used_bytes",
                     (json_int_t)used, "quota_bytes", (json_int_t)(b.quota_gib * GIB), "free_bytes",
                     (json_int_t)(free_gib * GIB), "price_per_gib_day_micros", (json_int_t)per,
                     "over_free_gib", (json_int_t)over_gib, "over_free_mib", (json_int_t)mib,
                     "per_day_micros", (json_int_t)per_day, "billed", 1, "used_at",
                     db_null(rows, 3) ? json_null() : api_time(db_int(rows, 3)));
}

/* GET /v1/storage: the caller's storage in each region where they have
 * one (made with their first instance there). */
int api_storage_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT number, region_id, used_bytes, used_at FROM storage_dirs"
                    " WHERE user_id = ?1 AND number > ?2 ORDER BY number LIMIT ?3",
                    DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, dir_json, req->srv->store, limit, err) : -1;
}

static json_t *backend_json(struct db_rows *rows, void *ctx)
{
    struct store *st = ctx;
    const char *region = db_text(rows, 1);
    int64_t per = 0, free_gib = 0;
    struct sl_error err = SL_ERROR_INIT;

    if (price(st, region, &per, &free_gib, &err) < 0)
        return NULL;
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "region", region, "kind",
                     db_null(rows, 2) ? "local" : db_text(rows, 2), "spec", db_text(rows, 3),
                     "quota_gib",
                     (json_int_t)(db_null(rows, 4) ? STORAGE_DEFAULT_QUOTA_GIB : db_int(rows, 4)),
                     "free_gib", (json_int_t)free_gib, "price_per_gib_day_micros", (json_int_t)per,
                     "dirs", (json_int_t)db_int(rows, 5), "used_bytes", (json_int_t)db_int(rows, 6),
                     "default", db_null(rows, 2));
}

/* regions have no integer key to page by (nor a rowid on PostgreSQL): a
 * page's key is the region's place in the order of ids, which holds
 * between pages unless a region is added before them (a handful, rarely) */
#define BACKEND_SELECT                                                                             \
    "SELECT (SELECT COUNT(*) FROM regions o WHERE o.id <= r.id) AS place, r.id, b.kind, b.spec, "  \
    "b.quota_gib,"                                                                                 \
    " (SELECT COUNT(*) FROM storage_dirs s WHERE s.region_id = r.id),"                             \
    " (SELECT COALESCE(SUM(s.used_bytes), 0) FROM storage_dirs s WHERE s.region_id = r.id)"        \
    " FROM regions r LEFT JOIN storage_backends b ON b.region_id = r.id"

/* GET /v1/admin/storage: each region's backend (a region without one has
 * the default: local). */
int api_admin_storage_list(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT * FROM (" BACKEND_SELECT ") x WHERE x.place > ?1 ORDER BY x.place LIMIT ?2",
        DB_ARGS(DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, backend_json, req->srv->store, limit, err) : -1;
}

/* POST /v1/admin/storage {region, kind, spec, quota_gib}: sets the region's
 * backend; instances started after it mount the new one. A bigger quota
 * grows the local backend's images (online where mounted); a smaller one
 * applies to directories made from then on (an image never shrinks under
 * its files). */
int api_admin_storage_set(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    const char *region = NULL, *kind = NULL, *spec = NULL;
    int64_t quota = 0, n;
    struct storage_backend old;
    const struct sl_json_field fields[] = {
        { "region", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 64, .out = &region },
        { "kind", SL_JSON_STRING, .min_len = 1, .max_len = 16, .out = &kind },
        { "spec", SL_JSON_STRING, .max_len = STORAGE_SPEC_MAX, .out = &spec },
        { "quota_gib", SL_JSON_INT, .min = 1, .max = STORAGE_MAX_QUOTA_GIB, .out = &quota },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0)
        return -1;
    if (store_get_int(st, "SELECT COUNT(*) FROM regions WHERE id = ?1", DB_ARGS(DB_TEXT(region)),
                      &n, err) < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_region",
                       "no region '%s': list them with suanli regions", region);
    if (storage_backend_get(st, region, &old, err) < 0)
        return -1;
    if (!kind)
        kind = old.kind;
    if (!spec)
        spec = strcmp(kind, old.kind) == 0 ? old.spec : "";
    if (!quota)
        quota = old.quota_gib;
    if (storage_backend_check(kind, spec, err) < 0)
        return -1;
    if (store_exec(st,
                   "INSERT INTO storage_backends (region_id, kind, spec, quota_gib, updated_at)"
                   " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (region_id) DO UPDATE SET"
                   " kind = excluded.kind, spec = excluded.spec, quota_gib = excluded.quota_gib,"
                   " updated_at = excluded.updated_at",
                   DB_ARGS(DB_TEXT(region), DB_TEXT(kind), DB_TEXT(spec), DB_INT(quota),
                           DB_INT(sl_time_now())),
                   err) < 0)
        return -1;
    if (store_exec(st,
                   "UPDATE nodes SET desired_revision = desired_revision + 1 WHERE region_id = ?1",
                   DB_ARGS(DB_TEXT(region)), err) < 0)
        return -1;
    store_note_change(st); /* waiting agents hear of it (desired-wait.h) */
    cleanup_rows struct db_rows *rows =
        store_query(st, BACKEND_SELECT " WHERE r.id = ?1", DB_ARGS(DB_TEXT(region)), err);
    if (!rows || db_next(rows, err) < 0)
        return -1;
    json_t *j = backend_json(rows, st);
    if (!j)
        return sl_fail(err, SL_E_INTERNAL, NULL, "unable to read the backend back");
    api_reply(res, 200, j);
    return 0;
}
