/* server/sched.c: offers per host. A host's CPU and memory less the
 * operator's reserve are divided among all of its GPUs, at most the
 * catalog's promise per GPU; an instance counts against its host while it
 * holds GPUs or runs in no-GPU mode; a host gives no more GPUs than its CPU
 * and memory left cover. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/config.h"
#include "../../server/sched.h"
#include "../../server/server.h"

#include <stdio.h>

static void must(int rc, const struct sl_error *err, const char *what)
{
    if (rc < 0)
        test_fail(__FILE__, __LINE__, "%s: %s", what, err->message);
}

TEST(per_gpu_divides_what_is_left_after_the_reserve)
{
    /* 2 cores, 8 GPUs, nothing reserved: a quarter core each */
    CHECK_EQ_INT(sched_per_gpu(2000, 0, 8, 16000, SCHED_MIN_MILLICORES), 250);
    /* 24 GiB less 2 GiB reserved among 8: 2816 MiB each */
    CHECK_EQ_INT(sched_per_gpu(24576, 2048, 8, 122880, SCHED_MIN_MEMORY_MIB), 2816);
    /* rounded down: 10 - 1 cores among 8 is 1125 millicores, 7 among 3 is 2333 */
    CHECK_EQ_INT(sched_per_gpu(10000, 1000, 8, 0, 1), 1125);
    CHECK_EQ_INT(sched_per_gpu(7000, 0, 3, 0, 1), 2333);
    /* a big host gives no more than the catalog promises a GPU */
    CHECK_EQ_INT(sched_per_gpu(128000, 0, 4, 16000, 1), 16000);
    /* nothing: no GPUs, a reserve as large as the host, a share too small */
    CHECK_EQ_INT(sched_per_gpu(2000, 0, 0, 16000, 1), 0);
    CHECK_EQ_INT(sched_per_gpu(2000, 2000, 8, 16000, 1), 0);
    CHECK_EQ_INT(sched_per_gpu(2000, 5000, 8, 16000, 1), 0);
    CHECK_EQ_INT(sched_per_gpu(1000, 250, 8, 16000, SCHED_MIN_MILLICORES), 0); /* 93 */
    CHECK_EQ_INT(sched_per_gpu(1000, 200, 8, 16000, SCHED_MIN_MILLICORES), 100);
    /* no overflow with the largest a heartbeat may report (2^32 MiB) */
    CHECK_EQ_INT(sched_per_gpu(1LL << 32, 0, 1, 0, 1), 1LL << 32);
}

struct fixture {
    struct server srv;
};

static void fixture_release(struct fixture *f)
{
    sl_config_release(server_options, server_options_count, &f->srv.cfg);
}
#define cleanup_fixture __attribute__((cleanup(fixture_release)))

static bool setup(struct fixture *f, int64_t cpu_reserve, int64_t memory_reserve)
{
    struct sl_error err = SL_ERROR_INIT;

    memset(f, 0, sizeof(*f));
    must(sl_config_defaults(server_options, server_options_count, &f->srv.cfg, &err), &err,
         "config");
    f->srv.cfg.cpu_reserve_millicores = cpu_reserve;
    f->srv.cfg.memory_reserve_mib = memory_reserve;
    return test_ok();
}

