/* server/desired-wait.c: agents waiting for their desired state. A
 * thousand waiters cost no thread each; a committed change of one node's
 * revision resumes that node's waiter only, a rolled-back one none; a
 * waiter whose time is up is resumed; stopping resumes the rest. */
#include "harness.h"

#include "../../lib/config.h"
#include "../../lib/timefmt.h"
#include "../../server/catalog.h"
#include "../../server/desired-wait.h"
#include "../../server/instance-sync.h"
#include "../../server/server.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NODES 1000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int resumed[NODES + 1];
static int resumed_total;

static void on_resume(void *ctx)
{
    int i = (int)(intptr_t)ctx;
    pthread_mutex_lock(&lock);
    resumed[i]++;
    resumed_total++;
    pthread_mutex_unlock(&lock);
}

static int total(void)
{
    pthread_mutex_lock(&lock);
    int n = resumed_total;
    pthread_mutex_unlock(&lock);
    return n;
}

static bool wait_total(int want, int64_t ms)
{
    int64_t end = sl_time_mono_ms() + ms;
    while (total() < want && sl_time_mono_ms() < end)
        usleep(1000);
    return total() == want;
}

static void node_id(int i, char id[16])
{
    snprintf(id, 16, "n-%04d", i);
}

TEST(a_change_resumes_its_nodes_waiter_only_and_stop_resumes_the_rest)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server srv;
    char id[16];

    memset(&srv, 0, sizeof(srv));
    memset(resumed, 0, sizeof(resumed));
    resumed_total = 0;
    CHECK_EQ_INT(sl_config_defaults(server_options, server_options_count, &srv.cfg, &err), 0);
    srv.store = test_store();
    if (!CHECK_EQ_INT(catalog_region_create(srv.store, "r-1", "One", false, &err), 0))
        printf("  %s\n", err.message);
    CHECK_EQ_INT(store_begin(srv.store, &err), 0);
    for (int i = 0; i < NODES; i++) {
        node_id(i, id);
        int rc = store_exec(srv.store,
                            "INSERT INTO nodes (id, hostname, address, region_id, token_hash,"
                            " ssh_port_min, ssh_port_max, created_at) VALUES (?1, 'h',"
                            " '192.0.2.1', 'r-1', ?1, 30000, 30100, 1)",
                            DB_ARGS(DB_TEXT(id)), &err);
        if (!CHECK_EQ_INT(rc, 1)) {
            printf("  %s\n", err.message);
            return;
        }
    }
    CHECK_EQ_INT(store_commit(srv.store, &err), 0);

    struct desired_waits *w = desired_waits_start(&srv, &err);
    if (!CHECK(w != NULL))
        return;
    store_set_commit_hook(srv.store, desired_waits_wake, w);
    int64_t far = sl_time_mono_ms() + 60000;
    for (int i = 0; i < NODES; i++) {
        node_id(i, id);
        desired_waits_add(w, id, 1, far, on_resume, (void *)(intptr_t)i); /* revision 1 */
    }
    /* one whose time is up soon */
    desired_waits_add(w, "n-0000", 1, sl_time_mono_ms() + 100, on_resume, (void *)(intptr_t)NODES);
    usleep(50 * 1000);
    CHECK_EQ_INT(total(), 0);

    /* a rolled-back change resumes nobody */
    CHECK_EQ_INT(store_begin(srv.store, &err), 0);
    CHECK_EQ_INT(instances_node_changed(srv.store, "n-0500", &err), 0);
    store_rollback(srv.store);
    CHECK(wait_total(1, 1000)); /* only the deadline's */
    CHECK_EQ_INT(resumed[NODES], 1);

    /* a committed one resumes that node's waiter, at once */
    int64_t t0 = sl_time_mono_us();
    CHECK_EQ_INT(store_begin(srv.store, &err), 0);
    CHECK_EQ_INT(instances_node_changed(srv.store, "n-0777", &err), 0);
    CHECK_EQ_INT(store_commit(srv.store, &err), 0);
    CHECK(wait_total(2, 1000));
    int64_t took = sl_time_mono_us() - t0;
    CHECK_EQ_INT(resumed[777], 1);
    CHECK_EQ_INT(resumed[500], 0);
    printf("  one change among %d waiters: its waiter resumed in %.2f ms\n", NODES,
           (double)took / 1000.0);
    CHECK(took < 500 * 1000);

    /* the rest go when the list stops */
    store_set_commit_hook(srv.store, NULL, NULL);
    desired_waits_stop(w);
    CHECK_EQ_INT(total(), NODES + 1);
    for (int i = 0; i < NODES; i++)
        CHECK_EQ_INT(resumed[i], 1);
    sl_config_release(server_options, server_options_count, &srv.cfg);
}
