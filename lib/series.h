/* The series of an instance's metrics, declared once for the agent that
 * samples them (node/metrics.h), suanlid that stores and serves them
 * (server/instance-metrics.h) and both /metrics (Prometheus): their names,
 * units, the fixed point suanlid stores them in, and their Prometheus
 * family. docs/design/metrics.md lists them.
 *
 * A series has a position: the base series 0..SL_SERIES_BASE-1 in table
 * order, then SL_SERIES_PER_GPU per GPU of the instance (the instance's own
 * GPU numbers, as nvidia-smi inside shows them): "gpuK_NAME" is at
 * SL_SERIES_BASE + K * SL_SERIES_PER_GPU + j. Positions only grow: a new
 * series is added at the end of its table, never between. */
#ifndef SL_SERIES_H
#define SL_SERIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define SL_SERIES_BASE     13
#define SL_SERIES_PER_GPU  4
#define SL_SERIES_GPU_MAX  16
#define SL_SERIES_MAX      (SL_SERIES_BASE + SL_SERIES_PER_GPU * SL_SERIES_GPU_MAX)
#define SL_SERIES_NAME_MAX 64

struct sl_series {
    const char *name;
    const char *unit;   /* "cores", "ratio", "bytes", "bytes/s", "count", "percent", ... */
    int64_t scale;      /* stored as round(value * scale), an integer */
    const char *family; /* Prometheus: suanli_instance_<family> */
    const char *label;  /* a fixed label of the family ("disk=\"system\""), or NULL */
    const char *help;
};

extern const struct sl_series sl_series_base[SL_SERIES_BASE];
extern const struct sl_series sl_series_gpu[SL_SERIES_PER_GPU];

/* The position of a series name, or -1 for a name this version does not
 * know (a newer agent's: ignored, not refused). */
int sl_series_position(const char *name);

/* The series at pos (its GPU number in *gpu, 0 for the base ones), or NULL
 * past SL_SERIES_MAX. */
const struct sl_series *sl_series_at(int pos, unsigned *gpu);

/* The name at pos into out (SL_SERIES_NAME_MAX bytes). */
void sl_series_name(int pos, char *out);

/* The latest values of one instance, for sl_series_render_prom: values[pos]
 * for pos < n, NAN where unknown. */
struct sl_series_latest {
    const char *instance_id;
    const char *renter;
    const double *values;
    size_t n;
};

/* Appends the Prometheus text (0.0.4) of the instances' latest values: one
 * family per series, gauges labelled instance_id and renter (and gpu,
 * disk). The label is instance_id, not instance: Prometheus sets instance
 * to the scraped target itself. */
void sl_series_render_prom(struct sl_buf *out, const struct sl_series_latest *items, size_t n);

#endif
