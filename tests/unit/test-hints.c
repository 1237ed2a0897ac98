/* server/hints.c: each hint's rule, the time it must hold before it shows,
 * that it shows once (one event) and ends when its condition does, that a
 * series not measured starts nothing, and that a stopped instance has
 * none. The GPU conditions are driven with the values NVML would report;
 * test-nvml.c drives the NVML stand-in itself. */
#include "harness.h"

#include "../../server/catalog.h"
#include "../../server/hints.h"
#include "../../node/gpu.h"
#include "../../lib/cleanup.h"
#include "../../lib/id.h"
#include "../../lib/json.h"
#include "../../lib/series.h"
#include "../../lib/xalloc.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0  1767225600 /* 2026-01-01 */
#define GIB (1024.0 * 1024 * 1024)

static void must(int rc, struct sl_error *err, const char *what)
{
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "%s: %s", what, err->message);
}

/* An instance i-h of u-h, running with GPUs of vram_mib, plan as given. */
static void world_of(struct store *st, const char *plan, int64_t vram_mib)
{
    struct sl_error err = SL_ERROR_INIT;
    char model[SL_ID_MAX];

    must(catalog_region_create(st, "hint-1", "Hints", false, &err), &err, "region");
    must(catalog_gpu_model_create(st, "Hint GPU", vram_mib, 8, 65536, 1000000, false, NULL, model,
                                  &err),
         &err, "model");
    must(store_exec(st,
                    "INSERT INTO users (id, email, name, password_hash, created_at)"
                    " VALUES ('u-h', 'h@example.com', 'h', 'x', 1)",
                    DB_NO_ARGS, &err),
         &err, "user");
    must(store_exec(st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                    " VALUES ('n-h', 'n-h', '127.0.0.1', 'hint-1', 'n-h', 30000, 30099, 1, 1)",
                    DB_NO_ARGS, &err),
         &err, "node");
    must(store_exec(st,
                    "INSERT INTO instances (id, user_id, name, region_id, node_id,"
                    " gpu_model_id, gpus, image, system_disk_gib, data_disk_gib, ssh_port,"
                    " root_password, state, desired, plan, created_at, updated_at) VALUES ('i-h',"
                    " 'u-h', 'h', 'hint-1', 'n-h', ?1, 1, 'debian-12', 30, 60, 30000, 'pw',"
                    " 'running', 'running', ?2, 1, 1)",
                    DB_ARGS(DB_TEXT(model), DB_TEXT(plan)), &err),
         &err, "instance");
}

/* ... on one 24 GiB GPU */
static void world(struct store *st, const char *plan)
{
    world_of(st, plan, 24576);
}

/* A sample by position: CPU share, system disk use of 30 GiB, and (gpu_util
 * >= 0) GPU 0's utilisation and memory; other series not measured. */
struct sample {
    double values[SL_SERIES_MAX];
    bool have[SL_SERIES_MAX];
};

static void set(struct sample *s, const char *name, double v)
{
    int pos = sl_series_position(name);
    if (pos < 0) {
        test_fail(__FILE__, __LINE__, "no series %s", name);
        return;
    }
    s->values[pos] = v;
    s->have[pos] = true;
}

static struct sample sample(double cpu_share, double disk_full, double gpu_util, double gpu_mem)
{
    struct sample s = { 0 };
    set(&s, "cpu_share", cpu_share);
    set(&s, "system_disk_used_bytes", disk_full * 30 * GIB);
    set(&s, "system_disk_size_bytes", 30 * GIB);
    if (gpu_util >= 0) {
        set(&s, "gpu0_utilization_percent", gpu_util);
        set(&s, "gpu0_memory_used_bytes", gpu_mem);
    }
    return s;
}

static void observe(struct store *st, int64_t t, struct sample s)
{
    struct sl_error err = SL_ERROR_INIT;
    must(hints_observe(st, "i-h", t, s.values, s.have, SL_SERIES_MAX, "CNY", &err), &err,
         "observe");
}

