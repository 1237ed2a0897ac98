/* server/leader.c and the store's links (store.h, store-pg-link.c): one
 * replica of a database leads, a closed link hands the lead over, and a
 * change committed in one process wakes another's waiters. On SQLite there
 * are no links and the one process leads. */
#include "harness.h"

#include "../../lib/timefmt.h"
#include "../../server/leader.h"

#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* lock(l) until it says taken, for up to 3 s: a closed session's lock is
 * freed when its backend has gone, a moment after the close */
static int lock_within(struct store_link *l)
{
    struct sl_error err = SL_ERROR_INIT;
    int rc = 0;

    for (int i = 0; i < 300 && rc == 0; i++) {
        rc = store_link_lock(l, 4242, &err);
        if (rc == 0)
            nap_ms(10);
    }
    return rc;
}

TEST(links_only_on_postgres)
{
    struct sl_error err = SL_ERROR_INIT;
    struct store_link *l = store_link_open(test_store(), 1000, &err);

    if (test_store_is_pg()) {
        CHECK(l != NULL);
        CHECK_EQ_INT(store_link_ping(l, &err), 0);
    } else {
        CHECK(l == NULL);
        CHECK_EQ_INT(err.kind, SL_E_UNSUPPORTED);
        CHECK_STR(err.code, "no_links");
    }
    store_link_close(l);
}

TEST(one_link_holds_the_lock_and_closing_hands_it_over)
{
    struct sl_error err = SL_ERROR_INIT;

    if (!test_store_is_pg())
        return;
    struct store_link *a = store_link_open(test_store(), 2000, &err);
    struct store_link *b = store_link_open(test_store(), 2000, &err);
    if (!CHECK(a && b))
        return;
    CHECK_EQ_INT(store_link_lock(a, 4242, &err), 1);
    CHECK_EQ_INT(store_link_lock(b, 4242, &err), 0);
    CHECK_EQ_INT(store_link_lock(a, 4242, &err), 1); /* its own: still held */
    CHECK_EQ_INT(store_link_lock(b, 4243, &err), 1); /* another key is another lock */
    store_link_close(a);
    CHECK_EQ_INT(lock_within(b), 1);
    store_link_close(b);
}

TEST(notices_reach_the_other_links_not_the_sender)
{
    struct sl_error err = SL_ERROR_INIT;

    if (!test_store_is_pg())
        return;
    struct store_link *a = store_link_open(test_store(), 2000, &err);
    struct store_link *b = store_link_open(test_store(), 2000, &err);
    if (!CHECK(a && b))
        return;
    CHECK_EQ_INT(store_link_listen(a, "t_changes", &err), 0);
    CHECK_EQ_INT(store_link_listen(b, "t_changes", &err), 0);
    CHECK_EQ_INT(store_link_notify(b, "t_changes", &err), 0);
    CHECK_EQ_INT(store_link_wait(a, -1, 2000, &err), 1);
    /* b's own notice is not news to b */
    CHECK_EQ_INT(store_link_wait(b, -1, 200, &err), 0);
    CHECK_EQ_INT(store_link_wait(a, -1, 100, &err), 0);
    /* the wake descriptor ends a wait early */
    int fd = eventfd(1, EFD_CLOEXEC);
    int64_t t0 = sl_time_mono_ms();
    CHECK_EQ_INT(store_link_wait(a, fd, 2000, &err), 0);
    CHECK(sl_time_mono_ms() - t0 < 1000);
    close(fd);
    store_link_close(a);
    store_link_close(b);
}

static int hook_calls;

static void count_hook(void *ctx)
{
    (void)ctx;
    __atomic_add_fetch(&hook_calls, 1, __ATOMIC_SEQ_CST);
}

static bool held_within(struct leader *ld, int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        if (leader_held(ld))
            return true;
        nap_ms(10);
    }
    return leader_held(ld);
}

TEST(one_leader_hands_over_and_changes_cross)
{
    struct sl_error err = SL_ERROR_INIT;
    struct server one = { 0 }, two = { 0 };

    one.store = test_store();
    struct leader *first = leader_start(&one, &err);
    if (!CHECK(first))
        return;
    char why[512];
    if (!test_store_is_pg()) {
        /* SQLite: the one process leads, with no thread and no wait */
        CHECK(leader_held(first));
        CHECK(leader_may_run(first));
        CHECK_EQ_INT(leader_runs(first), 1);
        CHECK(leader_db_ok(first, why, sizeof(why)));
        leader_free(first);
        return;
    }
    CHECK(held_within(first, 3000));
    CHECK(leader_db_ok(first, why, sizeof(why)));
    two.store = store_open(test_store_uri(), &err);
    two.cfg.leader_always = true; /* the test knob: works, leads not */
    struct leader *second = leader_start(&two, &err);
    if (!CHECK(two.store && second))
        return;
    nap_ms(1500);
    CHECK(!leader_held(second));
    CHECK(leader_may_run(second));
    /* a change noted in one store runs the other's commit hook */
    store_set_commit_hook(two.store, count_hook, NULL);
    int before = __atomic_load_n(&hook_calls, __ATOMIC_SEQ_CST);
    store_note_change(one.store);
    for (int i = 0; i < 200 && __atomic_load_n(&hook_calls, __ATOMIC_SEQ_CST) == before; i++)
        nap_ms(10);
    CHECK(__atomic_load_n(&hook_calls, __ATOMIC_SEQ_CST) > before);
    store_set_commit_hook(two.store, NULL, NULL);
    /* the leader stops: the other takes over within a tick or two */
    leader_free(first);
    CHECK(held_within(second, 3000));
    leader_free(second);
    store_close(two.store);
}
