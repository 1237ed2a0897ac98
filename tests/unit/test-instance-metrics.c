/* server/instance-metrics.c: the samples of a heartbeat stored in two
 * tiers, a rogue node's samples refused, a month of samples kept bounded,
 * and the query's steps. */
#include "harness.h"

#include "../../server/catalog.h"
#include "../../server/instance-metrics.h"
#include "../../lib/cleanup.h"
#include "../../lib/id.h"
#include "../../lib/xalloc.h"
#include "../../lib/json.h"
#include "../../lib/series.h"
#include "../../lib/timefmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct metrics_policy policy = { .fine_step = METRICS_FINE_STEP,
                                              .fine_keep = 86400,
                                              .coarse_step = METRICS_COARSE_STEP,
                                              .coarse_keep = 31 * 86400 };

#define T0 1767225600 /* 2026-01-01 */

static void must(int rc, struct sl_error *err, const char *what)
{
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "%s: %s", what, err->message);
}

/* Two nodes, an instance of u-a on n-a (i-a) and one of u-b on n-b (i-b). */
static void world(struct store *st)
{
    struct sl_error err = SL_ERROR_INIT;
    char model[SL_ID_MAX];

    must(catalog_region_create(st, "met-1", "Metrics", false, &err), &err, "region");
    must(
        catalog_gpu_model_create(st, "Met GPU", 24576, 8, 65536, 1000000, false, NULL, model, &err),
        &err, "model");
    const char *who[][2] = { { "a", "30000" }, { "b", "30100" } };
    for (size_t i = 0; i < 2; i++) {
        cleanup_free char *user = xasprintf("u-%s", who[i][0]);
        cleanup_free char *email = xasprintf("%s@example.com", who[i][0]);
        cleanup_free char *node = xasprintf("n-%s", who[i][0]);
        cleanup_free char *inst = xasprintf("i-%s", who[i][0]);
        must(store_exec(st,
                        "INSERT INTO users (id, email, name, password_hash, created_at)"
                        " VALUES (?1, ?2, 'm', 'x', 1)",
                        DB_ARGS(DB_TEXT(user), DB_TEXT(email)), &err),
             &err, "user");
        must(store_exec(st,
                        "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                        " ssh_port_min, ssh_port_max, created_at, last_heartbeat)"
                        " VALUES (?1, ?1, '127.0.0.1', 'met-1', ?1, 30000, 30099, 1, 1)",
                        DB_ARGS(DB_TEXT(node)), &err),
             &err, "node");
        must(store_exec(st,
                        "INSERT INTO instances (id, user_id, name, region_id, node_id,"
                        " gpu_model_id, gpus, image, system_disk_gib, data_disk_gib, ssh_port,"
                        " root_password, state, desired, created_at, updated_at) VALUES (?1, ?2,"
                        " 'm', 'met-1', ?3, ?4, 1, 'debian-12', 30, 60, ?5, 'pw', 'running',"
                        " 'running', 1, 1)",
                        DB_ARGS(DB_TEXT(inst), DB_TEXT(user), DB_TEXT(node), DB_TEXT(model),
                                DB_INT(atoll(who[i][1]))),
                        &err),
             &err, "instance");
    }
}

/* A heartbeat's metrics entry for id: n samples from t every dt seconds,
 * cpu_cores = cpu, memory 1 GiB, one GPU at gpu percent. */
static json_t *entry(const char *id, int64_t t, int64_t dt, size_t n, double cpu, int gpu)
{
    json_t *samples = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(samples, json_pack("[I, f, i, i, n, i]", (json_int_t)(t + i * dt),
                                                 cpu, 1 << 30, 12, gpu));
    return json_pack("{s:s, s:[s, s, s, s, s], s:o, s:{s:s}}", "id", id, "names", "cpu_cores",
                     "memory_used_bytes", "pids", "cpu_share", "gpu0_utilization_percent",
                     "samples", samples, "absent", "cpu_share", "no CPU limit");
}

static int64_t count(struct store *st, const char *sql)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t n = -1;
    must(store_get_int(st, sql, DB_NO_ARGS, &n, &err), &err, sql);
    return n;
}

