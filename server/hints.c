/* Hints from an instance's metrics (hints.h): the rules, and their state
 * in the store. */
#include "hints.h"

#include "billing.h"
#include "instance-metrics.h"
#include "instances.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/money.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <math.h>
#include <string.h>

#define CPU_SATURATED   0.9  /* of the instance's CPU quota */
#define GPU_STARVED     30.0 /* percent busy, on average over its GPUs */
#define DISK_FULL       0.9
#define GPU_MEMORY_FULL 0.95
#define GPU_IDLE        5.0 /* percent busy, every GPU */

static const struct {
    const char *name;
    int64_t hold;
} kinds[HINT_KINDS] = {
    [HINT_DATA_LOADER] = { "data_loader", 2 * SL_SEC_PER_MIN },
    [HINT_SYSTEM_DISK] = { "system_disk", 0 },
    [HINT_GPU_MEMORY] = { "gpu_memory", 30 },
    [HINT_GPU_IDLE] = { "gpu_idle", SL_SEC_PER_HOUR },
};

const char *hint_name(enum hint_kind k)
{
    return kinds[k].name;
}

int64_t hint_hold_seconds(enum hint_kind k)
{
    return kinds[k].hold;
}

static double gpu_util_average(const struct hint_input *in)
{
    double sum = 0;

    for (int g = 0; g < in->gpus; g++)
        sum += in->gpu_util[g];
    return sum / in->gpus;
}

int hint_condition(enum hint_kind k, const struct hint_input *in)
{
    switch (k) {
    case HINT_DATA_LOADER:
        if (in->gpus == 0 || isnan(in->cpu_share))
            return -1;
        return in->cpu_share >= CPU_SATURATED && gpu_util_average(in) < GPU_STARVED;
    case HINT_SYSTEM_DISK:
        if (isnan(in->system_used) || isnan(in->system_size) || in->system_size <= 0)
            return -1;
        return in->system_used > DISK_FULL * in->system_size;
    case HINT_GPU_MEMORY:
        if (in->gpus == 0 || in->vram_bytes <= 0)
            return -1;
        for (int g = 0; g < in->gpus; g++)
            if (in->gpu_memory[g] > GPU_MEMORY_FULL * (double)in->vram_bytes)
                return 1;
        return 0;
    case HINT_GPU_IDLE:
        if (in->gpus == 0)
            return -1;
        if (!in->payg)
            return 0;
        for (int g = 0; g < in->gpus; g++)
            if (in->gpu_util[g] >= GPU_IDLE)
                return 0;
        return 1;
    case HINT_KINDS:
        break;
    }
    return -1;
}

char *hint_message(enum hint_kind k, const struct hint_input *in, const char *instance_id,
                   int64_t held, const char *currency)
{
    char cost[SL_MONEY_FORMAT_MAX], rate[SL_MONEY_FORMAT_MAX], span[SL_DURATION_FORMAT_MAX];
    struct sl_error e = SL_ERROR_INIT;
    int64_t spent = 0;

    switch (k) {
    case HINT_DATA_LOADER:
        return xasprintf("the GPUs are %.0f%% busy while the CPU share is %.0f%% used: the data "
                         "loader is the bottleneck. Use more loader workers (num_workers), "
                         "pin_memory=True, and keep the data on /root/data, not the system disk",
                         gpu_util_average(in), in->cpu_share * 100);
    case HINT_SYSTEM_DISK:
        return xasprintf("the system disk is %.0f%% full: move data to /root/data before the "
                         "system disk fills (`du -sh /root/* | sort -h` shows what is big)",
                         in->system_used / in->system_size * 100);
    case HINT_GPU_MEMORY:
        return xasprintf("a GPU's memory is over %.0f%% used: the next larger batch or sequence "
                         "may run out of memory (CUDA out of memory). Lower the batch size, use "
                         "bf16/fp16 or gradient checkpointing, or pick a card that fits "
                         "(`suanli estimate`)",
                         GPU_MEMORY_FULL * 100);
    case HINT_GPU_IDLE:
        if (sl_money_charged(in->rate_per_hour_micros, held, &spent, &e) < 0)
            sl_error_clear(&e);
        return xasprintf("the GPUs have been idle for %s on pay-as-you-go: %s %s so far at %s "
                         "%s/h. Stop it (`suanli stop %s`), or let suanli stop it when idle "
                         "(`suanli idle-stop %s --after 30m`)",
                         sl_duration_format(held, span), sl_money_format(spent, cost),
                         currency ? currency : "", sl_money_format(in->rate_per_hour_micros, rate),
                         currency ? currency : "", instance_id, instance_id);
    case HINT_KINDS:
        break;
    }
    return xstrdup("");
}

