/* server/nodes.c: what a heartbeat's inventory does to the host's GPUs and
 * images in the store. The model a reported GPU name stands for (the
 * longest catalog name in it, ignoring case), GPUs the host no longer
 * reports leaving the pool unless an instance holds them, and an image
 * listed twice in one report (the last wins). Matched in C, not SQL, since
 * the store keeps to portable SQL (store.h). */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/config.h"
#include "../../lib/timefmt.h"
#include "../../lib/json.h"
#include "../../lib/xalloc.h"
#include "../../server/catalog.h"
#include "../../server/nodes.h"
#include "../../server/server.h"

#include <stdio.h>

static void must(int rc, const struct sl_error *err, const char *what)
{
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "%s: %s", what, err->message);
}

static json_t *inventory(const char *const *names, size_t n, size_t first)
{
    json_t *gpus = json_array();

    for (size_t i = 0; i < n; i++) {
        char uuid[32];
        snprintf(uuid, sizeof(uuid), "GPU-%zu", first + i);
        json_array_append_new(gpus,
                              json_pack("{s:I, s:s, s:s, s:i}", "index", (json_int_t)(first + i),
                                        "uuid", uuid, "name", names[i], "vram_mib", 24576));
    }
    return json_pack("{s:i, s:i, s:o}", "cpu_cores", 32, "memory_mib", 65536, "gpus", gpus);
}

/* The model name of the host's GPU idx ("" for none, "-" when the GPU is
 * gone). */
static const char *model_of(struct store *st, int idx)
{
    static char out[8][64];
    static int k;
    struct sl_error err = SL_ERROR_INIT;
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT COALESCE(m.name, '') FROM gpus g LEFT JOIN gpu_models m"
                    " ON m.id = g.gpu_model_id WHERE g.node_id = 'n-1' AND g.idx = ?1",
                    DB_ARGS(DB_INT(idx)), &err);
    int rc = rows ? db_next(rows, &err) : -1;
    char *o = out[k++ % 8];

    snprintf(o, 64, "%s", rc == 1 ? db_text(rows, 0) : rc == 0 ? "-" : "error");
    return o;
}

struct fixture {
    struct server srv;
    struct store *st;
};

static void fixture_release(struct fixture *f)
{
    sl_config_release(server_options, server_options_count, &f->srv.cfg);
}
#define cleanup_fixture __attribute__((cleanup(fixture_release)))

