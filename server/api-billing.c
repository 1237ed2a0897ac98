/* Billing through the API: bills and the charges behind them, meters,
 * plans, the renter's events, and the operator's check and run. */
#include "billing.h"
#include "instances.h"
#include "routes.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/money.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* "YYYY-MM" (default: this month, UTC) into [from, to). */
static int month_range(const char *month, int64_t *from, int64_t *to, char *label,
                       struct sl_error *err)
{
    struct tm tm = { 0 };
    int y, m;
    char tail;

    if (!month) {
        time_t now = (time_t)sl_time_now();
        gmtime_r(&now, &tm);
        y = tm.tm_year + 1900;
        m = tm.tm_mon + 1;
    } else if (sscanf(month, "%4d-%2d%c", &y, &m, &tail) != 2 || strlen(month) != 7 || y < 1970 ||
               y > 9999 || m < 1 || m > 12) {
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "month must be YYYY-MM, such as 2026-11 (not '%s')", month);
    }
    memset(&tm, 0, sizeof(tm));
    tm.tm_year = y - 1900;
    tm.tm_mon = m - 1;
    tm.tm_mday = 1;
    *from = (int64_t)timegm(&tm);
    tm.tm_mon++;
    *to = (int64_t)timegm(&tm);
    snprintf(label, 8, "%04d-%02d", y, m);
    return 0;
}

static void day_label(int64_t day, char *buf)
{
    char full[SL_TIME_FORMAT_MAX];

    sl_time_format(day * SL_SEC_PER_DAY, full);
    snprintf(buf, 11, "%.10s", full);
}

/* A month's charges summed per day, kind, instance or (all renters only)
 * user: one renter's (GET /v1/bills) or, with user_id NULL, everyone's
 * (GET /v1/admin/bills), found through charges_user or charges_period.
 * gpu_seconds: the GPU-seconds of pay-as-you-go gpu meters (their quantity
 * is the GPUs held), where seconds is the metered span of any kind. */
static int bills(struct api_request *req, struct api_response *res, const char *user_id,
                 struct sl_error *err)
{
    const char *by = api_query(req, "by");
    int64_t from, to, total = 0;
    char month[8];

    if (month_range(api_query(req, "month"), &from, &to, month, err) < 0)
        return -1;
    if (!by)
        by = "day";
    bool all = !user_id;
    const char *key = strcmp(by, "day") == 0           ? "CAST(c.period_from / 86400 AS TEXT)"
                      : strcmp(by, "instance") == 0    ? "c.instance_id"
                      : strcmp(by, "kind") == 0        ? "c.item"
                      : all && strcmp(by, "user") == 0 ? "c.user_id"
                                                       : NULL;
    if (!key)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       all ? "by must be day, instance, kind or user (not '%s')"
                           : "by must be day, instance or kind (not '%s')",
                       by);
    const char *label =
        strcmp(by, "instance") == 0
            ? "COALESCE((SELECT name FROM instances i WHERE i.id = c.instance_id), '')"
        : strcmp(by, "user") == 0
            ? "COALESCE((SELECT email FROM users u WHERE u.id = c.user_id), '')"
            : "''";
    cleanup_free char *sql = xasprintf(
        "SELECT %s AS k, c.item, SUM(c.amount_micros), COUNT(*),"
        " SUM(CASE WHEN c.meter_seq IS NULL THEN 0 ELSE c.period_to - c.period_from END),"
        " MAX(%s),"
        " SUM(CASE WHEN c.item = 'gpu' AND c.meter_seq IS NOT NULL THEN (c.period_to -"
        " c.period_from) * (SELECT quantity FROM meters m WHERE m.seq = c.meter_seq) ELSE 0 END)"
        " FROM charges c WHERE %s AND c.period_from >= ?2 AND c.period_from < ?3"
        " GROUP BY k, c.item ORDER BY k, c.item",
        key, label, all ? "?1 IS NULL" : "c.user_id = ?1");
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store, sql, DB_ARGS(DB_TEXT(user_id), DB_INT(from), DB_INT(to)), err);
    if (!rows)
        return -1;
    cleanup_json json_t *out = json_array();
    json_t *row = NULL;
    char current[SL_ID_MAX + 16] = "";
    int rc;
    while ((rc = db_next(rows, err)) == 1) {
        const char *k = db_text(rows, 0), *item = db_text(rows, 1);
        int64_t amount = db_int(rows, 2);
        if (!row || strcmp(current, k) != 0) {
            snprintf(current, sizeof(current), "%s", k);
            row = json_pack("{s:s, s:I, s:I, s:I, s:I, s:{}}", "key", k, "amount_micros",
                            (json_int_t)0, "charges", (json_int_t)0, "seconds", (json_int_t)0,
                            "gpu_seconds", (json_int_t)0, "by_kind");
            if (strcmp(by, "day") == 0) {
                char day[11];
                day_label(db_int(rows, 0), day);
                json_object_set_new(row, "key", json_string(day));
                json_object_set_new(row, "day", json_string(day));
            } else if (strcmp(by, "instance") == 0) {
                json_object_set_new(row, "instance_id", json_string(k));
                json_object_set_new(row, "name", json_string(db_text(rows, 5)));
            } else if (strcmp(by, "user") == 0) {
                json_object_set_new(row, "user_id", json_string(k));
                json_object_set_new(row, "email", json_string(db_text(rows, 5)));
            } else {
                json_object_set_new(row, "kind", json_string(k));
            }
            json_array_append_new(out, row);
        }
        int64_t row_amount = json_integer_value(json_object_get(row, "amount_micros"));
        if (sl_money_add(row_amount, amount, &row_amount, err) < 0 ||
            sl_money_add(total, amount, &total, err) < 0)
            return -1;
        json_object_set_new(row, "amount_micros", json_integer(row_amount));
#define ADD(field, v)                                                                              \
    json_object_set_new(row, field,                                                                \
                        json_integer(json_integer_value(json_object_get(row, field)) + (v)))
        ADD("charges", db_int(rows, 3));
        ADD("seconds", db_int(rows, 4));
        ADD("gpu_seconds", db_int(rows, 6));
#undef ADD
        json_object_set_new(json_object_get(row, "by_kind"), item, json_integer(amount));
    }
    if (rc < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:s, s:s, s:s, s:I, s:O}", "month", month, "by", by, "currency",
                        req->srv->cfg.currency, "total_micros", (json_int_t)total, "rows", out));
    return 0;
}

