/* Hints (docs/design/metrics.md, "Hints"): what suanlid tells a renter
 * about a running instance from its metrics, before they have to look.
 *
 *   data_loader  GPUs busy < 30 % while the CPU share is saturated (>= 90 %)
 *                for 2 minutes: the data loader is the bottleneck
 *   system_disk  the system disk over 90 % full
 *   gpu_memory   a GPU's memory over 95 % of the card's for 30 s: OOM risk
 *   gpu_idle     every GPU idle (< 5 %) for an hour on pay-as-you-go: what
 *                it has cost idle and how to stop it
 *
 * Each is a condition on an instance's newest sample and a time it must
 * hold. A hint's state is a row of instance_hints (instance, kind, since,
 * shown_at): the condition starting sets since, holding for the kind's
 * time shows it (an event of kind "hint", which notifies, and a line in
 * `show` and the console), a sample without it ends it. A series not
 * measured (a simulated GPU has no NVML) neither starts nor ends a hint
 * that needs it. */
#ifndef SL_HINTS_H
#define SL_HINTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "store.h"
#include "../lib/error.h"
#include "../lib/series.h"

enum hint_kind {
    HINT_DATA_LOADER,
    HINT_SYSTEM_DISK,
    HINT_GPU_MEMORY,
    HINT_GPU_IDLE,
    HINT_KINDS
};

/* What a hint's rule reads of one instance: its newest values, NAN where
 * not measured, and what it is. */
struct hint_input {
    double cpu_share;                   /* of its quota, 1 = all */
    double system_used, system_size;    /* bytes */
    int gpus;                           /* GPUs with NVML values */
    double gpu_util[SL_SERIES_GPU_MAX]; /* percent */
    double gpu_memory[SL_SERIES_GPU_MAX];
    int64_t vram_bytes;           /* one card's memory (the catalog's model) */
    bool payg;                    /* pay-as-you-go with its GPUs (mode gpu) */
    int64_t rate_per_hour_micros; /* what it costs running now */
};

/* The kind's name ("data_loader"), and the seconds its condition must hold
 * before it shows. */
const char *hint_name(enum hint_kind k);
int64_t hint_hold_seconds(enum hint_kind k);

/* 1: the condition holds, 0: it does not, -1: not known (a series it needs
 * is not measured). */
int hint_condition(enum hint_kind k, const struct hint_input *in);

/* The message of a shown hint, for people: what is wrong and what to do
 * (instance id for the commands; held: seconds the condition has held;
 * currency of the amounts). */
char *hint_message(enum hint_kind k, const struct hint_input *in, const char *instance_id,
                   int64_t held, const char *currency);

/* The input from a sample by position (lib/series.h: values[pos] for pos <
 * n, have[pos] whether measured), and what the instance is. */
void hint_input_from_sample(struct hint_input *in, const double *values, const bool *have,
                            size_t n);

/* Runs every rule on the instance's newest sample at time t, moving the
 * hints' state in instance_hints and recording an event for each hint that
 * shows. Reads the instance's model and plan; an instance that is not
 * running has its hints ended. Runs in the caller's transaction. */
int hints_observe(struct store *st, const char *instance_id, int64_t t, const double *values,
                  const bool *have, size_t n, const char *currency, struct sl_error *err);

/* hints_observe on the newest sample suanlid holds of the instance from
 * node_id (instance_metrics_latest); nothing when there is none. */
int hints_observe_latest(struct store *st, const char *instance_id, const char *node_id,
                         const char *currency, struct sl_error *err);

/* The shown hints of a running instance: [{kind, since, message}] oldest
 * first (a new reference), [] for none. */
json_t *hints_of_instance(struct store *st, const char *instance_id, struct sl_error *err);

/* Ends the hints of instances that no longer run. */
int hints_sweep(struct store *st, struct sl_error *err);

#endif
