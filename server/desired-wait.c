/* Waiting agents (desired-wait.h). */
#include "desired-wait.h"

#include "store.h"
#include "../lib/cleanup.h"
#include "../lib/id.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

struct waiter {
    struct waiter *next;
    char node_id[SL_ID_MAX];
    int64_t after;
    int64_t deadline_ms;
    void (*resume)(void *ctx);
    void *ctx;
};

struct desired_waits {
    struct server *srv;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct waiter *list; /* guarded by lock */
    bool changed;        /* a revision changed since the last check */
    bool added;          /* a waiter came: its deadline may be the nearest */
    bool stopping;
};

void desired_waits_add(struct desired_waits *w, const char *node_id, int64_t after,
                       int64_t deadline_ms, void (*resume)(void *ctx), void *ctx)
{
    struct waiter *n = xzalloc(sizeof(*n));

    snprintf(n->node_id, sizeof(n->node_id), "%s", node_id);
    n->after = after;
    n->deadline_ms = deadline_ms;
    n->resume = resume;
    n->ctx = ctx;
    pthread_mutex_lock(&w->lock);
    n->next = w->list;
    w->list = n;
    /* a change committed between the handler's read and now is seen by
     * the check this causes */
    w->added = w->changed = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void desired_waits_wake(void *p)
{
    struct desired_waits *w = p;

    pthread_mutex_lock(&w->lock);
    w->changed = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* {node id: desired revision} of every node; NULL on a store error. */
static json_t *revisions(struct desired_waits *w)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_rows struct db_rows *rows =
        store_query(w->srv->store, "SELECT id, desired_revision FROM nodes", DB_NO_ARGS, &err);
    json_t *map = json_object();
    int rc;

    while (rows && (rc = db_next(rows, &err)) == 1)
        json_object_set_new(map, db_text(rows, 0), json_integer(db_int(rows, 1)));
    if (!rows || rc < 0) {
        log_warn("desired: unable to read the nodes' revisions: %s", err.message);
        json_decref(map);
        return NULL;
    }
    return map;
}

static void *waits_thread(void *p)
{
    struct desired_waits *w = p;

    pthread_mutex_lock(&w->lock);
    for (;;) {
        int64_t now = sl_time_mono_ms(), nearest = now + SL_MSEC_PER_SEC;
        bool check = w->changed, stopping = w->stopping;
        w->changed = w->added = false;
        struct waiter *ready = NULL, **pp = &w->list;
        json_t *revs = NULL;
        if (check && w->list) {
            /* read without the lock: handlers add meanwhile */
            pthread_mutex_unlock(&w->lock);
            revs = revisions(w);
            pthread_mutex_lock(&w->lock);
        }
        while (*pp) {
            struct waiter *n = *pp;
            json_t *rev = revs ? json_object_get(revs, n->node_id) : NULL;
            if (stopping || n->deadline_ms <= now || (rev && json_integer_value(rev) > n->after)) {
                *pp = n->next;
                n->next = ready;
                ready = n;
            } else {
                if (n->deadline_ms < nearest)
                    nearest = n->deadline_ms;
                pp = &n->next;
            }
        }
        json_decref(revs);
        if (ready) {
            pthread_mutex_unlock(&w->lock);
            while (ready) {
                struct waiter *n = ready;
                ready = n->next;
                n->resume(n->ctx);
                free(n);
            }
            pthread_mutex_lock(&w->lock);
        }
        if (stopping)
            break;
        if (w->changed || w->added)
            continue;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ms = nearest - sl_time_mono_ms();
        if (ms < 1)
            ms = 1;
        int64_t ns = until.tv_nsec + (ms % 1000) * 1000000;
        until.tv_sec += ms / 1000 + ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        while (!w->changed && !w->added && !w->stopping &&
               pthread_cond_timedwait(&w->cond, &w->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

struct desired_waits *desired_waits_start(struct server *srv, struct sl_error *err)
{
    struct desired_waits *w = xzalloc(sizeof(*w));
    pthread_condattr_t attr;

    w->srv = srv;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&w->thread, NULL, waits_thread, w) != 0) {
        sl_fail(err, SL_E_INTERNAL, "thread", "unable to start the desired-state waits");
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        free(w);
        return NULL;
    }
    return w;
}

void desired_waits_stop(struct desired_waits *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