int api_bills(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return bills(req, res, req->caller.user_id, err);
}

int api_admin_bills(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    return bills(req, res, NULL, err);
}

static json_t *charge_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    bool metered = !db_null(rows, 8);
    return json_pack("{s:I, s:s, s:s, s:s, s:o, s:o, s:I, s:I, s:o, s:o, s:o}", "seq",
                     (json_int_t)db_int(rows, 0), "txn_id", db_text(rows, 1), "instance_id",
                     db_text(rows, 2), "kind", db_text(rows, 3), "period_from",
                     api_time(db_int(rows, 4)), "period_to", api_time(db_int(rows, 5)), "seconds",
                     (json_int_t)(db_int(rows, 5) - db_int(rows, 4)), "amount_micros",
                     (json_int_t)db_int(rows, 6), "created_at", api_time(db_int(rows, 7)),
                     "meter_seq", metered ? json_integer(db_int(rows, 8)) : json_null(),
                     "settlement", metered ? json_integer(db_int(rows, 9)) : json_null());
}

int api_bill_charges(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *day = api_query(req, "day");
    int64_t from, to, limit, after;
    char month[8];

    if (month_range(api_query(req, "month"), &from, &to, month, err) < 0 ||
        api_page_params(req, &limit, &after, err) < 0)
        return -1;
    const char *kind = api_query(req, "kind");
    static const char *const kinds[] = { "gpu",           "nogpu", "data_disk",  "file_storage",
                                         "image_storage", "plan",  "plan_refund" };
    bool known = !kind;
    for (size_t i = 0; kind && i < ARRAY_SIZE(kinds); i++)
        known |= strcmp(kind, kinds[i]) == 0;
    if (!known)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "kind must be gpu, nogpu, data_disk, file_storage, image_storage, plan or "
                       "plan_refund (not '%s')",
                       kind);
    if (day) {
        cleanup_free char *midnight = xasprintf("%sT00:00:00Z", day);
        struct sl_error why = SL_ERROR_INIT;
        char again[SL_TIME_FORMAT_MAX];
        /* strict: 2026-11-31 is no day, not the 1st of December */
        if (strlen(day) != 10 || sl_time_parse(midnight, &from, &why) < 0 ||
            strncmp(sl_time_format(from, again), day, 10) != 0)
            return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                           "day must be YYYY-MM-DD, such as 2026-11-30 (not '%s')", day);
        to = from + SL_SEC_PER_DAY;
    }
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, txn_id, instance_id, item, period_from, period_to, amount_micros,"
        " created_at, meter_seq, settlement FROM charges WHERE user_id = ?1 AND period_from >= ?2 "
        "AND period_from < ?3"
        " AND (?4 IS NULL OR instance_id = ?4) AND (?5 IS NULL OR item = ?5) AND seq > ?6"
        " ORDER BY seq LIMIT ?7",
        DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(from), DB_INT(to),
                DB_TEXT(api_query(req, "instance")), DB_TEXT(kind), DB_INT(after), DB_INT(limit)),
        err);
    return rows ? api_reply_rows(res, rows, charge_json, NULL, limit, err) : -1;
}

json_t *api_event_json(struct db_rows *rows, void *ctx)
{
    (void)ctx;
    return json_pack("{s:I, s:s, s:s, s:s, s:s, s:s, s:o}", "seq", (json_int_t)db_int(rows, 0),
                     "instance_id", db_text(rows, 1), "kind", db_text(rows, 2), "state",
                     db_text(rows, 3), "reason", db_text(rows, 4), "message", db_text(rows, 5),
                     "created_at", api_time(db_int(rows, 6)));
}

