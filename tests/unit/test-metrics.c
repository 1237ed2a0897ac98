/* node/metrics-read.c: the kernel's text formats the metrics collector
 * reads, and an instance's cgroup read on a v1 host (this machine's
 * layout: cpu and cpuacct apart) and a v2 one, from trees of files in the
 * kernel's formats; and the rates made from two readings. */
#include "harness.h"

#include "../../node/metrics.h"
#include "../../lib/buf.h"
#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../lib/series.h"
#include "../../lib/xalloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void put(const char *root, const char *rel, const char *text)
{
    cleanup_free char *path = xasprintf("%s/%s", root, rel);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    cleanup_free char *cmd = xasprintf("mkdir -p '%s'", path);
    if (system(cmd) != 0)
        test_fail(__FILE__, __LINE__, "mkdir %s", path);
    *slash = '/';
    FILE *f = fopen(path, "w");
    if (!f) {
        test_fail(__FILE__, __LINE__, "write %s", path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

TEST(keyed_values_and_limits)
{
    const char *stat = "usage_usec 123456789\nuser_usec 100\nsystem_usec 23\n";
    CHECK_EQ_INT(metrics_keyed_value(stat, "usage_usec"), 123456789);
    CHECK_EQ_INT(metrics_keyed_value(stat, "system_usec"), 23);
    CHECK_EQ_INT(metrics_keyed_value(stat, "usage"), -1);
    CHECK_EQ_INT(metrics_keyed_value("", "x"), -1);
    CHECK_EQ_INT(metrics_parse_limit("max\n"), -1);
    CHECK_EQ_INT(metrics_parse_limit("9223372036854771712\n"), -1); /* v1: no limit */
    CHECK_EQ_INT(metrics_parse_limit("4294967296\n"), 4294967296LL);
    int64_t q = 0, p = 0;
    CHECK_EQ_INT(metrics_parse_cpu_max("max 100000\n", &q, &p), 0);
    CHECK_EQ_INT(q, -1);
    CHECK_EQ_INT(p, 100000);
    CHECK_EQ_INT(metrics_parse_cpu_max("250000 100000\n", &q, &p), 0);
    CHECK_EQ_INT(q, 250000);
    CHECK_EQ_INT(metrics_parse_cpu_max("garbage", &q, &p), -1);
}

TEST(net_dev_without_loopback)
{
    /* /proc/PID/net/dev of an instance: lo, and eth0 the veth's peer */
    const char *text =
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
        "errs drop fifo colls carrier compressed\n"
        "    lo:  987654     100    0    0    0     0          0         0   987654     100    "
        "0    0    0     0       0          0\n"
        "  eth0: 52428800   40000    0    0    0     0          0         0  1048576    9000    "
        "0    0    0     0       0          0\n";
    int64_t rx = 0, tx = 0;

    CHECK_EQ_INT(metrics_parse_net_dev(text, &rx, &tx), 0);
    CHECK_EQ_INT(rx, 52428800);
    CHECK_EQ_INT(tx, 1048576);
    CHECK_EQ_INT(metrics_parse_net_dev("Inter-|\n face |\n", &rx, &tx), -1);
}

TEST(block_stat_in_bytes)
{
    /* /sys/dev/block/7:3/stat of a loop device */
    const char *text =
        "    1520        0   121600      412     3300     1200   409600     5000        "
        "0     3000     5412        0        0        0        0\n";
    int64_t r = 0, w = 0;

    CHECK_EQ_INT(metrics_parse_block_stat(text, &r, &w), 0);
    CHECK_EQ_INT(r, 121600LL * 512);
    CHECK_EQ_INT(w, 409600LL * 512);
    CHECK_EQ_INT(metrics_parse_block_stat("1 2", &r, &w), -1);
}

/* A v1 host as this one: cpu and cpuacct separate hierarchies. */
TEST(cgroup_v1_layout)
{
    const char *root = test_tmpdir();
    struct metrics_counters c;

    put(root, "cpuacct/suanli/i-1/cpuacct.usage", "5000000000\n");
    put(root, "cpu/suanli/i-1/cpu.cfs_quota_us", "200000\n");
    put(root, "cpu/suanli/i-1/cpu.cfs_period_us", "100000\n");
    put(root, "memory/suanli/i-1/memory.usage_in_bytes", "1073741824\n");
    put(root, "memory/suanli/i-1/memory.stat", "cache 100\ntotal_inactive_file 73741824\n");
    put(root, "memory/suanli/i-1/memory.limit_in_bytes", "8589934592\n");
    put(root, "pids/suanli/i-1/pids.current", "42\n");
    put(root, "pids/suanli/i-1/cgroup.procs", "4242\n4243\n");
    CHECK_EQ_INT(metrics_read_cgroup(root, "/suanli/i-1", &c), 0);
    CHECK_EQ_INT(c.cpu_usage_us, 5000000);
    CHECK_EQ_INT(c.cpu_quota_us, 200000);
    CHECK_EQ_INT(c.cpu_period_us, 100000);
    CHECK_EQ_INT(c.memory_bytes, 1000000000);
    CHECK_EQ_INT(c.memory_limit_bytes, 8589934592LL);
    CHECK_EQ_INT(c.pids, 42);
    CHECK_EQ_INT(c.pid, 4242);
    /* an instance that does not run has no cgroup */
    CHECK_EQ_INT(metrics_read_cgroup(root, "/suanli/i-2", &c), -1);
    /* the combined hierarchy some hosts mount, and no quota */
    put(root, "cpu,cpuacct/suanli/i-3/cpuacct.usage", "7000\n");
    put(root, "cpu,cpuacct/suanli/i-3/cpu.cfs_quota_us", "-1\n");
    put(root, "memory/suanli/i-3/memory.usage_in_bytes", "4096\n");
    CHECK_EQ_INT(metrics_read_cgroup(root, "/suanli/i-3", &c), 0);
    CHECK_EQ_INT(c.cpu_usage_us, 7);
    CHECK_EQ_INT(c.cpu_quota_us, -1);
    CHECK_EQ_INT(c.memory_limit_bytes, -1);
}

TEST(cgroup_v2_layout)
{
    const char *root = test_tmpdir();
    struct metrics_counters c;

    put(root, "cgroup.controllers", "cpuset cpu io memory pids\n");
    put(root, "suanli/i-1/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n");
    put(root, "suanli/i-1/cpu.max", "400000 100000\n");
    put(root, "suanli/i-1/memory.current", "536870912\n");
    put(root, "suanli/i-1/memory.stat", "anon 1\ninactive_file 36870912\n");
    put(root, "suanli/i-1/memory.max", "max\n");
    put(root, "suanli/i-1/pids.current", "7\n");
    put(root, "suanli/i-1/cgroup.procs", "999\n");
    CHECK_EQ_INT(metrics_read_cgroup(root, "/suanli/i-1", &c), 0);
    CHECK_EQ_INT(c.cpu_usage_us, 2500000);
    CHECK_EQ_INT(c.cpu_quota_us, 400000);
    CHECK_EQ_INT(c.memory_bytes, 500000000);
    CHECK_EQ_INT(c.memory_limit_bytes, -1);
    CHECK_EQ_INT(c.pids, 7);
    CHECK_EQ_INT(c.pid, 999);
}

/* Two readings 2 s apart: 3 cores of a 4-core quota, and the rates. */
TEST(values_from_two_readings)
{
    struct metrics_counters a = { .mono_us = 1000000,
                                  .cpu_usage_us = 10000000,
                                  .cpu_quota_us = 400000,
                                  .cpu_period_us = 100000,
                                  .memory_bytes = 100,
                                  .memory_limit_bytes = -1,
                                  .pids = 3,
                                  .system_used = 10,
                                  .system_size = 100,
                                  .data_used = -1,
                                  .data_size = -1,
                                  .read_bytes = 0,
                                  .write_bytes = 1000,
                                  .rx_bytes = 50,
                                  .tx_bytes = 60 };
    struct metrics_counters b = a;
    double v[SL_SERIES_BASE];

    b.mono_us += 2000000;
    b.cpu_usage_us += 6000000;
    b.write_bytes += 4096;
    b.rx_bytes += 2000;
    metrics_values(NULL, &a, v);
    CHECK(isnan(v[0]) && isnan(v[1]) && isnan(v[9])); /* first: no rate */
    CHECK(v[2] == 100 && v[4] == 3 && isnan(v[3]) && isnan(v[7]));
    metrics_values(&a, &b, v);
    CHECK(fabs(v[0] - 3.0) < 1e-9);
    CHECK(fabs(v[1] - 0.75) < 1e-9);
    CHECK(v[9] == 0 && fabs(v[10] - 2048) < 1e-9 && fabs(v[11] - 1000) < 1e-9 && v[12] == 0);
    /* a counter that went back (the instance restarted): no rate */
    b.cpu_usage_us = 5;
    metrics_values(&a, &b, v);
    CHECK(isnan(v[0]) && isnan(v[1]));
}

TEST(prometheus_families)
{
    double a[SL_SERIES_BASE + 4], b[SL_SERIES_BASE];
    cleanup_buf struct sl_buf out = SL_BUF_INIT;

    for (size_t i = 0; i < SL_SERIES_BASE + 4; i++)
        a[i] = i < SL_SERIES_BASE ? (double)i : NAN;
    for (size_t i = 0; i < SL_SERIES_BASE; i++)
        b[i] = NAN;
    b[0] = 0.5;
    a[SL_SERIES_BASE] = 99;
    const struct sl_series_latest items[] = {
        { "i-a", "u-a", a, SL_SERIES_BASE + 4 },
        { "i-b", "u-b", b, SL_SERIES_BASE },
    };
    sl_series_render_prom(&out, items, 2);
    /* one TYPE per family, both instances' lines under it */
    const char *first = strstr(out.data, "# TYPE suanli_instance_cpu_cores gauge\n");
    CHECK(first && !strstr(first + 1, "# TYPE suanli_instance_cpu_cores gauge"));
    CHECK_CONTAINS(out.data, "suanli_instance_cpu_cores{instance_id=\"i-a\",renter=\"u-a\"} 0\n"
                             "suanli_instance_cpu_cores{instance_id=\"i-b\",renter=\"u-b\"} 0.5\n");
    CHECK_CONTAINS(out.data, "suanli_instance_disk_used_bytes{instance_id=\"i-a\",renter=\"u-a\","
                             "disk=\"system\"} 5\n"
                             "suanli_instance_disk_used_bytes{instance_id=\"i-a\",renter=\"u-a\","
                             "disk=\"data\"} 7\n");
    CHECK_CONTAINS(out.data, "suanli_instance_gpu_utilization_percent{instance_id=\"i-a\","
                             "renter=\"u-a\",gpu=\"0\"} 99\n");
    CHECK(!strstr(out.data, "gpu_power_watts{")); /* unknown: no line */
}

/* The collector itself on an instance with two GPUs (host GPUs 0 and 7 of
 * the NVML stand-in, tests/unit/fake-nvml/), and on simulated ones: real
 * GPUs give the instance's gpu0_ and gpu1_ series, simulated ones none,
 * each named in `absent` with the reason. */
static json_t *one_instance(void *ctx)
{
    (void)ctx;
    return json_pack("[{s:s, s:s, s:[i, i], s:s}]", "id", "i-1", "desired", "running", "gpus", 0, 7,
                     "user_id", "u-1");
}

static json_t *collect_once(struct gpu_source *gpus, const char *root)
{
    struct metrics_config cfg = { .data_dir = test_tmpdir(),
                                  .cgroup_root = root,
                                  .gpus = gpus,
                                  .interval_ms = 20,
                                  .listen = "off",
                                  .instances = one_instance };
    struct sl_error err = SL_ERROR_INIT;
    struct metrics_collector *m = metrics_start(&cfg, &err);
    json_t *batch = NULL;

    if (!CHECK(m))
        return NULL;
    for (int i = 0;
         i < 200 && json_array_size(json_object_get(json_array_get(batch, 0), "samples")) < 2;
         i++) {
        usleep(20000);
        json_t *more = metrics_take(m);
        if (!batch)
            batch = more;
        else if (more) {
            json_array_extend(json_object_get(json_array_get(batch, 0), "samples"),
                              json_object_get(json_array_get(more, 0), "samples"));
            json_decref(more);
        }
    }
    metrics_stop(m);
    return batch;
}

/* The value of name in the last sample of entry e, or NAN. */
static double last_value(json_t *e, const char *name)
{
    size_t i;
    json_t *n;
    json_t *samples = json_object_get(e, "samples");
    json_t *last = json_array_get(samples, json_array_size(samples) - 1);

    json_array_foreach(json_object_get(e, "names"), i, n)
    {
        if (strcmp(json_string_value(n), name) == 0)
            return json_is_number(json_array_get(last, i + 1))
                       ? json_number_value(json_array_get(last, i + 1))
                       : NAN;
    }
    return NAN;
}

TEST(collector_gpu_series_real_and_simulated)
{
    const char *root = test_path("cg");
    struct gpu_source nvml = { 0 }, sim = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    char lib[PATH_MAX + 64], exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    put(root, "memory/suanli/i-1/memory.usage_in_bytes", "1048576\n");
    put(root, "cpuacct/suanli/i-1/cpuacct.usage", "1000\n");
    exe[len > 0 ? len : 0] = '\0';
    snprintf(lib, sizeof(lib), "%s/fake-nvml/libnvidia-ml.so.1", dirname(exe));
    unsetenv("FAKE_NVML_SCENARIO");
    if (!CHECK_EQ_INT(gpu_nvml_open_library(lib, &nvml, &err), 0))
        return;
    cleanup_json json_t *real = collect_once(&nvml, root);
    gpu_source_release(&nvml);
    json_t *e = json_array_get(real, 0);
    CHECK_STR(json_string_value(json_object_get(e, "id")), "i-1");
    /* the instance's GPU 1 is the host's GPU 7 */
    CHECK(last_value(e, "gpu0_utilization_percent") == 97);
    CHECK(last_value(e, "gpu1_utilization_percent") == 12);
    CHECK(last_value(e, "gpu0_memory_used_bytes") == 71234.0 * 1024 * 1024);
    CHECK(last_value(e, "gpu0_temperature_celsius") == 38 + 97 * 30 / 100);
    CHECK(fabs(last_value(e, "gpu1_power_watts") - (75000 + 12 * 6300) / 1000.0) < 1e-9);
    CHECK(last_value(e, "memory_used_bytes") == 1048576);
    CHECK(json_object_get(json_object_get(e, "absent"), "gpu0_utilization_percent") == NULL);
    /* no data disk here: said, not invented */
    CHECK_STR(
        json_string_value(json_object_get(json_object_get(e, "absent"), "data_disk_used_bytes")),
        "no data disk mounted");

    if (!CHECK_EQ_INT(gpu_sim_open("8:RTX 4090", &sim, &err), 0))
        return;
    cleanup_json json_t *simulated = collect_once(&sim, root);
    gpu_source_release(&sim);
    e = json_array_get(simulated, 0);
    CHECK(isnan(last_value(e, "gpu0_utilization_percent")));
    json_t *absent = json_object_get(e, "absent");
    CHECK_STR(json_string_value(json_object_get(absent, "gpu0_utilization_percent")),
              METRICS_ABSENT_SIMULATED);
    CHECK_STR(json_string_value(json_object_get(absent, "gpu1_power_watts")),
              "simulated GPU: no NVML");
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(e, "names"), i, n)
        CHECK(strncmp(json_string_value(n), "gpu", 3) != 0);
}

/* A backlog (suanlid was away) goes a bounded share per heartbeat, the
 * oldest first; a heartbeat that fails puts its samples back in front. */
TEST(backlog_drains_in_bounded_heartbeats)
{
    const char *root = test_path("cg");
    struct gpu_source sim = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    put(root, "memory/suanli/i-1/memory.usage_in_bytes", "1048576\n");
    if (!CHECK_EQ_INT(gpu_sim_open("8:RTX 4090", &sim, &err), 0))
        return;
    struct metrics_config cfg = { .data_dir = test_tmpdir(),
                                  .cgroup_root = root,
                                  .gpus = &sim,
                                  .interval_ms = 1,
                                  .listen = "off",
                                  .instances = one_instance };
    struct metrics_collector *m = metrics_start(&cfg, &err);
    if (!CHECK(m))
        return;
    /* samples every millisecond: the same second's t, which is all this needs */
    for (int i = 0; i < 100; i++)
        usleep(5000);
    json_t *first = metrics_take(m);
    json_t *samples = json_object_get(json_array_get(first, 0), "samples");
    CHECK_EQ_INT(json_array_size(samples), METRICS_SEND_MAX);
    json_t *oldest = json_incref(json_array_get(samples, 0));
    metrics_sent(m, first, false); /* suanlid did not take them */
    json_t *again = metrics_take(m);
    CHECK(json_array_get(json_object_get(json_array_get(again, 0), "samples"), 0) == oldest);
    metrics_sent(m, again, true);
    json_t *next = metrics_take(m);
    CHECK(json_array_get(json_object_get(json_array_get(next, 0), "samples"), 0) != oldest);
    metrics_sent(m, next, true);
    json_decref(oldest);
    metrics_stop(m);
    gpu_source_release(&sim);
}
