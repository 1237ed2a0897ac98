/* Leadership and change notices between replicas (leader.h). */
#include "leader.h"

#include "store.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct leader {
    struct server *srv;
    bool always;   /* leader.always */
    bool threaded; /* PostgreSQL: the thread below runs */
    pthread_t thread;
    int wake_fd;   /* eventfd: a local change to announce, or the stop */
    bool held;     /* atomic */
    bool db_ok;    /* atomic */
    bool relay;    /* atomic: a local change not yet announced */
    bool stopping; /* atomic */
    bool lost;     /* the thread's: the database failed it once */
    uint64_t runs; /* atomic: background jobs run here (leader_may_run) */
    pthread_mutex_t why_lock;
    char why[sizeof(((struct sl_error *)0)->message)]; /* under why_lock: the link's last failure */
};

static void poke(struct leader *ld)
{
    uint64_t one = 1;

    if (write(ld->wake_fd, &one, sizeof(one)) < 0) {
        /* the counter is full: the thread is awake anyway */
    }
}

/* store_set_relay: called on the committing thread, after its commit */
static void on_local_change(void *p)
{
    struct leader *ld = p;

    __atomic_store_n(&ld->relay, true, __ATOMIC_SEQ_CST);
    poke(ld);
}

static void db_state(struct leader *ld, bool ok, const char *why)
{
    if (!ok) {
        ld->lost = true;
        pthread_mutex_lock(&ld->why_lock);
        snprintf(ld->why, sizeof(ld->why), "%s", why);
        pthread_mutex_unlock(&ld->why_lock);
    }
    __atomic_store_n(&ld->db_ok, ok, __ATOMIC_SEQ_CST);
}

/* The link failed: what it held is gone. */
static struct store_link *drop(struct leader *ld, struct store_link *link,
                               const struct sl_error *err)
{
    if (__atomic_exchange_n(&ld->held, false, __ATOMIC_SEQ_CST))
        log_warn("leader: lost the database, so the lead: background work stops here (%s)",
                 err->message);
    else
        log_warn("leader: lost the database (%s)", err->message);
    db_state(ld, false, err->message);
    store_link_close(link);
    return NULL;
}

/* Connects and subscribes; NULL (with the reason noted) on failure. */
static struct store_link *connect_link(struct leader *ld)
{
    struct sl_error err = SL_ERROR_INIT;
    struct store_link *link = store_link_open(ld->srv->store, LEADER_TIMEOUT_MS, &err);

    if (!link) {
        if (__atomic_load_n(&ld->db_ok, __ATOMIC_SEQ_CST))
            log_warn("leader: %s", err.message);
        db_state(ld, false, err.message);
        return NULL;
    }
    if (store_link_listen(link, LEADER_CHANNEL, &err) < 0)
        return drop(ld, link, &err);
    if (!__atomic_load_n(&ld->db_ok, __ATOMIC_SEQ_CST) && ld->lost)
        log_info("leader: the database answers again");
    db_state(ld, true, "");
    /* notices sent while the link was down were missed: look once */
    store_changed_elsewhere(ld->srv->store);
    return link;
}

/* Takes the lock, or checks that the link (and so the lock) still holds. */
static struct store_link *check(struct leader *ld, struct store_link *link)
{
    struct sl_error err = SL_ERROR_INIT;

    if (__atomic_load_n(&ld->held, __ATOMIC_SEQ_CST)) {
        if (store_link_ping(link, &err) < 0)
            return drop(ld, link, &err);
    } else {
        int taken = store_link_lock(link, LEADER_LOCK_KEY, &err);
        if (taken < 0)
            return drop(ld, link, &err);
        if (taken) {
            __atomic_store_n(&ld->held, true, __ATOMIC_SEQ_CST);
            log_info("leader: this replica leads: it runs the background work");
        }
    }
    db_state(ld, true, "");
    return link;
}

/* Until the next tick: notices heard run the commit hook, local changes
 * are announced. */
static struct store_link *listen_until(struct leader *ld, struct store_link *link, int64_t until_ms)
{
    struct sl_error err = SL_ERROR_INIT;

