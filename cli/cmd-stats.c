/* stats and top: what an instance is doing, from the metrics suanlid keeps
 * (GET /v1/instances/{id}/metrics, docs/design/metrics.md). `stats` draws
 * each series of one instance over a window as a sparkline; `top` shows
 * the newest figures of every running instance, refreshing. Series are
 * printed in lib/series.h's order, with the units the server names, so a
 * series this CLI does not know still prints. */
#include "cli.h"

#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/series.h"
#include "../lib/timeconst.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPARK_WIDTH      60 /* columns of a sparkline */
#define STATS_WINDOW_MAX (31 * SL_SEC_PER_DAY)
#define TOP_WINDOW       60 /* seconds of history top asks for: a few samples */
#define SERIES_COUNT_MAX 256

static const char *const spark_levels[] = { "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█" };

/* A "used" series and the series that is its whole (a limit, a size):
 * printed as one line, the sparkline scaled to the whole. */
static const struct {
    const char *used, *whole;
} wholes[] = {
    { "memory_used_bytes", "memory_limit_bytes" },
    { "system_disk_used_bytes", "system_disk_size_bytes" },
    { "data_disk_used_bytes", "data_disk_size_bytes" },
};

static const char *whole_of(const char *name)
{
    for (size_t i = 0; i < ARRAY_SIZE(wholes); i++)
        if (strcmp(name, wholes[i].used) == 0)
            return wholes[i].whole;
    return NULL;
}

static bool is_whole(const char *name)
{
    for (size_t i = 0; i < ARRAY_SIZE(wholes); i++)
        if (strcmp(name, wholes[i].whole) == 0)
            return true;
    return false;
}

/* A value in its unit, for people; buf holds 48 bytes. */
static const char *format_value(double v, const char *unit, char *buf)
{
    char size[32];

    if (!isfinite(v))
        snprintf(buf, 48, "-");
    else if (strcmp(unit, "bytes") == 0)
        snprintf(buf, 48, "%s", output_size((int64_t)v, size));
    else if (strcmp(unit, "bytes/s") == 0)
        snprintf(buf, 48, "%s/s", output_size((int64_t)v, size));
    else if (strcmp(unit, "ratio") == 0)
        snprintf(buf, 48, "%.0f%%", v * 100);
    else if (strcmp(unit, "percent") == 0)
        snprintf(buf, 48, "%.0f%%", v);
    else if (strcmp(unit, "cores") == 0)
        snprintf(buf, 48, "%.2f cores", v);
    else if (strcmp(unit, "celsius") == 0)
        snprintf(buf, 48, "%.0f °C", v);
    else if (strcmp(unit, "watts") == 0)
        snprintf(buf, 48, "%.0f W", v);
    else if (strcmp(unit, "count") == 0)
        snprintf(buf, 48, "%.0f", v);
    else
        snprintf(buf, 48, "%g %s", v, unit);
    return buf;
}

/* The top of the sparkline's scale for a series whose largest point is max:
 * a ratio or a percentage is drawn against its whole (1, 100) so a flat
 * 5 % does not fill the line. */
static double scale_top(const char *unit, double max)
{
    if (strcmp(unit, "ratio") == 0)
        return max > 1 ? max : 1;
    if (strcmp(unit, "percent") == 0)
        return max > 100 ? max : 100;
    return max;
}

/* Appends the sparkline of points ([[t, v], ...] over [from, from + steps *
 * step)) to out: a column per step, blank where there is no sample, the
 * height v / top. */
static void sparkline(struct sl_buf *out, json_t *points, int64_t from, int64_t step, int steps,
                      double top)
{
    double col[SPARK_WIDTH];
    bool have[SPARK_WIDTH] = { false };
    size_t i;
    json_t *p;

    json_array_foreach(points, i, p)
    {
        int64_t k = (json_integer_value(json_array_get(p, 0)) - from) / step;
        double v = json_number_value(json_array_get(p, 1));
        if (k < 0 || k >= steps)
            continue;
        /* two points in one column (a coarser step than the server's):
         * the larger shows */
        if (!have[k] || v > col[k])
            col[k] = v;
        have[k] = true;
    }
    for (int k = 0; k < steps; k++) {
        if (!have[k]) {
            sl_buf_adds(out, " ");
            continue;
        }
        int level = top > 0 ? (int)(col[k] / top * 7 + 0.5) : 0;
        sl_buf_adds(out, spark_levels[level < 0 ? 0 : level > 7 ? 7 : level]);
    }
}

