/* Prometheus metrics of suanlid: lock-free counters per route. */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stdint.h>

#include "../lib/buf.h"

struct api_route;

/* route may be NULL (no route matched). */
void metrics_observe_request(const struct api_route *route, int status, int64_t duration_us);

/* Appends the HTTP metrics in Prometheus text format. */
void metrics_render_http(struct sl_buf *out);

#endif
