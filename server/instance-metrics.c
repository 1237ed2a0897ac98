#include "instance-metrics.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/series.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One coarse bucket, or the aggregate of a query's step. */
struct agg {
    int64_t sum[SL_SERIES_MAX], max[SL_SERIES_MAX], count[SL_SERIES_MAX];
};

void instance_metrics_format_fine(struct sl_buf *out, const int64_t *values, const bool *have,
                                  size_t n)
{
    while (n > 0 && !have[n - 1])
        n--;
    for (size_t i = 0; i < n; i++) {
        if (i)
            sl_buf_adds(out, ",");
        if (have[i])
            sl_buf_addf(out, "%lld", (long long)values[i]);
    }
}

size_t instance_metrics_parse_fine(const char *text, int64_t *values, bool *have)
{
    size_t n = 0;
    const char *p = text;

    memset(have, 0, SL_SERIES_MAX * sizeof(*have));
    while (p && *p && n < SL_SERIES_MAX) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end != p) {
            values[n] = v;
            have[n] = true;
        }
        n++;
        p = strchr(end, ',');
        if (p)
            p++;
    }
    return n;
}

/* "SUM:MAX:COUNT,..." into a (added to what it holds). */
static void parse_coarse(const char *text, struct agg *a)
{
    const char *p = text;

    for (size_t i = 0; p && *p && i < SL_SERIES_MAX; i++) {
        if (*p != ',') {
            char *end;
            long long sum = strtoll(p, &end, 10), max = 0, count = 0;
            if (*end == ':')
                max = strtoll(end + 1, &end, 10);
            if (*end == ':')
                count = strtoll(end + 1, &end, 10);
            if (count > 0) {
                a->max[i] = a->count[i] ? (max > a->max[i] ? max : a->max[i]) : max;
                a->sum[i] += sum;
                a->count[i] += count;
            }
            p = end;
        }
        p = strchr(p, ',');
        if (p)
            p++;
    }
}

static void format_coarse(struct sl_buf *out, const struct agg *a)
{
    size_t n = SL_SERIES_MAX;

    while (n > 0 && !a->count[n - 1])
        n--;
    for (size_t i = 0; i < n; i++) {
        if (i)
            sl_buf_adds(out, ",");
        if (a->count[i])
            sl_buf_addf(out, "%lld:%lld:%lld", (long long)a->sum[i], (long long)a->max[i],
                        (long long)a->count[i]);
    }
}

static void agg_add(struct agg *a, size_t i, int64_t v)
{
    a->max[i] = a->count[i] ? (v > a->max[i] ? v : a->max[i]) : v;
    a->sum[i] += v;
    a->count[i]++;
}

/* A JSON value into its stored integer: finite, >= 0, not absurdly large. */
static bool scaled(json_t *v, int64_t scale, int64_t *out)
{
    double d;

    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else
        return false;
    if (!(d >= 0 && d <= 1e15))
        return false;
    *out = (int64_t)(d * (double)scale + 0.5);
    return true;
}

/* The coarse bucket at t into a (zeroed first). */
static int coarse_load(struct store *st, const char *id, int64_t t, struct agg *a,
                       struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT data FROM instance_metrics"
                    " WHERE instance_id = ?1 AND tier = 1 AND t = ?2",
                    DB_ARGS(DB_TEXT(id), DB_INT(t)), err);
    int rc;

    memset(a, 0, sizeof(*a));
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 1)
        parse_coarse(db_text(rows, 0), a);
    return 0;
}

static int coarse_save(struct store *st, const char *id, int64_t t, const struct agg *a,
                       struct sl_error *err)
{
    cleanup_buf struct sl_buf text = SL_BUF_INIT;
    int64_t n = 0;

    for (size_t i = 0; i < SL_SERIES_MAX; i++)
        n = a->count[i] > n ? a->count[i] : n;
    format_coarse(&text, a);
    return store_exec(st,
                      "INSERT INTO instance_metrics (instance_id, tier, t, n, data)"
                      " VALUES (?1, 1, ?2, ?3, ?4) ON CONFLICT (instance_id, tier, t)"
                      " DO UPDATE SET n = excluded.n, data = excluded.data",
                      DB_ARGS(DB_TEXT(id), DB_INT(t), DB_INT(n), DB_TEXT(text.data ?: "")), err) < 0
               ? -1
               : 0;
}