    while (!__atomic_load_n(&ld->stopping, __ATOMIC_SEQ_CST)) {
        int64_t left = until_ms - sl_time_mono_ms();
        if (left <= 0)
            break;
        if (!link) {
            /* no database: only the stop can wake us */
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            continue;
        }
        int heard = store_link_wait(link, ld->wake_fd, (int)left, &err);
        if (heard < 0)
            return drop(ld, link, &err);
        if (heard)
            store_changed_elsewhere(ld->srv->store);
        uint64_t n;
        if (read(ld->wake_fd, &n, sizeof(n)) < 0) {
            /* nothing to read: no poke */
        }
        if (__atomic_exchange_n(&ld->relay, false, __ATOMIC_SEQ_CST) &&
            store_link_notify(link, LEADER_CHANNEL, &err) < 0)
            return drop(ld, link, &err);
    }
    return link;
}

static void *leader_thread(void *p)
{
    struct leader *ld = p;
    struct store_link *link = NULL;

    while (!__atomic_load_n(&ld->stopping, __ATOMIC_SEQ_CST)) {
        int64_t next = sl_time_mono_ms() + LEADER_TICK_MS;
        if (!link)
            link = connect_link(ld);
        if (link)
            link = check(ld, link);
        link = listen_until(ld, link, next);
    }
    __atomic_store_n(&ld->held, false, __ATOMIC_SEQ_CST);
    store_link_close(link); /* the lock goes with the connection */
    return NULL;
}

struct leader *leader_start(struct server *srv, struct sl_error *err)
{
    struct leader *ld = xzalloc(sizeof(*ld));
    struct sl_error probe = SL_ERROR_INIT;

    ld->srv = srv;
    ld->always = srv->cfg.leader_always;
    ld->wake_fd = -1;
    pthread_mutex_init(&ld->why_lock, NULL);
    struct store_link *link = store_link_open(srv->store, LEADER_TIMEOUT_MS, &probe);
    if (!link && probe.kind == SL_E_UNSUPPORTED) {
        /* SQLite: the one process of its database */
        ld->held = ld->db_ok = true;
        return ld;
    }
    store_link_close(link); /* the thread makes its own */
    ld->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ld->wake_fd < 0) {
        sl_fail_errno(err, "leader: eventfd");
        pthread_mutex_destroy(&ld->why_lock);
        free(ld);
        return NULL;
    }
    if (pthread_create(&ld->thread, NULL, leader_thread, ld) != 0) {
        sl_fail(err, SL_E_INTERNAL, "thread", "unable to start the leader's thread");
        close(ld->wake_fd);
        pthread_mutex_destroy(&ld->why_lock);
        free(ld);
        return NULL;
    }
    ld->threaded = true;
    store_set_relay(srv->store, on_local_change, ld);
    return ld;
}

void leader_stop(struct leader *ld)
{
    if (!ld || !ld->threaded || __atomic_load_n(&ld->stopping, __ATOMIC_SEQ_CST))
        return;
    store_set_relay(ld->srv->store, NULL, NULL);
    __atomic_store_n(&ld->stopping, true, __ATOMIC_SEQ_CST);
    poke(ld);
    pthread_join(ld->thread, NULL);
}

void leader_free(struct leader *ld)
{
    if (!ld)
        return;
    leader_stop(ld);
    if (ld->wake_fd >= 0)
        close(ld->wake_fd); /* a commit in flight may have poked it until now */
    pthread_mutex_destroy(&ld->why_lock);
    free(ld);
}

bool leader_held(struct leader *ld)
{
    return !ld || __atomic_load_n(&ld->held, __ATOMIC_SEQ_CST);
}

bool leader_may_run(struct leader *ld)
{
    if (!ld)
        return true;
    if (!ld->always && !leader_held(ld))
        return false;
    __atomic_add_fetch(&ld->runs, 1, __ATOMIC_RELAXED);
    return true;
}

uint64_t leader_runs(struct leader *ld)
{
    return ld ? __atomic_load_n(&ld->runs, __ATOMIC_RELAXED) : 0;
}

bool leader_db_ok(struct leader *ld, char *why, size_t why_size)
{
    if (!ld || __atomic_load_n(&ld->db_ok, __ATOMIC_SEQ_CST))
        return true;
    pthread_mutex_lock(&ld->why_lock);
    snprintf(why, why_size, "%s", ld->why);
    pthread_mutex_unlock(&ld->why_lock);
    return false;
}