void hint_input_from_sample(struct hint_input *in, const double *values, const bool *have, size_t n)
{
    char name[SL_SERIES_NAME_MAX];
    unsigned gpu;

    in->cpu_share = in->system_used = in->system_size = NAN;
    in->gpus = 0;
    for (size_t pos = 0; pos < n; pos++) {
        if (!have[pos] || !isfinite(values[pos]))
            continue;
        const struct sl_series *s = sl_series_at((int)pos, &gpu);
        if (!s)
            break;
        sl_series_name((int)pos, name);
        if (strcmp(name, "cpu_share") == 0)
            in->cpu_share = values[pos];
        else if (strcmp(name, "system_disk_used_bytes") == 0)
            in->system_used = values[pos];
        else if (strcmp(name, "system_disk_size_bytes") == 0)
            in->system_size = values[pos];
        else if (pos >= SL_SERIES_BASE && strcmp(s->name, "utilization_percent") == 0) {
            in->gpu_util[gpu] = values[pos];
            if ((int)gpu + 1 > in->gpus)
                in->gpus = (int)gpu + 1;
        } else if (pos >= SL_SERIES_BASE && strcmp(s->name, "memory_used_bytes") == 0)
            in->gpu_memory[gpu] = values[pos];
    }
}

/* What the rules need of the instance; 0 when it does not run (its hints
 * end), 1, or -1. */
static int instance_facts(struct store *st, const char *instance_id, struct hint_input *in,
                          struct sl_error *err)
{
    cleanup_rows struct db_rows *rows = store_query(
        st,
        "SELECT m.vram_mib, i.plan, i.mode, i.gpus FROM instances i"
        " JOIN gpu_models m ON m.id = i.gpu_model_id WHERE i.id = ?1 AND i.state = 'running'",
        DB_ARGS(DB_TEXT(instance_id)), err);
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    in->vram_bytes = db_int(rows, 0) * 1024 * 1024;
    in->payg = strcmp(db_text(rows, 1), "payg") == 0 && strcmp(db_text(rows, 2), "gpu") == 0 &&
               db_int(rows, 3) > 0;
    return 1;
}

/* The state of an instance's hints: since (-1: none) and shown. */
struct hint_state {
    int64_t since;
    bool shown;
};

static int read_states(struct store *st, const char *instance_id, struct hint_state *states,
                       struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st, "SELECT kind, since, shown_at FROM instance_hints WHERE instance_id = ?1",
                    DB_ARGS(DB_TEXT(instance_id)), err);
    int rc;

    for (int k = 0; k < HINT_KINDS; k++)
        states[k] = (struct hint_state){ .since = -1 };
    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) > 0)
        for (int k = 0; k < HINT_KINDS; k++)
            if (strcmp(db_text(rows, 0), kinds[k].name) == 0)
                states[k] =
                    (struct hint_state){ .since = db_int(rows, 1), .shown = !db_null(rows, 2) };
    return rc;
}

static int end_hint(struct store *st, const char *instance_id, const char *kind,
                    struct sl_error *err)
{
    return store_exec(st, "DELETE FROM instance_hints WHERE instance_id = ?1 AND kind = ?2",
                      DB_ARGS(DB_TEXT(instance_id), DB_TEXT(kind)), err) < 0
               ? -1
               : 0;
}