static double last_value(json_t *points)
{
    json_t *p = json_array_get(points, json_array_size(points) - 1);
    return p ? json_number_value(json_array_get(p, 1)) : NAN;
}

static double max_value(json_t *points)
{
    double max = NAN;
    size_t i;
    json_t *p;

    json_array_foreach(points, i, p)
    {
        double v = json_number_value(json_array_get(p, 1));
        if (isnan(max) || v > max)
            max = v;
    }
    return max;
}

/* The series names of an answer in lib/series.h's order (unknown names
 * last, by name); n set to how many. Borrowed from the answer. */
static size_t series_in_order(json_t *series, const char **names)
{
    size_t n = 0;
    const char *name;
    json_t *v;

    json_object_foreach(series, name, v)
    {
        if (n == SERIES_COUNT_MAX)
            break;
        names[n++] = name;
    }
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int a = sl_series_position(names[j - 1]), b = sl_series_position(names[j]);
            bool swap = (a < 0 && b >= 0) || (a >= 0 && b >= 0 && a > b) ||
                        (a < 0 && b < 0 && strcmp(names[j - 1], names[j]) > 0);
            if (!swap)
                break;
            const char *t = names[j - 1];
            names[j - 1] = names[j];
            names[j] = t;
        }
    return n;
}

/* GET the instance's metrics from now - window to now in steps of step. */
static json_t *get_metrics(struct cli *cli, const char *id, int64_t window, int64_t step,
                           struct sl_error *err)
{
    int64_t now = time(NULL);
    cleanup_free char *suffix =
        xasprintf("metrics?from=%lld&to=%lld&step=%lld", (long long)(now - window), (long long)now,
                  (long long)step);
    cleanup_free char *path = cli_instance_path(id, suffix);
    json_t *out = NULL;

    if (sl_client_request(&cli->client, "GET", path, NULL, NULL, &out, err) < 0)
        return NULL;
    return out;
}

/* The absent series' reasons, one line per distinct reason with the
 * series it covers ("gpu0_utilization_percent, ...: simulated GPU: no
 * NVML"). */
static void print_absent(FILE *out, json_t *absent)
{
    cleanup_json json_t *by_reason = json_object();
    const char *name;
    json_t *reason;

    json_object_foreach(absent, name, reason)
    {
        const char *r = json_string_value(reason) ? json_string_value(reason) : "";
        json_t *names = json_object_get(by_reason, r);
        if (!names)
            json_object_set_new(by_reason, r, names = json_array());
        json_array_append_new(names, json_string(name));
    }
    json_object_foreach(by_reason, name, reason)
    {
        struct sl_buf line = SL_BUF_INIT;
        size_t i;
        json_t *n;
        json_array_foreach(reason, i, n)
            sl_buf_addf(&line, "%s%s", i ? ", " : "", json_string_value(n));
        fprintf(out, "not measured: %s (%s)\n", name, line.data);
        sl_buf_release(&line);
    }
}

static const struct cli_option stats_options[] = {
    { .name = "window",
      .arg = "DURATION",
      .help = "how far back: 10m, 1h (default), 6h, 1d, 7d, up to 31d" },
    { 0 },
};