int api_events(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, instance_id, kind, state, reason, message, created_at FROM events"
        " WHERE user_id = ?1 AND seq > ?2 AND (?3 IS NULL OR kind = ?3) ORDER BY seq LIMIT ?4",
        DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_TEXT(api_query(req, "kind")),
                DB_INT(limit)),
        err);
    return rows ? api_reply_rows(res, rows, api_event_json, NULL, limit, err) : -1;
}

static json_t *meter_json(struct db_rows *rows, void *ctx)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t rate = 0;

    (void)ctx;
    /* cannot fail: a meter's period is positive, its amount >= 0 */
    if (sl_money_per_hour(db_int(rows, 4), db_int(rows, 5), &rate, &err) < 0)
        log_error("meter %" PRId64 ": %s", db_int(rows, 0), err.message);
    return json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:I, s:I}", "seq",
                     (json_int_t)db_int(rows, 0), "kind", db_text(rows, 1), "quantity",
                     (json_int_t)db_int(rows, 2), "unit_price_micros", (json_int_t)db_int(rows, 3),
                     "amount_micros", (json_int_t)db_int(rows, 4), "period_seconds",
                     (json_int_t)db_int(rows, 5), "rate_per_hour_micros", (json_int_t)rate,
                     "started_at", api_time(db_int(rows, 6)), "ended_at",
                     db_null(rows, 7) ? json_null() : api_time(db_int(rows, 7)), "settled_until",
                     api_time(db_int(rows, 8)), "charged_micros", (json_int_t)db_int(rows, 9),
                     "settlements", (json_int_t)db_int(rows, 10));
}

int api_instances_meters(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, item, quantity, unit_price_micros, amount_micros, period_s, started_at,"
        " ended_at, settled_until, charged_micros, settlements FROM meters"
        " WHERE instance_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        DB_ARGS(DB_TEXT(req->instance.id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, meter_json, NULL, limit, err) : -1;
}

static json_t *renter_meter_json(struct db_rows *rows, void *ctx)
{
    json_t *j = meter_json(rows, ctx);

    if (j)
        json_object_set_new(j, "region", json_string(db_text(rows, 11)));
    return j;
}

/* GET /v1/meters: the caller's meters that belong to no instance: file
 * storage (per region) and saved images (docs/design/billing.md). */
int api_meters(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows = store_query(
        req->srv->store,
        "SELECT seq, item, quantity, unit_price_micros, amount_micros, period_s, started_at,"
        " ended_at, settled_until, charged_micros, settlements, region_id FROM meters"
        " WHERE user_id = ?1 AND instance_id = '' AND seq > ?2 ORDER BY seq LIMIT ?3",
        DB_ARGS(DB_TEXT(req->caller.user_id), DB_INT(after), DB_INT(limit)), err);
    return rows ? api_reply_rows(res, rows, renter_meter_json, NULL, limit, err) : -1;
}

int api_instances_plan(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const char *plan = NULL, *id = req->instance.id;
    bool auto_renew = false;
    const struct sl_json_field fields[] = {
        { "plan", SL_JSON_STRING, .required = true, .min_len = 1, .max_len = 16, .out = &plan },
        { "auto_renew", SL_JSON_BOOL, .out = &auto_renew },
    };
    int64_t period;

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 ||
        billing_plan_period(plan, &period, err) < 0)
        return -1;
    int renew = json_object_get(req->json, "auto_renew") ? auto_renew : -1;
    if (billing_plan_set(req->srv, id, plan, renew, err) < 0)
        return -1;
    json_t *j = instance_json(req->srv, id, req->caller.user_id, err);
    if (!j)
        return -1;
    api_reply(res, 200, j);
    return 0;
}

int api_admin_billing_check(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct billing_check c;

    if (billing_check(req->srv->store, &c, err) < 0)
        return -1;
    bool ok = c.bad_charged == 0 && c.bad_sums == 0 && c.bad_positions == 0 &&
              c.after_release == 0 && c.bad_keys == 0 && c.bad_txns == 0 &&
              c.charges_total == c.ledger_charges;
    api_reply(res, 200,
              json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "ok", ok, "meters",
                        (json_int_t)c.meters, "bad_charged", (json_int_t)c.bad_charged, "bad_sums",
                        (json_int_t)c.bad_sums, "bad_positions", (json_int_t)c.bad_positions,
                        "charged_after_release", (json_int_t)c.after_release, "bad_keys",
                        (json_int_t)c.bad_keys, "bad_transactions", (json_int_t)c.bad_txns,
                        "charges_total_micros", (json_int_t)c.charges_total,
                        "ledger_charges_micros", (json_int_t)c.ledger_charges));
    return 0;
}

int api_admin_billing_run(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct billing_stats s;

    if (api_body_fields(req, NULL, 0, err) < 0 || billing_run(req->srv, &s, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "meters", (json_int_t)s.meters,
                        "settlements", (json_int_t)s.settlements, "stopped", (json_int_t)s.stopped,
                        "warnings", (json_int_t)s.warnings, "released", (json_int_t)s.released,
                        "renewed", (json_int_t)s.renewed, "expired", (json_int_t)s.expired,
                        "elapsed_us", (json_int_t)s.elapsed_us));
    return 0;
}
