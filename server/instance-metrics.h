/* Metrics per instance in the store (docs/design/metrics.md): the samples
 * agents send with their heartbeats, kept in two tiers with retention, read
 * back for GET /v1/instances/{id}/metrics and Prometheus.
 *
 * Table instance_metrics (migration 14), one row per (instance, tier, t):
 *  - tier 0, fine: every sample (the agent's metrics.interval_s, 10 s by
 *    default; one closer than METRICS_MIN_SPACING to the previous is
 *    dropped), kept fine_keep (a day); data is the values by position
 *    (lib/series.h), scaled to integers, comma-separated, empty for none:
 *    "1234,,56".
 *  - tier 1, coarse: every sample of a coarse_step bucket (5 min) folded in
 *    as it arrives, kept coarse_keep (31 days); data is "SUM:MAX:COUNT" by
 *    position, comma-separated, empty for none.
 * instance_metrics_latest holds each instance's newest sample (Prometheus)
 * and the series it lacks with why (`absent`). Rows older than their
 * tier's keep go: those of the reporting instance at each heartbeat, every
 * instance's (stopped, released) at most once a minute. */
#ifndef SL_INSTANCE_METRICS_H
#define SL_INSTANCE_METRICS_H

#include <jansson.h>
#include <stdint.h>

#include "store.h"
#include "../lib/buf.h"
#include "../lib/error.h"

struct metrics_policy {
    int64_t fine_step, fine_keep;     /* seconds */
    int64_t coarse_step, coarse_keep; /* seconds */
};

#define METRICS_FINE_STEP   10 /* the least default step of a fine answer */
#define METRICS_MIN_SPACING 2  /* seconds between two samples kept */
#define METRICS_COARSE_STEP 300
#define METRICS_SAMPLES_MAX 1000  /* per instance and heartbeat */
#define METRICS_POINTS_MAX  10000 /* per series and query: a month at 5 min, a day at 10 s */
#define METRICS_FUTURE_SKEW 120   /* a sample this far ahead of suanlid's clock is refused */
#define METRICS_PROM_STALE  300   /* /metrics leaves out samples older than this */

struct server;
/* The policy of srv's options (metrics.fine_keep, metrics.coarse_keep). */
void api_metrics_policy(const struct server *srv, struct metrics_policy *p);

/* Stores a heartbeat's "metrics" ([{id, names, samples, absent}], node
 * agent's shape: node/metrics.h) from node_id. An entry for an instance
 * that is not on node_id (another node's, a released one, none) is skipped,
 * as are malformed entries, samples not newer than the instance's latest
 * (a heartbeat sent again), from the future or older than fine_keep, and
 * values that are not finite numbers >= 0: an agent is never refused for
 * them (its heartbeat would fail for good). *skipped counts the entries
 * skipped. Runs in the caller's transaction. */
int instance_metrics_apply(struct store *st, const struct metrics_policy *p, const char *node_id,
                           json_t *metrics, int64_t now, size_t *skipped, struct sl_error *err);

/* Deletes what is past its tier's keep, for every instance. */
int instance_metrics_sweep(struct store *st, const struct metrics_policy *p, int64_t now,
                           struct sl_error *err);

/* The metrics of one instance from `from` to `to` (Unix seconds) in steps
 * of `step` seconds, as JSON text (a month is some 300,000 points: made as
 * text, not as JSON objects): {from, to, step_seconds, tier, series:
 * {name: [[t, avg], ...]}, max: {name: [[t, max], ...]}, units: {name:
 * unit}, absent: {name: reason}}, t the start of each step (Unix seconds),
 * steps with no sample left out. The fine tier answers when it covers
 * `from` and the step is under coarse_step; the coarse one otherwise.
 * NULL on error; the caller frees it. */
char *instance_metrics_query(struct store *st, const struct metrics_policy *p,
                             const char *instance_id, int64_t from, int64_t to, int64_t step,
                             int64_t now, size_t *len, struct sl_error *err);

/* Appends the Prometheus text of the latest sample of each running
 * instance (lib/series.h's families, instance_id and renter labels);
 * samples older than stale seconds are left out. */
int instance_metrics_render_prom(struct store *st, struct sl_buf *out, int64_t now, int64_t stale,
                                 struct sl_error *err);

/* The formats of the data column, exported for the unit tests. values[pos]
 * scaled, have[pos] whether known; n positions. */
void instance_metrics_format_fine(struct sl_buf *out, const int64_t *values, const bool *have,
                                  size_t n);
/* Parses a fine row into values/have (SL_SERIES_MAX), returns positions. */
size_t instance_metrics_parse_fine(const char *text, int64_t *values, bool *have);

#endif
