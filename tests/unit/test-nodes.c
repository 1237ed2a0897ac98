/* server/nodes.c: what a heartbeat's inventory does to the host's GPUs and
 * images in the store. The model a reported GPU name stands for (the
 * longest catalog name in it, ignoring case), GPUs the host no longer
 * reports leaving the pool unless an instance holds them, and an image
 * listed twice in one report (the last wins). Matched in C, not SQL, since
 * the store keeps to portable SQL (store.h). */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/config.h"
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
