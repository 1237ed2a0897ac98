/* Billing through the API: bills and the charges behind them, meters,
 * plans, the renter's events, and the operator's check and run. */
#include "billing.h"
#include "billing-meters.h"
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

/* A bill being summed: its rows by their raw key (a day's number, an
 * instance, a kind, a user). */
struct bill {
    struct store *st;
    const char *by, *user_id;
    json_t *rows;
    int64_t total;
};

/* The name of an instance, the email of a user, for a row of the bill. */
static int bill_label(struct bill *b, const char *k, json_t *row, struct sl_error *err)
{
    const char *sql = strcmp(b->by, "instance") == 0 ? "SELECT name FROM instances WHERE id = ?1"
                      : strcmp(b->by, "user") == 0   ? "SELECT email FROM users WHERE id = ?1"
                                                     : NULL;
    int rc;

    if (!sql)
        return 0;
    cleanup_rows struct db_rows *rows = store_query(b->st, sql, DB_ARGS(DB_TEXT(k)), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    json_object_set_new(row, "label", json_string(rc ? db_text(rows, 0) : ""));
    return 0;
}

/* Adds charges of one kind (item) to the row of key k. label: the
 * row's, or NULL to look it up when the row is new. */
static int bill_add(struct bill *b, const char *k, const char *item, int64_t amount, int64_t count,
                    int64_t seconds, int64_t gpu_seconds, const char *label, struct sl_error *err)
{
    json_t *row = json_object_get(b->rows, k);

    if (!row) {
        row = json_pack("{s:s, s:I, s:I, s:I, s:I, s:{}}", "key", k, "amount_micros", (json_int_t)0,
                        "charges", (json_int_t)0, "seconds", (json_int_t)0, "gpu_seconds",
                        (json_int_t)0, "by_kind");
        json_object_set_new(b->rows, k, row);
        if (label)
            json_object_set_new(row, "label", json_string(label));
        else if (bill_label(b, k, row, err) < 0)
            return -1;
    }
    json_t *kinds = json_object_get(row, "by_kind");
    int64_t row_amount = json_integer_value(json_object_get(row, "amount_micros"));
    int64_t kind_amount = json_integer_value(json_object_get(kinds, item));
    if (sl_money_add(row_amount, amount, &row_amount, err) < 0 ||
        sl_money_add(kind_amount, amount, &kind_amount, err) < 0 ||
        sl_money_add(b->total, amount, &b->total, err) < 0)
        return -1;
    json_object_set_new(row, "amount_micros", json_integer(row_amount));
    json_object_set_new(kinds, item, json_integer(kind_amount));
#define ADD(field, v)                                                                              \
    json_object_set_new(row, field,                                                                \
                        json_integer(json_integer_value(json_object_get(row, field)) + (v)))
    ADD("charges", count);
    ADD("seconds", seconds);
    ADD("gpu_seconds", gpu_seconds);
#undef ADD
    return 0;
}

/* An open piece of a meter (billing_open_pieces) in the bill. */
static int bill_piece(const struct billing_piece *p, void *ctx, struct sl_error *err)
{
    struct bill *b = ctx;
    char day[24];
    const char *k = strcmp(b->by, "instance") == 0 ? p->instance_id
                    : strcmp(b->by, "kind") == 0   ? p->item
                    : strcmp(b->by, "user") == 0   ? p->user_id
                                                   : day;

    snprintf(day, sizeof(day), "%" PRId64, p->from / SL_SEC_PER_DAY);
    return bill_add(b, k, p->item, p->amount, 1, p->to - p->from,
                    strcmp(p->item, "gpu") == 0 ? (p->to - p->from) * p->quantity : 0, NULL, err);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The bill's rows in the order of their keys, labelled after `by`. */
static json_t *bill_rows(struct bill *b)
{
    size_t n = json_object_size(b->rows), i = 0;
    cleanup_free const char **keys = xcalloc(n + 1, sizeof(*keys));
    const char *k;
    json_t *row, *out = json_array();

    json_object_foreach(b->rows, k, row) keys[i++] = k;
    qsort(keys, n, sizeof(*keys), by_key);
    for (i = 0; i < n; i++) {
        row = json_object_get(b->rows, keys[i]);
        json_t *label = json_incref(json_object_get(row, "label"));
        json_object_del(row, "label");
        if (strcmp(b->by, "day") == 0) {
            char day[11];
            day_label(strtoll(keys[i], NULL, 10), day);
            json_object_set_new(row, "key", json_string(day));
            json_object_set_new(row, "day", json_string(day));
        } else if (strcmp(b->by, "instance") == 0) {
            json_object_set_new(row, "instance_id", json_string(keys[i]));
            json_object_set(row, "name", label);
        } else if (strcmp(b->by, "user") == 0) {
            json_object_set_new(row, "user_id", json_string(keys[i]));
            json_object_set(row, "email", label);
        } else {
            json_object_set_new(row, "kind", json_string(keys[i]));
        }
        json_decref(label);
        json_array_append(out, row);
    }
    return out;
}

/* A month's charges summed per day, kind, instance or (all renters only)
 * user: one renter's (GET /v1/bills) or, with user_id NULL, everyone's
 * (GET /v1/admin/bills), found through charges_user or charges_period,
 * and the open pieces of the meters (billed, not yet a day's row).
 * gpu_seconds: the GPU-seconds of pay-as-you-go gpu meters (their quantity
 * is the GPUs held), where seconds is the metered span of any kind. */
static int bills(struct api_request *req, struct api_response *res, const char *user_id,
                 struct sl_error *err)
{
    const char *by = api_query(req, "by");
    int64_t from, to;
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
        " GROUP BY k, c.item",
        key, label, all ? "?1 IS NULL" : "c.user_id = ?1");
    cleanup_json json_t *by_key_rows = json_object();
    struct bill b = { .st = req->srv->store, .by = by, .user_id = user_id, .rows = by_key_rows };
    {
        cleanup_rows struct db_rows *rows = store_query(
            req->srv->store, sql, DB_ARGS(DB_TEXT(user_id), DB_INT(from), DB_INT(to)), err);
        int rc;
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1)
            if (bill_add(&b, db_text(rows, 0), db_text(rows, 1), db_int(rows, 2), db_int(rows, 3),
                         db_int(rows, 4), db_int(rows, 6), db_text(rows, 5), err) < 0)
                return -1;
        if (rc < 0)
            return -1;
    }
    if (billing_open_pieces(req->srv->store, user_id, from, to, bill_piece, &b, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:s, s:s, s:s, s:I, s:o}", "month", month, "by", by, "currency",
                        req->srv->cfg.currency, "total_micros", (json_int_t)b.total, "rows",
                        bill_rows(&b)));
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
    return json_pack(
        "{s:I, s:s, s:s, s:s, s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o}", "seq",
        (json_int_t)db_int(rows, 0), "txn_id", db_text(rows, 1), "instance_id", db_text(rows, 2),
        "kind", db_text(rows, 3), "period_from", api_time(db_int(rows, 4)), "period_to",
        api_time(db_int(rows, 5)), "seconds", (json_int_t)(db_int(rows, 5) - db_int(rows, 4)),
        "amount_micros", (json_int_t)db_int(rows, 6), "created_at", api_time(db_int(rows, 7)),
        "meter_seq", metered ? json_integer(db_int(rows, 8)) : json_null(), "settlement",
        metered ? json_integer(db_int(rows, 9)) : json_null(), "open", json_false());
}