/* The samples of one entry: each a fine row of its own (a burst between
 * two samples shows in one of them: a slot that kept only its first would
 * lose it), all of them folded into their coarse buckets (each bucket
 * read and written once). */
static int store_samples(struct store *st, const struct metrics_policy *p, const char *id,
                         json_t *samples, const int *positions, size_t n_names, int64_t latest,
                         int64_t now, int64_t *newest, struct sl_buf *last, struct sl_error *err)
{
    struct agg *a = xzalloc(sizeof(*a));
    int64_t values[SL_SERIES_MAX], bucket = -1;
    bool have[SL_SERIES_MAX];
    size_t i;
    json_t *s;

    json_array_foreach(samples, i, s)
    {
        int64_t t = json_integer_value(json_array_get(s, 0));
        if (!json_is_array(s) || json_array_size(s) != n_names + 1 ||
            !json_is_integer(json_array_get(s, 0)) || t < latest + METRICS_MIN_SPACING ||
            (*newest && t < *newest + METRICS_MIN_SPACING) || t > now + METRICS_FUTURE_SKEW ||
            t < now - p->fine_keep)
            continue;
        memset(have, 0, sizeof(have));
        for (size_t k = 0; k < n_names; k++) {
            unsigned gpu;
            const struct sl_series *series = sl_series_at(positions[k], &gpu);
            if (series && !have[positions[k]])
                have[positions[k]] =
                    scaled(json_array_get(s, k + 1), series->scale, &values[positions[k]]);
        }
        sl_buf_reset(last);
        instance_metrics_format_fine(last, values, have, SL_SERIES_MAX);
        if (store_exec(st,
                       "INSERT INTO instance_metrics (instance_id, tier, t, n, data)"
                       " VALUES (?1, 0, ?2, 1, ?3) ON CONFLICT (instance_id, tier, t) DO NOTHING",
                       DB_ARGS(DB_TEXT(id), DB_INT(t), DB_TEXT(last->data ?: "")), err) < 0)
            goto fail;
        if (t - t % p->coarse_step != bucket) {
            if ((bucket >= 0 && coarse_save(st, id, bucket, a, err) < 0) ||
                coarse_load(st, id, t - t % p->coarse_step, a, err) < 0)
                goto fail;
            bucket = t - t % p->coarse_step;
        }
        for (size_t k = 0; k < SL_SERIES_MAX; k++)
            if (have[k])
                agg_add(a, k, values[k]);
        *newest = t;
    }
    if (bucket >= 0 && coarse_save(st, id, bucket, a, err) < 0)
        goto fail;
    free(a);
    return 0;
fail:
    free(a);
    return -1;
}

/* The absent map, checked: names of series, short reasons. */
static json_t *absent_checked(json_t *absent)
{
    json_t *out = json_object(), *v;
    const char *name;

    json_object_foreach(absent, name, v)
    {
        if (json_object_size(out) >= SL_SERIES_MAX || sl_series_position(name) < 0 ||
            !json_is_string(v) || json_string_length(v) > 200)
            continue;
        json_object_set(out, name, v);
    }
    return out;
}

