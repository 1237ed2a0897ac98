#include "metrics.h"
#include "api.h"
#include "../lib/timeconst.h"

#include <stdatomic.h>
#include <stddef.h>

#define MAX_ROUTES 128
#define N_CLASSES  5 /* 1xx..5xx */

static const int64_t bucket_us[] = { 500,   1000,   2500,   5000,   10000,   25000,
                                     50000, 100000, 250000, 500000, 1000000, 2500000 };
#define N_BUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]))

static _Atomic uint64_t requests[MAX_ROUTES + 1][N_CLASSES];
static _Atomic uint64_t buckets[N_BUCKETS + 1];
static _Atomic uint64_t duration_sum_us;
static _Atomic uint64_t duration_count;

void metrics_observe_request(const struct api_route *route, int status, int64_t duration_us)
{
    size_t r = route ? api_route_index(route) : MAX_ROUTES;
    int c = status / 100 - 1;

    if (r > MAX_ROUTES)
        r = MAX_ROUTES;
    if (c < 0 || c >= N_CLASSES)
        c = N_CLASSES - 1;
    atomic_fetch_add_explicit(&requests[r][c], 1, memory_order_relaxed);
    size_t b = 0;
    while (b < N_BUCKETS && duration_us > bucket_us[b])
        b++;
    atomic_fetch_add_explicit(&buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&duration_sum_us, (uint64_t)duration_us, memory_order_relaxed);
    atomic_fetch_add_explicit(&duration_count, 1, memory_order_relaxed);
}

static void render_route(struct sl_buf *out, const char *method, const char *pattern, size_t r)
{
    for (int c = 0; c < N_CLASSES; c++) {
        uint64_t n = atomic_load_explicit(&requests[r][c], memory_order_relaxed);
        if (n)
            sl_buf_addf(out,
                        "suanli_http_requests_total{method=\"%s\",route=\"%s\",code=\"%dxx\"} "
                        "%llu\n",
                        method, pattern, c + 1, (unsigned long long)n);
    }
}

void metrics_render_http(struct sl_buf *out)
{
    uint64_t cumulative = 0;

    sl_buf_adds(out, "# HELP suanli_http_requests_total HTTP requests by route and status class.\n"
                     "# TYPE suanli_http_requests_total counter\n");
    for (size_t r = 0; r < api_routes_count && r < MAX_ROUTES; r++)
        render_route(out, api_routes[r].method, api_routes[r].pattern, r);
    render_route(out, "ANY", "unmatched", MAX_ROUTES);
    sl_buf_adds(out, "# HELP suanli_http_request_duration_seconds Time to answer a request.\n"
                     "# TYPE suanli_http_request_duration_seconds histogram\n");
    for (size_t b = 0; b <= N_BUCKETS; b++) {
        cumulative += atomic_load_explicit(&buckets[b], memory_order_relaxed);
        if (b < N_BUCKETS)
            sl_buf_addf(out, "suanli_http_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
                        (double)bucket_us[b] / SL_USEC_PER_SEC, (unsigned long long)cumulative);
        else
            sl_buf_addf(out, "suanli_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
                        (unsigned long long)cumulative);
    }
    sl_buf_addf(out, "suanli_http_request_duration_seconds_sum %.6f\n",
                (double)atomic_load(&duration_sum_us) / SL_USEC_PER_SEC);
    sl_buf_addf(out, "suanli_http_request_duration_seconds_count %llu\n",
                (unsigned long long)atomic_load(&duration_count));
}