/* The query's JSON text, parsed. */
static json_t *query(struct store *st, const char *id, int64_t from, int64_t to, int64_t step,
                     int64_t now)
{
    struct sl_error err = SL_ERROR_INIT;
    size_t len;
    cleanup_free char *text =
        instance_metrics_query(st, &policy, id, from, to, step, now, &len, &err);
    if (!text) {
        test_fail(__FILE__, __LINE__, "query: %s", err.message);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(text, len, 0, &jerr);
    if (!j)
        test_fail(__FILE__, __LINE__, "query's JSON: %s: %.200s", jerr.text, text);
    return j;
}

static int apply(struct store *st, const char *node, json_t *e, int64_t now, size_t *skipped)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_json json_t *batch = json_pack("[o]", e);
    int rc = instance_metrics_apply(st, &policy, node, batch, now, skipped, &err);
    must(rc, &err, "apply");
    return rc;
}

TEST(series_positions_and_names)
{
    char name[SL_SERIES_NAME_MAX];

    CHECK_EQ_INT(sl_series_position("cpu_cores"), 0);
    CHECK_EQ_INT(sl_series_position("network_tx_bytes_per_second"), SL_SERIES_BASE - 1);
    CHECK_EQ_INT(sl_series_position("gpu0_utilization_percent"), SL_SERIES_BASE);
    CHECK_EQ_INT(sl_series_position("gpu2_power_watts"), SL_SERIES_BASE + 2 * 4 + 3);
    CHECK_EQ_INT(sl_series_position("gpu16_power_watts"), -1);
    CHECK_EQ_INT(sl_series_position("gpu01_power_watts"), -1);
    CHECK_EQ_INT(sl_series_position("gpu_power_watts"), -1);
    CHECK_EQ_INT(sl_series_position("made_up"), -1);
    sl_series_name(SL_SERIES_BASE + 4 * 3 + 1, name);
    CHECK_STR(name, "gpu3_memory_used_bytes");
    for (int i = 0; i < SL_SERIES_MAX; i++) {
        sl_series_name(i, name);
        CHECK_EQ_INT(sl_series_position(name), i);
    }
}

TEST(fine_format_round_trip)
{
    int64_t v[SL_SERIES_MAX] = { 1234, 0, 7 }, back[SL_SERIES_MAX];
    bool have[SL_SERIES_MAX] = { true, false, true }, hb[SL_SERIES_MAX];
    cleanup_buf struct sl_buf b = SL_BUF_INIT;

    instance_metrics_format_fine(&b, v, have, SL_SERIES_MAX);
    CHECK_STR(b.data, "1234,,7");
    CHECK_EQ_INT(instance_metrics_parse_fine(b.data, back, hb), 3);
    CHECK(hb[0] && !hb[1] && hb[2] && !hb[3]);
    CHECK_EQ_INT(back[0], 1234);
    CHECK_EQ_INT(back[2], 7);
}

/* Samples land in both tiers; the coarse bucket holds the sum, peak and
 * count; a heartbeat sent again adds nothing; the query averages. */