/* The open pieces a page of charges ends with. */
struct open_charges {
    json_t *items;
    const char *instance, *kind;
};

static int open_charge(const struct billing_piece *p, void *ctx, struct sl_error *err)
{
    struct open_charges *o = ctx;

    (void)err;
    if ((o->instance && strcmp(o->instance, p->instance_id) != 0) ||
        (o->kind && strcmp(o->kind, p->item) != 0))
        return 0;
    json_array_append_new(
        o->items,
        json_pack("{s:n, s:s, s:s, s:s, s:o, s:o, s:I, s:I, s:n, s:I, s:n, s:b}", "seq", "txn_id",
                  "", "instance_id", p->instance_id, "kind", p->item, "period_from",
                  api_time(p->from), "period_to", api_time(p->to), "seconds",
                  (json_int_t)(p->to - p->from), "amount_micros", (json_int_t)p->amount,
                  "created_at", "meter_seq", (json_int_t)p->meter_seq, "settlement", "open", 1));
    return 0;
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
    struct open_charges open = { .items = json_array(),
                                 .instance = api_query(req, "instance"),
                                 .kind = kind };
    cleanup_json json_t *items = open.items;
    int64_t last = 0;
    int rc;
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
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        last = db_int(rows, 0);
        json_array_append_new(items, charge_json(rows, NULL));
    }
    if (rc < 0)
        return -1;
    /* the open pieces after the last row */
    bool more = json_array_size(items) == (size_t)limit;
    if (!more && billing_open_pieces(req->srv->store, req->caller.user_id, from, to, open_charge,
                                     &open, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:O, s:o}", "items", items, "next_cursor",
                        more ? json_sprintf("%" PRId64, last) : json_null()));
    return 0;
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