/* One entry {id, names, samples, absent}: 1 stored, 0 skipped, -1 error. */
static int apply_entry(struct store *st, const struct metrics_policy *p, const char *node_id,
                       json_t *e, int64_t now, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(e, "id"));
    json_t *names = json_object_get(e, "names"), *samples = json_object_get(e, "samples");
    int positions[SL_SERIES_MAX];
    int64_t latest = 0;
    size_t n_names = json_array_size(names), i;
    int rc;

    if (!id || !json_is_array(names) || n_names > SL_SERIES_MAX || !json_is_array(samples) ||
        json_array_size(samples) > METRICS_SAMPLES_MAX)
        return 0;
    /* a node speaks for the instances placed on it, no others */
    rc = store_get_int(st,
                       "SELECT COUNT(*) FROM instances"
                       " WHERE id = ?1 AND node_id = ?2 AND state != 'released'",
                       DB_ARGS(DB_TEXT(id), DB_TEXT(node_id)), &latest, err);
    if (rc < 0)
        return -1;
    if (latest == 0)
        return 0;
    for (i = 0; i < n_names; i++) {
        const char *name = json_string_value(json_array_get(names, i));
        positions[i] = name ? sl_series_position(name) : -1;
    }
    latest = 0;
    if (store_get_int(st, "SELECT t FROM instance_metrics_latest WHERE instance_id = ?1",
                      DB_ARGS(DB_TEXT(id)), &latest, err) < 0)
        return -1;
    int64_t newest = 0;
    cleanup_buf struct sl_buf last = SL_BUF_INIT;
    if (store_samples(st, p, id, samples, positions, n_names, latest, now, &newest, &last, err) < 0)
        return -1;
    if (!newest)
        return 1;
    cleanup_json json_t *absent = absent_checked(json_object_get(e, "absent"));
    cleanup_free char *absent_text = json_dumps(absent, JSON_COMPACT | JSON_SORT_KEYS);
    if (store_exec(st,
                   "INSERT INTO instance_metrics_latest (instance_id, node_id, t, data, absent)"
                   " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (instance_id) DO UPDATE SET"
                   " node_id = excluded.node_id, t = excluded.t, data = excluded.data,"
                   " absent = excluded.absent",
                   DB_ARGS(DB_TEXT(id), DB_TEXT(node_id), DB_INT(newest), DB_TEXT(last.data ?: ""),
                           DB_TEXT(absent_text)),
                   err) < 0)
        return -1;
    /* this instance's rows past their keep: a few at a time, by the key */
    if (store_exec(st,
                   "DELETE FROM instance_metrics WHERE instance_id = ?1 AND tier = 0 AND t < ?2",
                   DB_ARGS(DB_TEXT(id), DB_INT(now - p->fine_keep)), err) < 0 ||
        store_exec(st,
                   "DELETE FROM instance_metrics WHERE instance_id = ?1 AND tier = 1 AND t < ?2",
                   DB_ARGS(DB_TEXT(id), DB_INT(now - p->coarse_keep)), err) < 0)
        return -1;
    return 1;
}

int instance_metrics_apply(struct store *st, const struct metrics_policy *p, const char *node_id,
                           json_t *metrics, int64_t now, size_t *skipped, struct sl_error *err)
{
    size_t i;
    json_t *e;

    *skipped = 0;
    json_array_foreach(metrics, i, e)
    {
        int rc = apply_entry(st, p, node_id, e, now, err);
        if (rc < 0)
            return -1;
        if (rc == 0)
            (*skipped)++;
    }
    return 0;
}

int instance_metrics_sweep(struct store *st, const struct metrics_policy *p, int64_t now,
                           struct sl_error *err)
{
    if (store_exec(st, "DELETE FROM instance_metrics WHERE tier = 0 AND t < ?1",
                   DB_ARGS(DB_INT(now - p->fine_keep)), err) < 0 ||
        store_exec(st, "DELETE FROM instance_metrics WHERE tier = 1 AND t < ?1",
                   DB_ARGS(DB_INT(now - p->coarse_keep)), err) < 0)
        return -1;
    /* the latest sample of an instance gone quiet for the whole keep */
    return store_exec(st, "DELETE FROM instance_metrics_latest WHERE t < ?1",
                      DB_ARGS(DB_INT(now - p->coarse_keep)), err) < 0
               ? -1
               : 0;
}

/* Appends n in decimal to p; returns the end. */
static char *put_int(char *p, int64_t n)
{
    char tmp[24];
    size_t k = 0;
    uint64_t u = n < 0 ? (uint64_t)-n : (uint64_t)n;

    if (n < 0)
        *p++ = '-';
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (k)
        *p++ = tmp[--k];
    return p;
}

/* A value as JSON: an integer when it is one, else four decimals (no
 * printf: a month is some 300,000 points). v >= 0. */