TEST(samples_fine_and_coarse)
{
    struct store *st = test_store();
    size_t skipped = 9;

    world(st);
    int64_t now = T0 + 1000;
    apply(st, "n-a", entry("i-a", T0, 10, 30, 1.5, 40), now, &skipped);
    CHECK_EQ_INT(skipped, 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics WHERE tier = 0"), 30);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics WHERE tier = 1"), 1);
    CHECK_EQ_INT(count(st, "SELECT n FROM instance_metrics WHERE tier = 1"), 30);
    /* again (the agent did not see the answer): nothing new */
    apply(st, "n-a", entry("i-a", T0, 10, 30, 1.5, 40), now, &skipped);
    CHECK_EQ_INT(count(st, "SELECT n FROM instance_metrics WHERE tier = 1"), 30);
    /* a peak */
    apply(st, "n-a", entry("i-a", T0 + 295, 1, 1, 3.5, 90), now, &skipped);
    CHECK_EQ_INT(count(st, "SELECT n FROM instance_metrics WHERE tier = 1"), 31);

    cleanup_json json_t *q = query(st, "i-a", T0, T0 + 300, 60, now);
    if (!CHECK(q))
        return;
    CHECK_STR(json_string_value(json_object_get(q, "tier")), "fine");
    json_t *cpu = json_object_get(json_object_get(q, "series"), "cpu_cores");
    CHECK_EQ_INT(json_array_size(cpu), 5);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_array_get(cpu, 0), 0)), T0);
    CHECK(fabs(json_number_value(json_array_get(json_array_get(cpu, 0), 1)) - 1.5) < 1e-9);
    /* every sample is a fine row: the peak between two 10 s samples shows */
    json_t *gmax = json_object_get(json_object_get(q, "max"), "gpu0_utilization_percent");
    CHECK(fabs(json_number_value(json_array_get(json_array_get(gmax, 4), 1)) - 90) < 1e-9);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics WHERE tier = 0"), 31);
    /* a sample a second after the last is dropped (an agent sampling too often) */
    apply(st, "n-a", entry("i-a", T0 + 296, 1, 1, 9, 9), now, &skipped);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics WHERE tier = 0"), 31);
    CHECK_STR(json_string_value(json_object_get(json_object_get(q, "units"), "cpu_cores")),
              "cores");
    CHECK_STR(json_string_value(json_object_get(json_object_get(q, "absent"), "cpu_share")),
              "no CPU limit");
    CHECK(json_object_get(json_object_get(q, "series"), "cpu_share") == NULL);

    /* the coarse tier: one 5-minute point, its average and its peak */
    cleanup_json json_t *c = query(st, "i-a", T0, T0 + 300, 300, now);
    if (!CHECK(c))
        return;
    CHECK_STR(json_string_value(json_object_get(c, "tier")), "coarse");
    cpu = json_object_get(json_object_get(c, "series"), "cpu_cores");
    CHECK_EQ_INT(json_array_size(cpu), 1);
    CHECK(fabs(json_number_value(json_array_get(json_array_get(cpu, 0), 1)) -
               (30 * 1.5 + 3.5) / 31) < 1e-3);
    gmax = json_object_get(json_object_get(c, "max"), "gpu0_utilization_percent");
    CHECK(fabs(json_number_value(json_array_get(json_array_get(gmax, 0), 1)) - 90) < 1e-9);
}

/* A node speaks for the instances placed on it only: a rogue node's
 * samples about another node's instance are skipped, never stored. */
TEST(rogue_node_cannot_report_for_others)
{
    struct store *st = test_store();
    size_t skipped = 0;

    world(st);
    apply(st, "n-b", entry("i-a", T0, 10, 5, 64, 100), T0 + 100, &skipped);
    CHECK_EQ_INT(skipped, 1);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics"), 0);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics_latest"), 0);
    /* nor about an instance that does not exist, nor a released one */
    apply(st, "n-b", entry("i-nope", T0, 10, 5, 64, 100), T0 + 100, &skipped);
    CHECK_EQ_INT(skipped, 1);
    struct sl_error err = SL_ERROR_INIT;
    must(store_exec(st, "UPDATE instances SET state = 'released' WHERE id = 'i-b'", NULL, &err),
         &err, "release");
    apply(st, "n-b", entry("i-b", T0, 10, 5, 1, 1), T0 + 100, &skipped);
    CHECK_EQ_INT(skipped, 1);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics"), 0);
    /* samples from the future, from before the fine keep, and values
     * that are no numbers >= 0 are left out */
    apply(st, "n-a", entry("i-a", T0 + 100 + 3600, 10, 2, 1, 1), T0 + 100, &skipped);
    apply(st, "n-a", entry("i-a", T0 - 2 * 86400, 10, 2, 1, 1), T0 + 100, &skipped);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics"), 0);
    apply(st, "n-a", entry("i-a", T0, 10, 1, -5, 1), T0 + 100, &skipped);
    CHECK_EQ_INT(count(st, "SELECT COUNT(*) FROM instance_metrics WHERE data LIKE '-%'"), 0);
}

/* A month of samples every 10 s, sent as heartbeats would (a minute at a
 * time): the rows stay within a day of fine slots plus a month of coarse
 * buckets, and the data stays small. */