/* The shown hints' kinds, comma-separated. */
static char *shown(struct store *st)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *list = hints_of_instance(st, "i-h", &err);
    struct sl_buf out = SL_BUF_INIT;
    size_t i;
    json_t *h;

    must(list ? 0 : -1, &err, "list");
    json_array_foreach(list, i, h)
        sl_buf_addf(&out, "%s%s", i ? "," : "", json_string_value(json_object_get(h, "kind")));
    return sl_buf_detach(&out, NULL);
}

static int64_t hint_events(struct store *st, const char *kind)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t n = -1;
    must(store_get_int(st,
                       "SELECT COUNT(*) FROM events WHERE instance_id = 'i-h' AND kind = 'hint'"
                       " AND reason = ?1",
                       DB_ARGS(DB_TEXT(kind)), &n, &err),
         &err, "events");
    return n;
}

TEST(rules_hold_on_the_thresholds_and_say_unknown)
{
    struct hint_input in = { .cpu_share = 0.95,
                             .system_used = 10,
                             .system_size = 100,
                             .gpus = 2,
                             .gpu_util = { 10, 20 },
                             .gpu_memory = { 1, 1 },
                             .vram_bytes = 100,
                             .payg = true };

    CHECK_EQ_INT(hint_condition(HINT_DATA_LOADER, &in), 1);
    in.gpu_util[1] = 60; /* average 35 % */
    CHECK_EQ_INT(hint_condition(HINT_DATA_LOADER, &in), 0);
    in.gpu_util[1] = 20;
    in.cpu_share = 0.5;
    CHECK_EQ_INT(hint_condition(HINT_DATA_LOADER, &in), 0);
    CHECK_EQ_INT(hint_condition(HINT_SYSTEM_DISK, &in), 0);
    in.system_used = 91;
    CHECK_EQ_INT(hint_condition(HINT_SYSTEM_DISK, &in), 1);
    CHECK_EQ_INT(hint_condition(HINT_GPU_MEMORY, &in), 0);
    in.gpu_memory[1] = 96;
    CHECK_EQ_INT(hint_condition(HINT_GPU_MEMORY, &in), 1);
    CHECK_EQ_INT(hint_condition(HINT_GPU_IDLE, &in), 0);
    in.gpu_util[0] = in.gpu_util[1] = 0;
    CHECK_EQ_INT(hint_condition(HINT_GPU_IDLE, &in), 1);
    in.payg = false; /* a plan is paid for whether used or not */
    CHECK_EQ_INT(hint_condition(HINT_GPU_IDLE, &in), 0);
    /* no NVML values (a simulated GPU): the GPU rules do not know */
    in.gpus = 0;
    CHECK_EQ_INT(hint_condition(HINT_DATA_LOADER, &in), -1);
    CHECK_EQ_INT(hint_condition(HINT_GPU_MEMORY, &in), -1);
    CHECK_EQ_INT(hint_condition(HINT_GPU_IDLE, &in), -1);
    in.system_size = NAN;
    CHECK_EQ_INT(hint_condition(HINT_SYSTEM_DISK, &in), -1);
}

TEST(system_disk_shows_at_once_once_and_ends)
{
    struct store *st = test_store();

    world(st, "payg");
    observe(st, T0, sample(0.1, 0.5, -1, 0));
    cleanup_free char *none = shown(st);
    CHECK_STR(none, "");
    observe(st, T0 + 10, sample(0.1, 0.95, -1, 0));
    cleanup_free char *full = shown(st);
    CHECK_STR(full, "system_disk");
    observe(st, T0 + 20, sample(0.1, 0.96, -1, 0));
    CHECK_EQ_INT(hint_events(st, "system_disk"), 1);
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *list = hints_of_instance(st, "i-h", &err);
    CHECK_CONTAINS(json_string_value(json_object_get(json_array_get(list, 0), "message")),
                   "move data to /root/data");
    observe(st, T0 + 30, sample(0.1, 0.4, -1, 0));
    cleanup_free char *ended = shown(st);
    CHECK_STR(ended, "");
    test_store_close(st);
}