static bool setup(struct fixture *f)
{
    struct sl_error err = SL_ERROR_INIT;

    memset(f, 0, sizeof(*f));
    must(sl_config_defaults(server_options, server_options_count, &f->srv.cfg, &err), &err,
         "config");
    f->srv.store = f->st = test_store();
    must(catalog_region_create(f->st, "r-1", "One", false, &err), &err, "region");
    /* names that hold others: the longer is the match, whether it comes
     * before the shorter one in the table's order or after */
    static const char *const models[][2] = {
        { "gm-0", "RTX 4090" }, { "gm-1", "RTX 4090 D" }, { "gm-2", "H200 NVL" },
        { "gm-3", "H200" },     { "gm-4", "A100 80GB" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(models); i++)
        must(store_exec(f->st,
                        "INSERT INTO gpu_models (id, name, vram_mib, cpu_cores_per_gpu,"
                        " memory_mib_per_gpu, created_at) VALUES (?1, ?2, 24576, 8, 32768, 1)",
                        DB_ARGS(DB_TEXT(models[i][0]), DB_TEXT(models[i][1])), &err),
             &err, models[i][1]);
    must(store_exec(f->st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at) VALUES ('n-1', 'h', '192.0.2.1',"
                    " 'r-1', 'x', 30000, 30100, 1)",
                    DB_NO_ARGS, &err),
         &err, "node");
    return test_ok();
}

TEST(gpu_names_match_the_longest_model_ignoring_case)
{
    cleanup_fixture struct fixture f = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    if (!setup(&f))
        return;
    static const char *const names[] = {
        "NVIDIA GeForce RTX 4090 D", "nvidia geforce rtx 4090", "NVIDIA H200",
        "Tesla V100-SXM2-32GB",      "NVIDIA A100-SXM4-80GB",   "NVIDIA H200 NVL"
    };
    cleanup_json json_t *inv = inventory(names, ARRAY_SIZE(names), 0);
    must(nodes_heartbeat(&f.srv, "n-1", inv, &err), &err, "heartbeat");
    CHECK_STR(model_of(f.st, 0), "RTX 4090 D");
    CHECK_STR(model_of(f.st, 1), "RTX 4090");
    CHECK_STR(model_of(f.st, 2), "H200");
    CHECK_STR(model_of(f.st, 3), ""); /* not in the catalog: no model, still listed */
    CHECK_STR(model_of(f.st, 4), ""); /* "A100 80GB" is not in "A100-SXM4-80GB" */
    CHECK_STR(model_of(f.st, 5), "H200 NVL");
}

TEST(gpus_gone_from_the_host_leave_the_pool_unless_held)
{
    cleanup_fixture struct fixture f = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    if (!setup(&f))
        return;
    static const char *const four[] = { "RTX 4090", "RTX 4090", "RTX 4090", "RTX 4090" };
    cleanup_json json_t *all = inventory(four, 4, 0);
    must(nodes_heartbeat(&f.srv, "n-1", all, &err), &err, "heartbeat");
    /* an instance holds GPU 2 */
    must(store_exec(f.st,
                    "UPDATE gpus SET instance_id = 'i-held' WHERE node_id = 'n-1' AND idx = 2",
                    DB_NO_ARGS, &err),
         &err, "hold");
    /* the host now reports GPU 1 alone */
    cleanup_json json_t *one = inventory(four, 1, 1);
    must(nodes_heartbeat(&f.srv, "n-1", one, &err), &err, "heartbeat");
    CHECK_STR(model_of(f.st, 0), "-");
    CHECK_STR(model_of(f.st, 1), "RTX 4090");
    CHECK_STR(model_of(f.st, 2), "RTX 4090"); /* held: kept while the host recovers */
    CHECK_STR(model_of(f.st, 3), "-");
    /* another node's GPUs are not this one's to drop */
    must(store_exec(f.st,
                    "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                    " ssh_port_min, ssh_port_max, created_at) VALUES ('n-2', 'h2', '192.0.2.2',"
                    " 'r-1', 'y', 30000, 30100, 1)",
                    DB_NO_ARGS, &err),
         &err, "node 2");
    cleanup_json json_t *other = inventory(four, 4, 0);
    must(nodes_heartbeat(&f.srv, "n-2", other, &err), &err, "heartbeat 2");
    cleanup_json json_t *none = inventory(four, 0, 0);
    must(nodes_heartbeat(&f.srv, "n-1", none, &err), &err, "heartbeat");
    int64_t n = -1;
    must(store_get_int(f.st, "SELECT COUNT(*) FROM gpus WHERE node_id = 'n-2'", DB_NO_ARGS, &n,
                       &err),
         &err, "count");
    CHECK_EQ_INT(n, 4);
    CHECK_STR(model_of(f.st, 1), "-");
    CHECK_STR(model_of(f.st, 2), "RTX 4090");
}

TEST(an_image_reported_twice_keeps_the_last)
{
    cleanup_fixture struct fixture f = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    if (!setup(&f))
        return;
    cleanup_json json_t *images =
        json_pack("[{s:s, s:s}, {s:s, s:s}, {s:s, s:s, s:s}]", "name", "debian-12", "state",
                  "building", "name", "jupyter", "state", "failed", "name", "debian-12", "state",
                  "ready", "os", "Debian 12");
    must(nodes_apply_images(&f.srv, "n-1", images, &err), &err, "images");
    int64_t n = -1;
    must(store_get_int(f.st,
                       "SELECT COUNT(*) FROM node_images WHERE node_id = 'n-1'"
                       " AND name = 'debian-12' AND state = 'ready' AND os = 'Debian 12'",
                       DB_NO_ARGS, &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 1);
    must(store_get_int(f.st, "SELECT COUNT(*) FROM node_images WHERE node_id = 'n-1'", DB_NO_ARGS,
                       &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 2);
    /* a later report without jupyter forgets it */
    cleanup_json json_t *again = json_pack("[{s:s, s:s}]", "name", "debian-12", "state", "ready");
    must(nodes_apply_images(&f.srv, "n-1", again, &err), &err, "images");
    must(store_get_int(f.st, "SELECT COUNT(*) FROM node_images WHERE node_id = 'n-1'", DB_NO_ARGS,
                       &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 1);
}

/* A host's report of a build or import names what it was of: one of an
 * image since deleted and made again from another archive (or recipe) is
 * stale, and says nothing of the new image; one of what is asked now, or
 * without a source (an older agent), counts. */
TEST(an_image_report_of_another_source_is_ignored)
{
    cleanup_fixture struct fixture f = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    if (!setup(&f))
        return;
    cleanup_free char *recipe = xasprintf("upload:%s", sha);
    must(store_exec(f.st,
                    "INSERT INTO images (name, kind, recipe, created_at) VALUES"
                    " ('up', 'base', ?1, 1), ('built', 'base', 'jupyter', 1)",
                    DB_ARGS(DB_TEXT(recipe)), &err),
         &err, "images");
    cleanup_json json_t *images = json_pack(
        "[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s}, {s:s, s:s, s:s}, {s:s, s:s, s:s}]", "name", "up",
        "state", "failed", "message", "damaged", "source",
        "upload:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff", "name", "built",
        "state", "failed", "source", "recipe:base", "name", "gone", "state", "failed", "source",
        "upload:aa", "name", "old-agent", "state", "building", "message", "");
    must(nodes_apply_images(&f.srv, "n-1", images, &err), &err, "images");
    int64_t n = -1;
    must(store_get_int(f.st, "SELECT COUNT(*) FROM node_images WHERE name IN ('up', 'built')",
                       DB_NO_ARGS, &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 0);
    /* an image no longer there, and an agent that says no source: kept */
    must(store_get_int(f.st, "SELECT COUNT(*) FROM node_images WHERE name IN ('gone', 'old-agent')",
                       DB_NO_ARGS, &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 2);
    cleanup_json json_t *now =
        json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}]", "name", "up", "state", "building", "source",
                  recipe, "name", "built", "state", "failed", "source", "recipe:jupyter");
    must(nodes_apply_images(&f.srv, "n-1", now, &err), &err, "images");
    must(store_get_int(f.st,
                       "SELECT COUNT(*) FROM node_images WHERE (name = 'up' AND state = 'building')"
                       " OR (name = 'built' AND state = 'failed')",
                       DB_NO_ARGS, &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 2);
}

/* A fleet (server/nodes-fleet.c). */

TEST(a_host_is_online_then_offline_then_lost)
{
    struct server_config cfg = { .node_offline_after = 30, .node_lost_after = 600 };
    int64_t now = 1000000;

    CHECK_EQ_INT(nodes_condition(&cfg, 0, now), NODE_OFFLINE); /* never heard */
    CHECK_EQ_INT(nodes_condition(&cfg, now, now), NODE_ONLINE);
    CHECK_EQ_INT(nodes_condition(&cfg, now - 29, now), NODE_ONLINE);
    CHECK_EQ_INT(nodes_condition(&cfg, now - 30, now), NODE_OFFLINE);
    CHECK_EQ_INT(nodes_condition(&cfg, now - 599, now), NODE_OFFLINE);
    CHECK_EQ_INT(nodes_condition(&cfg, now - 600, now), NODE_LOST);
    /* never lost before it is offline */
    cfg.node_lost_after = 5;
    CHECK_EQ_INT(nodes_condition(&cfg, now - 10, now), NODE_ONLINE);
    CHECK_EQ_INT(nodes_condition(&cfg, now - 30, now), NODE_LOST);
    CHECK_STR(nodes_condition_name(NODE_LOST), "lost");
    CHECK_STR(nodes_condition_name(NODE_ONLINE), "online");
}

TEST(a_start_on_a_marked_host_needs_no_new_gpus)
{
    static const struct {
        enum node_condition condition;
        bool cordoned, draining, holds_gpus, nogpu;
        const char *refusal;
    } cases[] = {
        { NODE_ONLINE, false, false, false, false, NULL },
        { NODE_OFFLINE, false, false, false, false, NULL }, /* placement judges that */
        { NODE_LOST, false, false, true, true, "host_lost" },
        { NODE_ONLINE, true, false, false, false, "host_unavailable" },
        { NODE_ONLINE, true, false, false, true, NULL }, /* no-GPU: reach the data */
        { NODE_ONLINE, true, false, true, false, NULL }, /* a plan keeps its GPUs */
        { NODE_ONLINE, true, true, false, true, "host_unavailable" },
        { NODE_ONLINE, true, true, false, false, "host_unavailable" },
        { NODE_ONLINE, true, true, true, false, NULL },
        { NODE_LOST, true, true, true, false, "host_lost" },
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct node_status ns = { .condition = cases[i].condition,
                                  .cordoned = cases[i].cordoned,
                                  .draining = cases[i].draining };
        const char *got = nodes_start_refusal(&ns, cases[i].holds_gpus, cases[i].nogpu);
        if (cases[i].refusal)
            CHECK_STR(got ? got : "(null)", cases[i].refusal);
        else
            CHECK(got == NULL);
    }
}

TEST(a_lost_host_is_told_once_per_loss)
{
    cleanup_fixture struct fixture f = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    static const char *const one[] = { "RTX 4090" };
    int64_t lost = -1, n = -1;

    if (!setup(&f))
        return;
    cleanup_json json_t *inv = inventory(one, 1, 0);
    must(nodes_heartbeat(&f.srv, "n-1", inv, &err), &err, "heartbeat");
    must(nodes_watch(&f.srv, &lost, &err), &err, "watch");
    CHECK_EQ_INT(lost, 0);
    must(store_exec(f.st, "UPDATE nodes SET last_heartbeat = ?1 WHERE id = 'n-1'",
                    DB_ARGS(DB_INT(sl_time_now() - f.srv.cfg.node_lost_after)), &err),
         &err, "silence");
    must(nodes_watch(&f.srv, &lost, &err), &err, "watch");
    CHECK_EQ_INT(lost, 1);
    must(nodes_watch(&f.srv, &lost, &err), &err, "watch");
    CHECK_EQ_INT(lost, 0);
    /* back, then lost again: told again */
    must(nodes_heartbeat(&f.srv, "n-1", inv, &err), &err, "heartbeat");
    must(store_get_int(f.st, "SELECT COUNT(*) FROM nodes WHERE lost_at IS NOT NULL", DB_NO_ARGS, &n,
                       &err),
         &err, "count");
    CHECK_EQ_INT(n, 0);
    must(store_exec(f.st, "UPDATE nodes SET last_heartbeat = ?1 WHERE id = 'n-1'",
                    DB_ARGS(DB_INT(sl_time_now() - f.srv.cfg.node_lost_after - 5)), &err),
         &err, "silence");
    must(nodes_watch(&f.srv, &lost, &err), &err, "watch");
    CHECK_EQ_INT(lost, 1);
}

TEST(a_removed_host_is_gone_but_its_row_stays)
{
    cleanup_fixture struct fixture f = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    static const char *const two[] = { "RTX 4090", "RTX 4090" };
    struct node_status ns;
    int64_t n = -1;

    if (!setup(&f))
        return;
    cleanup_json json_t *inv = inventory(two, 2, 0);
    must(nodes_heartbeat(&f.srv, "n-1", inv, &err), &err, "heartbeat");
    must(nodes_cordon(&f.srv, "n-1", "fans", &err), &err, "cordon");
    must(nodes_status(&f.srv, "n-1", &ns, &err), &err, "status");
    CHECK(ns.cordoned && !ns.draining);
    CHECK_STR(ns.reason, "fans");
    must(nodes_remove(&f.srv, "n-1", &err), &err, "remove");
    CHECK(nodes_status(&f.srv, "n-1", &ns, &err) < 0);
    CHECK_STR(err.code, "no_such_node");
    must(store_get_int(f.st,
                       "SELECT COUNT(*) FROM nodes WHERE id = 'n-1' AND token_hash = 'removed:n-1'"
                       " AND removed_at IS NOT NULL",
                       DB_NO_ARGS, &n, &err),
         &err, "count");
    CHECK_EQ_INT(n, 1);
    must(store_get_int(f.st, "SELECT COUNT(*) FROM gpus WHERE node_id = 'n-1'", DB_NO_ARGS, &n,
                       &err),
         &err, "count");
    CHECK_EQ_INT(n, 0);
    CHECK(nodes_cordon(&f.srv, "n-1", NULL, &err) < 0);
}