TEST(a_month_of_samples_stays_bounded)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    size_t skipped;
    const int64_t month = 40 * 86400; /* past the coarse keep */

    world(st);
    int64_t max_rows = 0, max_bytes = 0;
    /* heartbeats of 10 minutes of samples each (an agent back after a
     * while sends such), a transaction per 6 hours: the test's time is
     * the store's commits, not what it checks */
    for (int64_t t = T0; t < T0 + month; t += 600) {
        if (t % 21600 == 0)
            must(store_begin(st, &err), &err, "begin");
        apply(st, "n-a", entry("i-a", t, 10, 60, (double)(t % 7), (int)(t % 101)), t + 600,
              &skipped);
        if (t % 3600 == 0)
            must(instance_metrics_sweep(st, &policy, t + 600, &err), &err, "sweep");
        if ((t + 600) % 21600 == 0)
            must(store_commit(st, &err), &err, "commit");
        if (t % 86400 == 0) {
            int64_t rows = count(st, "SELECT COUNT(*) FROM instance_metrics");
            int64_t bytes = count(st, "SELECT SUM(LENGTH(data)) FROM instance_metrics");
            max_rows = rows > max_rows ? rows : max_rows;
            max_bytes = bytes > max_bytes ? bytes : max_bytes;
        }
        if (!test_ok())
            return;
    }
    int64_t fine = count(st, "SELECT COUNT(*) FROM instance_metrics WHERE tier = 0");
    int64_t coarse = count(st, "SELECT COUNT(*) FROM instance_metrics WHERE tier = 1");
    CHECK(fine <= 86400 / 10 + 6);
    CHECK(fine >= 86400 / 10 - 6);
    CHECK(coarse <= 31 * 288 + 1);
    CHECK(coarse >= 31 * 288 - 1);
    CHECK(max_rows <= 86400 / 10 + 31 * 288 + 12);
    /* under 40 bytes a fine row, 140 a coarse one, for these 4 series */
    CHECK(max_bytes < 8640 * 40 + 8928 * 140);
    printf("  a month: %lld fine + %lld coarse rows, at most %lld rows, %lld bytes of data\n",
           (long long)fine, (long long)coarse, (long long)max_rows, (long long)max_bytes);

    /* a month in one query, from the coarse tier, 5-minute steps */
    int64_t now = T0 + month;
    int64_t took = INT64_MAX; /* the best of 5: the machine may be busy */
    for (int i = 0; i < 5; i++) {
        size_t len;
        int64_t started = sl_time_mono_us();
        free(instance_metrics_query(st, &policy, "i-a", now - 30 * 86400, now, 300, now, &len,
                                    &err));
        int64_t t = sl_time_mono_us() - started;
        took = t < took ? t : took;
    }
    cleanup_json json_t *q = query(st, "i-a", now - 30 * 86400, now, 300, now);
    if (!CHECK(q))
        return;
    json_t *cpu = json_object_get(json_object_get(q, "series"), "cpu_cores");
    CHECK(json_array_size(cpu) >= 30 * 288 - 2);
    printf("  a month's query: %zu points per series in %lld us\n", json_array_size(cpu),
           (long long)took);
    /* nothing older than the coarse keep */
    cleanup_json json_t *old = query(st, "i-a", T0, T0 + 5 * 86400, 3600, now);
    CHECK_EQ_INT(json_object_size(json_object_get(old, "series")), 0);
}

TEST(prometheus_lines_of_running_instances)
{
    struct store *st = test_store();
    struct sl_error err = SL_ERROR_INIT;
    cleanup_buf struct sl_buf out = SL_BUF_INIT;
    size_t skipped;

    world(st);
    apply(st, "n-a", entry("i-a", T0, 10, 3, 2.25, 77), T0 + 30, &skipped);
    must(instance_metrics_render_prom(st, &out, T0 + 30, 300, &err), &err, "render");
    CHECK_CONTAINS(out.data, "# TYPE suanli_instance_cpu_cores gauge\n");
    CHECK_CONTAINS(out.data,
                   "suanli_instance_cpu_cores{instance_id=\"i-a\",renter=\"u-a\"} 2.25\n");
    CHECK_CONTAINS(out.data, "suanli_instance_gpu_utilization_percent{instance_id=\"i-a\","
                             "renter=\"u-a\",gpu=\"0\"} 77\n");
    CHECK(strstr(out.data, "cpu_share_ratio") == NULL);
    /* stale, or stopped: left out */
    sl_buf_reset(&out);
    must(instance_metrics_render_prom(st, &out, T0 + 3600, 300, &err), &err, "render");
    CHECK(!out.data || !strstr(out.data, "i-a"));
}