static int run_stats(struct cli *cli, const struct cli_args *a)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t window = SL_SEC_PER_HOUR;
    int status;

    if ((status = cli_need_token(cli)))
        return status;
    if (cli_has(a, "window")) {
        if (sl_duration_parse(cli_text(a, "window", ""), &window, &err) < 0)
            return cli_usage_error(cli, "--window: %s", err.message);
        if (window < 60 || window > STATS_WINDOW_MAX)
            return cli_usage_error(cli, "--window is from 1m to 31d, such as 1h or 7d");
    }
    cleanup_json json_t *inst = cli_instance_find(cli, a->argv[0], &err);
    if (!inst)
        return cli_fail(&err);
    /* a column per step, never finer than the agent's samples (10 s) */
    int64_t step = (window + SPARK_WIDTH - 1) / SPARK_WIDTH;
    if (step < 10)
        step = 10;
    cleanup_json json_t *m = get_metrics(cli, jstr(inst, "id"), window, step, &err);
    if (!m)
        return cli_fail(&err);
    if (cli->output == OUTPUT_JSON) {
        output_json(stdout, m);
        return CLI_EXIT_OK;
    }
    json_t *series = json_object_get(m, "series"), *units = json_object_get(m, "units");
    /* the window as the server took it (RFC 3339), the points' t in Unix seconds */
    int64_t from, to;
    if (sl_time_parse(jstr(m, "from") ? jstr(m, "from") : "", &from, &err) < 0 ||
        sl_time_parse(jstr(m, "to") ? jstr(m, "to") : "", &to, &err) < 0)
        return cli_fail(&err);
    step = jint(m, "step_seconds") > 0 ? jint(m, "step_seconds") : step;
    int steps = (int)((to - from + step - 1) / step);
    if (steps > SPARK_WIDTH)
        steps = SPARK_WIDTH, from = to - (int64_t)SPARK_WIDTH * step;
    char span[SL_DURATION_FORMAT_MAX], every[SL_DURATION_FORMAT_MAX];
    printf("%s (%s): the last %s, a column per %s\n", jstr(inst, "id"), jstr(inst, "name"),
           sl_duration_format(to - from, span), sl_duration_format(step, every));

    const char *names[SERIES_COUNT_MAX];
    size_t n = series_in_order(series, names);
    size_t shown = 0;
    for (size_t i = 0; i < n; i++) {
        if (is_whole(names[i]))
            continue;
        json_t *points = json_object_get(series, names[i]);
        const char *unit = jstr(units, names[i]);
        const char *whole = whole_of(names[i]);
        double whole_max = whole ? max_value(json_object_get(series, whole)) : NAN;
        double top = !isnan(whole_max) ? whole_max : scale_top(unit, max_value(points));
        struct sl_buf line = SL_BUF_INIT;
        char last[48], max[48], of[48];
        sparkline(&line, points, from, step, steps, top);
        printf("%-28s %s  now %s", names[i], line.data,
               format_value(last_value(points), unit, last));
        if (!isnan(whole_max))
            printf(" of %s", format_value(whole_max, unit, of));
        else
            printf(", max %s", format_value(max_value(points), unit, max));
        printf("\n");
        sl_buf_release(&line);
        shown++;
    }
    if (shown == 0)
        printf("no samples in this window: the host reports them every few seconds while "
               "the instance runs\n");
    print_absent(stdout, json_object_get(m, "absent"));
    return CLI_EXIT_OK;
}

const struct cli_command cmd_stats = {
    .name = "stats",
    .aliases = { "instance stats" },
    .args = "ID|NAME",
    .options = stats_options,
    .summary = "an instance's CPU, memory, disks, network and GPUs over a window, as sparklines",
    .run = run_stats,
};

/* The average over an instance's GPUs of the newest values of a GPU
 * series ("utilization_percent"), NAN when none is measured. */
static double gpu_average(json_t *series, const char *suffix)
{
    double sum = 0;
    int n = 0;
    const char *name;
    json_t *points;

    json_object_foreach(series, name, points)
    {
        const char *under = strchr(name, '_');
        if (strncmp(name, "gpu", 3) != 0 || !under || strcmp(under + 1, suffix) != 0)
            continue;
        double v = last_value(points);
        if (!isnan(v))
            sum += v, n++;
    }
    return n ? sum / n : NAN;
}