TEST(data_loader_needs_two_minutes_and_measured_gpus)
{
    struct store *st = test_store();

    world(st, "payg");
    /* a simulated GPU: the CPU is saturated, the GPU series absent */
    for (int64_t t = 0; t <= 300; t += 10)
        observe(st, T0 + t, sample(1.0, 0.1, -1, 0));
    cleanup_free char *simulated = shown(st);
    CHECK_STR(simulated, "");
    /* NVML says 10 % busy while the CPU share is saturated */
    for (int64_t t = 310; t < 310 + 120; t += 10)
        observe(st, T0 + t, sample(1.0, 0.1, 10, GIB));
    cleanup_free char *early = shown(st);
    CHECK_STR(early, "");
    observe(st, T0 + 430, sample(1.0, 0.1, 10, GIB));
    cleanup_free char *starved = shown(st);
    CHECK_STR(starved, "data_loader");
    CHECK_EQ_INT(hint_events(st, "data_loader"), 1);
    /* the GPU gets busy: it ends, and starts over from scratch */
    observe(st, T0 + 440, sample(1.0, 0.1, 90, GIB));
    observe(st, T0 + 450, sample(1.0, 0.1, 10, GIB));
    cleanup_free char *again = shown(st);
    CHECK_STR(again, "");
    test_store_close(st);
}

TEST(gpu_memory_over_95_percent_of_the_card)
{
    struct store *st = test_store();

    world(st, "payg");
    observe(st, T0, sample(0.2, 0.1, 80, 23.9 * GIB));
    observe(st, T0 + 40, sample(0.2, 0.1, 80, 23.9 * GIB));
    cleanup_free char *full = shown(st);
    CHECK_STR(full, "gpu_memory");
    test_store_close(st);
}

TEST(gpu_idle_an_hour_on_payg_says_the_cost)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;

    world(st, "payg");
    for (int64_t t = 0; t < 3600; t += 60)
        observe(st, T0 + t, sample(0.01, 0.1, 0, 0));
    cleanup_free char *early = shown(st);
    CHECK_STR(early, "");
    observe(st, T0 + 3600, sample(0.01, 0.1, 0, 0));
    cleanup_free char *idle = shown(st);
    CHECK_STR(idle, "gpu_idle");
    cleanup_json json_t *list = hints_of_instance(st, "i-h", &err);
    const char *message = json_string_value(json_object_get(json_array_get(list, 0), "message"));
    CHECK_CONTAINS(message, "idle for 1h");
    CHECK_CONTAINS(message, "suanli stop i-h");
    CHECK_CONTAINS(message, "idle-stop i-h");
    test_store_close(st);
}

TEST(a_plan_is_never_told_it_idles)
{
    struct store *st = test_store();

    world(st, "month");
    for (int64_t t = 0; t <= 7200; t += 60)
        observe(st, T0 + t, sample(0.01, 0.1, 0, 0));
    cleanup_free char *none = shown(st);
    CHECK_STR(none, "");
    test_store_close(st);
}

TEST(a_stopped_instance_has_no_hints)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    int64_t n = -1;

    world(st, "payg");
    observe(st, T0, sample(0.1, 0.99, -1, 0));
    cleanup_free char *full = shown(st);
    CHECK_STR(full, "system_disk");
    must(
        store_exec(st, "UPDATE instances SET state = 'stopped' WHERE id = 'i-h'", DB_NO_ARGS, &err),
        &err, "stop");
    cleanup_free char *stopped = shown(st);
    CHECK_STR(stopped, "");
    must(hints_sweep(st, &err), &err, "sweep");
    must(store_get_int(st, "SELECT COUNT(*) FROM instance_hints", DB_NO_ARGS, &n, &err), &err,
         "count");
    CHECK_EQ_INT(n, 0);
    test_store_close(st);
}

/* Through the NVML stand-in (tests/unit/fake-nvml: an 8x H200 host's
 * recorded answers, read by node/gpu-nvml.c's real dlopen path): the GPUs
 * of the instance are the host's GPUs `held`, their figures what NVML says
 * under FAKE_NVML_SCENARIO, mapped to the instance's series as the agent
 * does (its own GPU numbers, node/metrics.c). */