int hints_observe(struct store *st, const char *instance_id, int64_t t, const double *values,
                  const bool *have, size_t n, const char *currency, struct sl_error *err)
{
    struct hint_input in = { 0 };
    struct hint_state states[HINT_KINDS];
    int rc;

    if ((rc = instance_facts(st, instance_id, &in, err)) < 0)
        return -1;
    if (rc == 0)
        return store_exec(st, "DELETE FROM instance_hints WHERE instance_id = ?1",
                          DB_ARGS(DB_TEXT(instance_id)), err) < 0
                   ? -1
                   : 0;
    hint_input_from_sample(&in, values, have, n);
    if (read_states(st, instance_id, states, err) < 0)
        return -1;
    for (int k = 0; k < HINT_KINDS; k++) {
        int holds = hint_condition(k, &in);
        if (holds < 0)
            continue;
        if (!holds) {
            if (states[k].since >= 0 && end_hint(st, instance_id, kinds[k].name, err) < 0)
                return -1;
            continue;
        }
        if (states[k].since < 0) {
            if (store_exec(st,
                           "INSERT INTO instance_hints (instance_id, kind, since) VALUES (?1, ?2,"
                           " ?3) ON CONFLICT (instance_id, kind) DO NOTHING",
                           DB_ARGS(DB_TEXT(instance_id), DB_TEXT(kinds[k].name), DB_INT(t)),
                           err) < 0)
                return -1;
            states[k].since = t;
        }
        if (states[k].shown || t - states[k].since < kinds[k].hold)
            continue;
        /* what it costs per hour: read only for the message that says it,
         * not at every heartbeat */
        int64_t charged;
        if (k == HINT_GPU_IDLE &&
            billing_instance_charged(st, instance_id, &charged, &in.rate_per_hour_micros, err) < 0)
            return -1;
        cleanup_free char *message =
            hint_message(k, &in, instance_id, t - states[k].since, currency);
        if (store_exec(
                st,
                "UPDATE instance_hints SET shown_at = ?3, message = ?4"
                " WHERE instance_id = ?1 AND kind = ?2",
                DB_ARGS(DB_TEXT(instance_id), DB_TEXT(kinds[k].name), DB_INT(t), DB_TEXT(message)),
                err) < 0 ||
            instance_event(st, instance_id, "hint", "", kinds[k].name, message, err) < 0)
            return -1;
    }
    return 0;
}

int hints_observe_latest(struct store *st, const char *instance_id, const char *node_id,
                         const char *currency, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT t, data FROM instance_metrics_latest"
                    " WHERE instance_id = ?1 AND node_id = ?2",
                    DB_ARGS(DB_TEXT(instance_id), DB_TEXT(node_id)), err);
    int64_t scaled[SL_SERIES_MAX];
    double values[SL_SERIES_MAX];
    bool have[SL_SERIES_MAX];
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    int64_t t = db_int(rows, 0);
    size_t n = instance_metrics_parse_fine(db_text(rows, 1), scaled, have);
    db_rows_free(TAKE_PTR(rows));
    for (size_t pos = 0; pos < n; pos++) {
        unsigned gpu;
        const struct sl_series *s = sl_series_at((int)pos, &gpu);
        values[pos] = have[pos] && s ? (double)scaled[pos] / (double)s->scale : NAN;
    }
    return hints_observe(st, instance_id, t, values, have, n, currency, err);
}

json_t *hints_of_instance(struct store *st, const char *instance_id, struct sl_error *err)
{
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT h.kind, h.since, h.message FROM instance_hints h"
                    " JOIN instances i ON i.id = h.instance_id AND i.state = 'running'"
                    " WHERE h.instance_id = ?1 AND h.shown_at IS NOT NULL ORDER BY h.since, h.kind",
                    DB_ARGS(DB_TEXT(instance_id)), err);
    cleanup_json json_t *out = json_array();
    char since[SL_TIME_FORMAT_MAX];
    int rc;

    if (!rows)
        return NULL;
    while ((rc = db_next(rows, err)) > 0)
        json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "kind", db_text(rows, 0), "since",
                                             sl_time_format(db_int(rows, 1), since), "message",
                                             db_text(rows, 2)));
    return rc < 0 ? NULL : TAKE_PTR(out);
}

int hints_sweep(struct store *st, struct sl_error *err)
{
    return store_exec(st,
                      "DELETE FROM instance_hints WHERE NOT EXISTS (SELECT 1 FROM instances i"
                      " WHERE i.id = instance_hints.instance_id AND i.state = 'running')",
                      DB_NO_ARGS, err) < 0
               ? -1
               : 0;
}