/* One line of top for one running instance. */
static void top_row(struct cli *cli, struct table *t, json_t *inst, bool *any_absent)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *m = get_metrics(cli, jstr(inst, "id"), TOP_WINDOW, 10, &err);
    json_t *series = json_object_get(m, "series");
    char cpu[48], share[48], mem[48], gpu[48], gmem[48], disk[48], rx[48], tx[48];
    char cpu_col[112], net_col[112];

    if (!m) {
        const char *row[] = { jstr(inst, "id"), jstr(inst, "name"), err.message };
        table_add(t, row);
        sl_error_clear(&err);
        return;
    }
    snprintf(cpu_col, sizeof(cpu_col), "%s (%s)",
             format_value(last_value(json_object_get(series, "cpu_cores")), "cores", cpu),
             format_value(last_value(json_object_get(series, "cpu_share")), "ratio", share));
    snprintf(net_col, sizeof(net_col), "%s in, %s out",
             format_value(last_value(json_object_get(series, "network_rx_bytes_per_second")),
                          "bytes/s", rx),
             format_value(last_value(json_object_get(series, "network_tx_bytes_per_second")),
                          "bytes/s", tx));
    if (json_object_size(json_object_get(m, "absent")) > 0)
        *any_absent = true;
    const char *row[] = {
        jstr(inst, "id"),
        jstr(inst, "name"),
        cpu_col,
        format_value(last_value(json_object_get(series, "memory_used_bytes")), "bytes", mem),
        format_value(gpu_average(series, "utilization_percent"), "percent", gpu),
        format_value(gpu_average(series, "memory_used_bytes"), "bytes", gmem),
        format_value(last_value(json_object_get(series, "system_disk_used_bytes")), "bytes", disk),
        net_col,
    };
    table_add(t, row);
}

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

/* One screen of top; -1 when the list cannot be read. */
static int top_once(struct cli *cli, bool clear)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *list =
        sl_client_list(&cli->client, "/v1/instances?state=running", 500, &err);

    if (!list)
        return cli_fail(&err);
    json_t *items = json_object_get(list, "items");
    static const char *const headers[] = { "ID",  "NAME",    "CPU (OF SHARE)", "MEMORY",
                                           "GPU", "GPU MEM", "SYSTEM DISK",    "NETWORK" };
    struct table t;
    bool any_absent = false;
    size_t i;
    json_t *inst;

    table_init(&t, ARRAY_SIZE(headers), headers);
    json_array_foreach(items, i, inst) top_row(cli, &t, inst, &any_absent);
    if (clear)
        printf("\033[H\033[2J");
    char now[SL_TIME_FORMAT_MAX];
    printf("suanli top - %s, %zu running\n\n", sl_time_format(time(NULL), now),
           json_array_size(items));
    if (json_array_size(items) > 0)
        table_print(&t, stdout);
    else
        printf("no running instance\n");
    if (any_absent)
        printf("\n- : not measured; `suanli stats ID` says why (simulated GPUs have no NVML)\n");
    table_release(&t);
    fflush(stdout);
    return CLI_EXIT_OK;
}

static const struct cli_option top_options[] = {
    { .name = "interval",
      .arg = "SECONDS",
      .type = CLI_OPT_INT,
      .min = 1,
      .max = 3600,
      .help = "seconds between refreshes (default 2)" },
    { .name = "once", .help = "print once and exit (the default when not on a terminal)" },
    { 0 },
};

static int run_top(struct cli *cli, const struct cli_args *a)
{
    int status;
    bool once = cli_has(a, "once") || !isatty(STDOUT_FILENO);
    unsigned interval = (unsigned)cli_number(a, "interval", 2);

    if ((status = cli_need_token(cli)))
        return status;
    if (cli->output == OUTPUT_JSON)
        return cli_usage_error(cli, "top prints a table; use `suanli stats ID -o json` for data");
    if (once)
        return top_once(cli, false);
    signal(SIGINT, top_on_signal);
    signal(SIGTERM, top_on_signal);
    while (!top_stop) {
        if ((status = top_once(cli, true)) != CLI_EXIT_OK)
            return status;
        for (unsigned s = 0; s < interval * 10 && !top_stop; s++)
            usleep(100 * 1000);
    }
    return CLI_EXIT_OK;
}

const struct cli_command cmd_top = {
    .name = "top",
    .options = top_options,
    .summary = "every running instance's CPU, memory, GPU, disk and network now, refreshing",
    .run = run_top,
};