static bool nvml_sample(const char *scenario, const unsigned *held, size_t n_held, double cpu_share,
                        struct sample *out)
{
    static char lib[PATH_MAX + 64];
    char exe[PATH_MAX], name[SL_SERIES_NAME_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    struct sl_error err = SL_ERROR_INIT;
    struct gpu_source src = { 0 };
    cleanup_free struct gpu_usage *u = xcalloc(GPU_MAX, sizeof(*u));
    size_t n = 0;

    if (len < 0)
        return false;
    exe[len] = '\0';
    snprintf(lib, sizeof(lib), "%s/fake-nvml/libnvidia-ml.so.1", dirname(exe));
    if (scenario)
        setenv("FAKE_NVML_SCENARIO", scenario, 1);
    else
        unsetenv("FAKE_NVML_SCENARIO");
    if (!CHECK_EQ_INT(gpu_nvml_open_library(lib, &src, &err), 0))
        return false;
    bool ok = CHECK_EQ_INT(src.ops->usage(src.state, u, &n, &err), 0);
    gpu_source_release(&src);
    unsetenv("FAKE_NVML_SCENARIO");
    if (!ok)
        return false;
    *out = sample(cpu_share, 0.1, -1, 0);
    for (size_t k = 0; k < n_held; k++) {
        snprintf(name, sizeof(name), "gpu%zu_utilization_percent", k);
        set(out, name, u[held[k]].gpu_percent);
        snprintf(name, sizeof(name), "gpu%zu_memory_used_bytes", k);
        set(out, name, (double)u[held[k]].used_mib * 1024 * 1024);
    }
    return true;
}

#define H200_MIB 143771

TEST(nvml_a_starved_gpu_behind_a_busy_cpu_is_the_data_loader)
{
    struct store *st = test_store();
    const unsigned gpu7[] = { 7 }; /* NVML: 12 % busy */
    struct sample s;

    world_of(st, "payg", H200_MIB);
    for (int64_t t = 0; t <= 130; t += 10) {
        if (!nvml_sample(NULL, gpu7, 1, 1.0, &s))
            return;
        observe(st, T0 + t, s);
    }
    cleanup_free char *starved = shown(st);
    CHECK_STR(starved, "data_loader");
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *list = hints_of_instance(st, "i-h", &err);
    CHECK_CONTAINS(json_string_value(json_object_get(json_array_get(list, 0), "message")),
                   "the GPUs are 12% busy");
    test_store_close(st);
}

TEST(nvml_a_busy_gpu_is_not_starved)
{
    struct store *st = test_store();
    const unsigned gpu0[] = { 0 }; /* NVML: 97 % busy */
    struct sample s;

    world_of(st, "payg", H200_MIB);
    for (int64_t t = 0; t <= 300; t += 10) {
        if (!nvml_sample(NULL, gpu0, 1, 1.0, &s))
            return;
        observe(st, T0 + t, s);
    }
    cleanup_free char *none = shown(st);
    CHECK_STR(none, "");
    test_store_close(st);
}

TEST(nvml_memory_full_is_an_oom_risk)
{
    struct store *st = test_store();
    const unsigned gpu0[] = { 0 };
    struct sample s;

    world_of(st, "payg", H200_MIB);
    /* the recorded host: 71,234 of 143,771 MiB, no hint */
    for (int64_t t = 0; t <= 60; t += 10) {
        if (!nvml_sample(NULL, gpu0, 1, 0.3, &s))
            return;
        observe(st, T0 + t, s);
    }
    cleanup_free char *half = shown(st);
    CHECK_STR(half, "");
    for (int64_t t = 70; t <= 110; t += 10) {
        if (!nvml_sample("memory-full", gpu0, 1, 0.3, &s))
            return;
        observe(st, T0 + t, s);
    }
    cleanup_free char *full = shown(st);
    CHECK_STR(full, "gpu_memory");
    test_store_close(st);
}

TEST(nvml_idle_gpus_for_an_hour)
{
    struct store *st = test_store();
    const unsigned idle[] = { 2, 3 }; /* NVML: 0 % each */
    struct sample s;

    world_of(st, "payg", H200_MIB);
    for (int64_t t = 0; t <= 3600; t += 300) {
        if (!nvml_sample(NULL, idle, 2, 0.01, &s))
            return;
        observe(st, T0 + t, s);
    }
    cleanup_free char *idle_hint = shown(st);
    CHECK_STR(idle_hint, "gpu_idle");
    test_store_close(st);
}