TEST(host_share_takes_the_reserve_and_the_catalog_cap)
{
    cleanup_fixture struct fixture f;
    int64_t cpu, mem;

    if (!setup(&f, 1000, 4096))
        return;
    /* the host: 2 cores, 24 GiB, 8 GPUs; the sample's 16 cores and
     * 120 GiB per GPU are not what it has */
    struct host_resources small = { .cpu_cores = 2, .memory_mib = 24 * 1024, .gpus = 8 };
    sched_host_share(&f.srv, &small, 16, 122880, &cpu, &mem);
    CHECK_EQ_INT(cpu, 125);
    CHECK_EQ_INT(mem, 2560);
    CHECK(cpu * small.gpus <= small.cpu_cores * 1000);
    CHECK(mem * small.gpus <= small.memory_mib);
    struct host_resources big = { .cpu_cores = 256, .memory_mib = 2 << 20, .gpus = 8 };
    sched_host_share(&f.srv, &big, 16, 122880, &cpu, &mem);
    CHECK_EQ_INT(cpu, 16000);
    CHECK_EQ_INT(mem, 122880);
    /* a host whose reserve eats it all offers nothing */
    struct host_resources tiny = { .cpu_cores = 1, .memory_mib = 4096, .gpus = 1 };
    sched_host_share(&f.srv, &tiny, 16, 122880, &cpu, &mem);
    CHECK_EQ_INT(cpu, 0);
    CHECK_EQ_INT(mem, 0);
}

TEST(host_fits_no_more_gpus_than_cpu_and_memory_left)
{
    cleanup_fixture struct fixture f;

    if (!setup(&f, 1000, 0))
        return;
    /* 3 cores - 1 reserved, 1 a GPU; 2 GPUs idle */
    struct host_resources h = { .cpu_cores = 3, .memory_mib = 65536, .gpus = 2 };
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 2, 1000, 1024), 2);
    /* an instance in no-GPU mode holds half a core: one GPU's worth is left */
    h.cpu_used_millicores = 500;
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 2, 1000, 1024), 1);
    /* all of it given: none, GPUs idle or not */
    h.cpu_used_millicores = 2000;
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 2, 1000, 1024), 0);
    /* more given than there is (the reserve grew since): none, not negative */
    h.cpu_used_millicores = 2500;
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 2, 1000, 1024), 0);
    /* memory bounds it the same way */
    h.cpu_used_millicores = 0;
    h.memory_used_mib = 65536 - 1500;
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 2, 1000, 1024), 1);
    /* no share: no GPUs */
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 2, 0, 1024), 0);
    /* the idle GPUs bound it too */
    h.memory_used_mib = 0;
    CHECK_EQ_INT(sched_host_fits(&f.srv, &h, 1, 1000, 1024), 1);
}

TEST(no_gpu_mode_gets_no_more_than_the_instance_has)
{
    CHECK_EQ_INT(sched_instance_limit(true, 500, 2000), 500);
    CHECK_EQ_INT(sched_instance_limit(true, 500, 250), 250);
    CHECK_EQ_INT(sched_instance_limit(false, 500, 250), 250);
    CHECK_EQ_INT(sched_instance_limit(false, 500, 2000), 2000);
}

/* An instance counts while it holds GPUs (at its own figures) and while it
 * is meant to run in no-GPU mode (at no-GPU mode's, capped by its own); a
 * stopped one or a released one does not. */