static char *put_number(char *p, double v)
{
    int64_t scaled = (int64_t)(v * 10000 + 0.5);

    p = put_int(p, scaled / 10000);
    if (scaled % 10000) {
        int64_t frac = scaled % 10000;
        *p++ = '.';
        for (int64_t d = 1000; d > 0 && frac; d /= 10) {
            *p++ = (char)('0' + frac / d);
            frac %= d;
        }
    }
    return p;
}

/* The points of each position, built step by step as JSON text: a month
 * is some 300,000 points, too many to make a JSON object each. */
struct points {
    struct sl_buf avg[SL_SERIES_MAX], max[SL_SERIES_MAX];
};

static void add_point(struct sl_buf *b, int64_t t, double v)
{
    char text[64], *p = text;

    if (b->len)
        *p++ = ',';
    *p++ = '[';
    p = put_int(p, t);
    *p++ = ',';
    p = v < 1e15 ? put_number(p, v) : put_int(p, (int64_t)v);
    *p++ = ']';
    sl_buf_add(b, text, (size_t)(p - text));
}

static void emit_step(struct points *pts, int64_t t, const struct agg *a)
{
    for (int i = 0; i < SL_SERIES_MAX; i++) {
        if (!a->count[i])
            continue;
        unsigned gpu;
        double scale = (double)sl_series_at(i, &gpu)->scale;
        add_point(&pts->avg[i], t, (double)a->sum[i] / (double)a->count[i] / scale);
        add_point(&pts->max[i], t, (double)a->max[i] / scale);
    }
}

static void add_map(struct sl_buf *out, const char *key, struct sl_buf *bufs)
{
    char name[SL_SERIES_NAME_MAX];
    bool first = true;

    sl_buf_addf(out, ",\"%s\":{", key);
    for (int i = 0; i < SL_SERIES_MAX; i++) {
        if (!bufs[i].len)
            continue;
        sl_series_name(i, name);
        sl_buf_addf(out, "%s\"%s\":[", first ? "" : ",", name);
        sl_buf_add(out, bufs[i].data, bufs[i].len);
        sl_buf_adds(out, "]");
        first = false;
    }
    sl_buf_adds(out, "}");
}

/* Reads the rows of the tier into pts; -1 on error. */
static int read_points(struct store *st, const char *instance_id, bool coarse, int64_t row_from,
                       int64_t from, int64_t to, int64_t step, struct points *pts,
                       struct sl_error *err)
{
    struct agg *a = xzalloc(sizeof(*a));
    int64_t values[SL_SERIES_MAX], current = INT64_MIN;
    bool have[SL_SERIES_MAX], any = false;
    int rc;
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT t, data FROM instance_metrics"
        " WHERE instance_id = ?1 AND tier = ?2 AND t >= ?3 AND t < ?4 ORDER BY t",
        DB_ARGS(DB_TEXT(instance_id), DB_INT(coarse ? 1 : 0), DB_INT(row_from), DB_INT(to)), err);

    if (!rows) {
        free(a);
        return -1;
    }
    while ((rc = db_next(rows, err)) == 1) {
        int64_t t = db_int(rows, 0);
        int64_t at = t < from ? from : from + (t - from) / step * step;
        if (at != current) {
            if (any)
                emit_step(pts, current, a);
            memset(a, 0, sizeof(*a));
            current = at;
        }
        any = true;
        if (coarse) {
            parse_coarse(db_text(rows, 1), a);
        } else {
            size_t n = instance_metrics_parse_fine(db_text(rows, 1), values, have);
            for (size_t i = 0; i < n; i++)
                if (have[i])
                    agg_add(a, i, values[i]);
        }
    }
    if (rc == 0 && any)
        emit_step(pts, current, a);
    free(a);
    return rc < 0 ? -1 : 0;
}