/* A meter's columns for meter_json: its billed position (its host's mark
 * for an open one: billing-meters.h), where its charges rows reach. */
#define METER_JSON_COLUMNS                                                                         \
    "m.seq, m.item, m.quantity, m.unit_price_micros, m.amount_micros, m.period_s, m.started_at,"   \
    " m.ended_at, " METER_BILLED ", 0, m.settlements, m.region_id, m.settled_until"                \
    " FROM meters m LEFT JOIN billing_marks k ON k.node_id = m.node_id"

static json_t *meter_json(struct db_rows *rows, void *ctx)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t rate = 0, charged = 0;

    (void)ctx;
    /* cannot fail: a meter's period is positive, its amount >= 0, and
     * billing_check finds one whose formula overflows */
    if (sl_money_per_hour(db_int(rows, 4), db_int(rows, 5), &rate, &err) < 0 ||
        sl_money_prorate(db_int(rows, 4), db_int(rows, 8) - db_int(rows, 6), db_int(rows, 5),
                         &charged, &err) < 0)
        log_error("meter %" PRId64 ": %s", db_int(rows, 0), err.message);
    return json_pack(
        "{s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:I, s:I, s:o}", "seq",
        (json_int_t)db_int(rows, 0), "kind", db_text(rows, 1), "quantity",
        (json_int_t)db_int(rows, 2), "unit_price_micros", (json_int_t)db_int(rows, 3),
        "amount_micros", (json_int_t)db_int(rows, 4), "period_seconds", (json_int_t)db_int(rows, 5),
        "rate_per_hour_micros", (json_int_t)rate, "started_at", api_time(db_int(rows, 6)),
        "ended_at", db_null(rows, 7) ? json_null() : api_time(db_int(rows, 7)), "settled_until",
        api_time(db_int(rows, 8)), "charged_micros", (json_int_t)charged, "settlements",
        (json_int_t)db_int(rows, 10), "closed_until", api_time(db_int(rows, 12)));
}

int api_instances_meters(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    int64_t limit, after;

    if (api_page_params(req, &limit, &after, err) < 0)
        return -1;
    cleanup_rows struct db_rows *rows =
        store_query(req->srv->store,
                    "SELECT " METER_JSON_COLUMNS " WHERE m.instance_id = ?1 AND m.seq > ?2"
                    " ORDER BY m.seq LIMIT ?3",
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
        "SELECT " METER_JSON_COLUMNS " WHERE m.user_id = ?1 AND m.instance_id = '' AND m.seq > ?2"
        " ORDER BY m.seq LIMIT ?3",
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
              c.after_release == 0 && c.bad_keys == 0 && c.bad_txns == 0 && c.bad_renters == 0 &&
              c.charges_total == c.ledger_charges;
    api_reply(
        res, 200,
        json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "ok", ok, "meters",
                  (json_int_t)c.meters, "bad_charged", (json_int_t)c.bad_charged, "bad_sums",
                  (json_int_t)c.bad_sums, "bad_positions", (json_int_t)c.bad_positions,
                  "charged_after_release", (json_int_t)c.after_release, "bad_keys",
                  (json_int_t)c.bad_keys, "bad_transactions", (json_int_t)c.bad_txns, "bad_renters",
                  (json_int_t)c.bad_renters, "charges_total_micros", (json_int_t)c.charges_total,
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