TEST(host_resources_counts_what_instances_hold)
{
    cleanup_fixture struct fixture f;
    struct sl_error err = SL_ERROR_INIT;
    struct host_resources h;

    if (!setup(&f, 0, 0))
        return;
    f.srv.store = test_store();
    f.srv.cfg.nogpu_millicores = 500;
    f.srv.cfg.nogpu_memory_mib = 2048;
    struct store *st = f.srv.store;
    static const char *const setup_sql[] = {
        "INSERT INTO users (id, email, name, password_hash, created_at)"
        " VALUES ('u-1', 'u@example.com', 'U', 'x', 1)",
        "INSERT INTO regions (id, name, created_at) VALUES ('r-1', 'One', 1)",
        "INSERT INTO gpu_models (id, name, vram_mib, cpu_cores_per_gpu, memory_mib_per_gpu,"
        " created_at) VALUES ('gm-1', 'M', 1, 8, 8192, 1)",
        "INSERT INTO nodes (id, hostname, address, region_id, token_hash, cpu_cores, memory_mib,"
        " ssh_port_min, ssh_port_max, created_at) VALUES ('n-1', 'h', '192.0.2.1', 'r-1', 'x',"
        " 8, 32768, 30000, 30100, 1)",
    };
    for (size_t i = 0; i < ARRAY_SIZE(setup_sql); i++)
        must(store_exec(st, setup_sql[i], DB_NO_ARGS, &err), &err, setup_sql[i]);
    for (int i = 0; i < 4; i++)
        must(store_exec(st,
                        "INSERT INTO gpus (node_id, idx, uuid, name, gpu_model_id, vram_mib)"
                        " VALUES ('n-1', ?1, 'u' || ?1, 'M', 'gm-1', 1)",
                        DB_ARGS(DB_INT(i)), &err),
             &err, "gpu");
    /* id, mode, desired, state, CPU, memory, GPUs held */
    static const struct {
        const char *id, *mode, *desired, *state;
        int64_t cpu, mem, held;
    } rows[] = {
        { "i-gpu", "gpu", "running", "running", 4000, 16384, 2 },    /* counts */
        { "i-nogpu", "nogpu", "running", "running", 2000, 8192, 0 }, /* 500, 2048 */
        { "i-small", "nogpu", "running", "starting", 250, 1024, 0 }, /* 250, 1024 */
        { "i-stopped", "gpu", "stopped", "stopped", 2000, 8192, 0 }, /* nothing */
        { "i-gone", "gpu", "released", "released", 2000, 8192, 1 },  /* nothing */
        { "i-plan", "gpu", "stopped", "stopped", 2000, 8192, 1 },    /* a plan's GPU */
    };
    int next_gpu = 0;
    for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
        must(store_exec(st,
                        "INSERT INTO instances (id, user_id, name, region_id, node_id,"
                        " gpu_model_id, gpus, image, system_disk_gib, data_disk_gib, ssh_port,"
                        " root_password, state, desired, mode, created_at, updated_at,"
                        " cpu_millicores, memory_mib) VALUES (?1, 'u-1', ?1, 'r-1', 'n-1',"
                        " 'gm-1', 1, 'img', 30, 10, 30000 + ?7, '', ?4, ?3, ?2, 1, 1, ?5, ?6)",
                        DB_ARGS(DB_TEXT(rows[i].id), DB_TEXT(rows[i].mode),
                                DB_TEXT(rows[i].desired), DB_TEXT(rows[i].state),
                                DB_INT(rows[i].cpu), DB_INT(rows[i].mem), DB_INT((int64_t)i)),
                        &err),
             &err, rows[i].id);
        for (int64_t g = 0; g < rows[i].held; g++, next_gpu++)
            must(store_exec(st, "UPDATE gpus SET instance_id = ?1 WHERE idx = ?2",
                            DB_ARGS(DB_TEXT(rows[i].id), DB_INT(next_gpu)), &err),
                 &err, "hold");
    }
    must(sched_host_resources(&f.srv, "n-1", NULL, &h, &err), &err, "resources");
    CHECK_EQ_INT(h.cpu_cores, 8);
    CHECK_EQ_INT(h.memory_mib, 32768);
    CHECK_EQ_INT(h.gpus, 4);
    /* i-gpu + i-nogpu (capped by no-GPU mode) + i-small (by its own) +
     * i-plan; released i-gone holds a GPU row still and is left out */
    CHECK_EQ_INT(h.cpu_used_millicores, 4000 + 500 + 250 + 2000);
    CHECK_EQ_INT(h.memory_used_mib, 16384 + 2048 + 1024 + 8192);
    /* leaving one out: the instance about to start again */
    must(sched_host_resources(&f.srv, "n-1", "i-gpu", &h, &err), &err, "resources");
    CHECK_EQ_INT(h.cpu_used_millicores, 500 + 250 + 2000);
    CHECK_EQ_INT(sched_host_resources(&f.srv, "n-none", NULL, &h, &err), -1);
    CHECK_STR(err.code, "no_such_host");
}