char *instance_metrics_query(struct store *st, const struct metrics_policy *p,
                             const char *instance_id, int64_t from, int64_t to, int64_t step,
                             int64_t now, size_t *len, struct sl_error *err)
{
    bool coarse = step >= p->coarse_step || from < now - p->fine_keep;
    struct points *pts = xzalloc(sizeof(*pts));
    cleanup_buf struct sl_buf out = SL_BUF_INIT;
    cleanup_free char *absent = NULL;
    char f[SL_TIME_FORMAT_MAX], t[SL_TIME_FORMAT_MAX], name[SL_SERIES_NAME_MAX];
    int rc = read_points(st, instance_id, coarse, from - from % (coarse ? p->coarse_step : 1), from,
                         to, step, pts, err);

    if (rc == 0) {
        cleanup_rows struct db_rows *latest =
            store_query(st, "SELECT absent FROM instance_metrics_latest WHERE instance_id = ?1",
                        DB_ARGS(DB_TEXT(instance_id)), err);
        if (!latest || (rc = db_next(latest, err)) < 0)
            rc = -1;
        else if (rc == 1 && db_text(latest, 0)[0] == '{')
            absent = xstrdup(db_text(latest, 0)); /* made by absent_checked: JSON */
    }
    if (rc >= 0) {
        /* an instance id is letters, digits and '-' (lib/id.h) */
        sl_buf_addf(&out,
                    "{\"instance_id\":\"%s\",\"from\":\"%s\",\"to\":\"%s\","
                    "\"step_seconds\":%lld,\"tier\":\"%s\"",
                    instance_id, sl_time_format(from, f), sl_time_format(to, t), (long long)step,
                    coarse ? "coarse" : "fine");
        add_map(&out, "series", pts->avg);
        add_map(&out, "max", pts->max);
        sl_buf_adds(&out, ",\"units\":{");
        bool first = true;
        for (int i = 0; i < SL_SERIES_MAX; i++) {
            unsigned gpu;
            if (!pts->avg[i].len)
                continue;
            sl_series_name(i, name);
            sl_buf_addf(&out, "%s\"%s\":\"%s\"", first ? "" : ",", name,
                        sl_series_at(i, &gpu)->unit);
            first = false;
        }
        sl_buf_addf(&out, "},\"absent\":%s}", absent ? absent : "{}");
    }
    for (int i = 0; i < SL_SERIES_MAX; i++) {
        sl_buf_release(&pts->avg[i]);
        sl_buf_release(&pts->max[i]);
    }
    free(pts);
    return rc < 0 ? NULL : sl_buf_detach(&out, len);
}

int instance_metrics_render_prom(struct store *st, struct sl_buf *out, int64_t now, int64_t stale,
                                 struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT l.instance_id, i.user_id, l.data FROM instance_metrics_latest l"
                    " JOIN instances i ON i.id = l.instance_id"
                    " WHERE i.state = 'running' AND l.t >= ?1 ORDER BY l.instance_id",
                    DB_ARGS(DB_INT(now - stale)), err);
    struct sl_series_latest *items = NULL;
    double *values = NULL;
    char **ids = NULL;
    size_t n = 0, cap = 0;
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            items = xrealloc(items, cap * sizeof(*items));
            values = xrealloc(values, cap * SL_SERIES_MAX * sizeof(*values));
            ids = xrealloc(ids, cap * 2 * sizeof(*ids));
        }
        int64_t v[SL_SERIES_MAX];
        bool have[SL_SERIES_MAX];
        size_t k = instance_metrics_parse_fine(db_text(rows, 2), v, have);
        for (size_t i = 0; i < k; i++) {
            unsigned gpu;
            values[n * SL_SERIES_MAX + i] =
                have[i] ? (double)v[i] / (double)sl_series_at((int)i, &gpu)->scale : NAN;
        }
        ids[2 * n] = xstrdup(db_text(rows, 0));
        ids[2 * n + 1] = xstrdup(db_text(rows, 1));
        n++;
        items[n - 1] = (struct sl_series_latest){ .n = k };
    }
    for (size_t i = 0; i < n; i++) {
        items[i].instance_id = ids[2 * i];
        items[i].renter = ids[2 * i + 1];
        items[i].values = &values[i * SL_SERIES_MAX];
    }
    if (rc == 0)
        sl_series_render_prom(out, items, n);
    for (size_t i = 0; i < 2 * n; i++)
        free(ids[i]);
    free(ids);
    free(items);
    free(values);
    return rc < 0 ? -1 : 0;
}
