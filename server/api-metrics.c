/* GET /v1/instances/{id}/metrics?from&to&step: an instance's metrics
 * (instance-metrics.h), for its owner and admins. */
#include "instance-metrics.h"
#include "routes.h"

#include "../lib/timefmt.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_WINDOW 3600

void api_metrics_policy(const struct server *srv, struct metrics_policy *p)
{
    *p = (struct metrics_policy){ .fine_step = METRICS_FINE_STEP,
                                  .fine_keep = srv->cfg.metrics_fine_keep,
                                  .coarse_step = METRICS_COARSE_STEP,
                                  .coarse_keep = srv->cfg.metrics_coarse_keep };
}

/* RFC 3339 or Unix seconds. */
static int time_param(struct api_request *req, const char *name, int64_t def, int64_t *out,
                      struct sl_error *err)
{
    const char *v = api_query(req, name);
    char *end;

    *out = def;
    if (!v)
        return 0;
    long long n = strtoll(v, &end, 10);
    if (*v && !*end && n >= 0) {
        *out = n;
        return 0;
    }
    struct sl_error e = SL_ERROR_INIT;
    if (sl_time_parse(v, out, &e) < 0)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "'%s' must be an RFC 3339 time (2026-12-01T08:00:00Z) or Unix seconds",
                       name);
    return 0;
}

int api_instances_metrics(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct metrics_policy p;
    int64_t now = sl_time_now(), from, to, step = 0;
    const char *step_text = api_query(req, "step");

    api_metrics_policy(req->srv, &p);
    if (time_param(req, "to", now, &to, err) < 0 ||
        time_param(req, "from", to - DEFAULT_WINDOW, &from, err) < 0)
        return -1;
    if (from >= to)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter", "'from' must be before 'to'");
    if (step_text) {
        struct sl_error e = SL_ERROR_INIT;
        if (sl_duration_parse(step_text, &step, &e) < 0 || step <= 0)
            return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                           "'step' must be a duration such as 10s, 5m or 1h (or seconds)");
    }
    int64_t span = to - from;
    int64_t least = (span + METRICS_POINTS_MAX - 1) / METRICS_POINTS_MAX;
    if (!step_text) {
        /* about 300 points, in whole fine steps */
        step = (span / 300 + p.fine_step - 1) / p.fine_step * p.fine_step;
        if (step < p.fine_step)
            step = p.fine_step;
        if (step > p.coarse_step) /* whole coarse buckets in each step */
            step = (step + p.coarse_step - 1) / p.coarse_step * p.coarse_step;
    } else if (step < least) {
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "at most %d points per series: for this window, step at least %llds",
                       METRICS_POINTS_MAX, (long long)least);
    }
    size_t len;
    char *text = instance_metrics_query(req->srv->store, &p, req->instance.id, from, to, step, now,
                                        &len, err);
    if (!text)
        return -1;
    res->raw = text;
    res->raw_len = len;
    res->content_type = "application/json";
    res->status = 200;
    return 0;
}
