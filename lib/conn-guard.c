#include "conn-guard.h"
#include "log.h"
#include "timefmt.h"
#include "xalloc.h"
#include "timeconst.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* How often the deadline is checked: a cut-off comes at most this late. */
#define TICK_MS   250
#define REPORT_MS 60000
/* A slot the accept policy granted is held until the connection's STARTED
 * notification claims it, which comes right after in the same thread; one
 * that never comes (libmicrohttpd dropped the connection in between) is
 * given back after this long. */
#define RESERVED_MS 5000

struct tracked {
    struct tracked *prev, *next;
    struct sl_conn_guard *guard;
    unsigned char key[17];
    bool counted;        /* false: an exempt address */
    int fd;              /* valid until the CLOSED notification returns */
    int64_t deadline_ms; /* 0: a request is in; else its headers are due then */
};

/* A slot granted by the accept policy, not yet claimed by its connection.
 * Without it, the daemon's threads, each accepting on the same socket, would
 * all see the same count and let one address past its limit. */
struct reserved {
    struct reserved *next;
    unsigned char key[17];
    int64_t expires_ms;
};

struct sl_conn_guard {
    struct sl_conn_guard_config cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stopping;
    struct tracked all; /* sentinel of a ring of every open connection */
    struct reserved *reserved;
    uint64_t refused, timed_out;
};

static int64_t due(const struct sl_conn_guard *g)
{
    return g->cfg.header_timeout
               ? sl_time_mono_ms() + (int64_t)g->cfg.header_timeout * SL_MSEC_PER_SEC
               : 0;
}

/* Drops the first reservation for key, or every expired one when key is
 * NULL. Called with the lock held. */
static void release_reserved(struct sl_conn_guard *g, const unsigned char *key)
{
    int64_t now = key ? 0 : sl_time_mono_ms();

    for (struct reserved **p = &g->reserved; *p;) {
        struct reserved *r = *p;
        if (key ? memcmp(r->key, key, sizeof(r->key)) == 0 : r->expires_ms <= now) {
            *p = r->next;
            free(r);
            if (key)
                return;
        } else {
            p = &r->next;
        }
    }
}

static unsigned count_key(struct sl_conn_guard *g, const unsigned char key[17])
{
    unsigned n = 0;

    for (struct tracked *t = g->all.next; t != &g->all; t = t->next)
        n += t->counted && memcmp(t->key, key, sizeof(t->key)) == 0;
    for (struct reserved *r = g->reserved; r; r = r->next)
        n += memcmp(r->key, key, sizeof(r->key)) == 0;
    return n;
}

enum MHD_Result sl_conn_guard_accept(void *guard, const struct sockaddr *addr, socklen_t len)
{
    struct sl_conn_guard *g = guard;
    unsigned char key[17];
    bool ok;
    (void)len;

    if (!g->cfg.per_address || sl_net_list_has(g->cfg.exempt, addr) ||
        !sl_addr_limit_key_bin(addr, key))
        return MHD_YES;
    pthread_mutex_lock(&g->lock);
    release_reserved(g, NULL);
    ok = count_key(g, key) < g->cfg.per_address;
    if (ok) {
        struct reserved *r = xzalloc(sizeof(*r));
        memcpy(r->key, key, sizeof(r->key));
        r->expires_ms = sl_time_mono_ms() + RESERVED_MS;
        r->next = g->reserved;
        g->reserved = r;
    } else {
        g->refused++;
    }
    pthread_mutex_unlock(&g->lock);
    return ok ? MHD_YES : MHD_NO;
}

void sl_conn_guard_notify(void *guard, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct sl_conn_guard *g = guard;
    struct tracked *t = *socket_context;

    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *addr =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const struct sockaddr *sa = addr ? addr->client_addr : NULL;
        t = xzalloc(sizeof(*t));
        t->guard = g;
        t->fd = fd ? fd->connect_fd : -1;
        t->counted = sl_addr_limit_key_bin(sa, t->key) && !sl_net_list_has(g->cfg.exempt, sa);
        pthread_mutex_lock(&g->lock);
        if (t->counted && g->cfg.per_address)
            release_reserved(g, t->key); /* the slot accept granted is now this one */
        t->deadline_ms = due(g);
        t->next = &g->all;
        t->prev = g->all.prev;
        g->all.prev->next = t;
        g->all.prev = t;
        pthread_mutex_unlock(&g->lock);
        *socket_context = t;
        return;
    }
    if (!t)
        return;
    /* MHD closes the descriptor after this returns: once unlinked under the
     * lock, the deadline thread can no longer touch it */
    pthread_mutex_lock(&g->lock);
    t->prev->next = t->next;
    t->next->prev = t->prev;
    pthread_mutex_unlock(&g->lock);
    free(t);
    *socket_context = NULL;
}

static struct tracked *tracked_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void sl_conn_guard_request_started(struct MHD_Connection *conn)
{
    struct tracked *t = tracked_of(conn);

    if (!t)
        return;
    pthread_mutex_lock(&t->guard->lock);
    t->deadline_ms = 0;
    pthread_mutex_unlock(&t->guard->lock);
}

void sl_conn_guard_request_done(struct MHD_Connection *conn)
{
    struct tracked *t = tracked_of(conn);

    if (!t)
        return;
    pthread_mutex_lock(&t->guard->lock);
    t->deadline_ms = due(t->guard);
    pthread_mutex_unlock(&t->guard->lock);
}

static void *deadline_loop(void *arg)
{
    struct sl_conn_guard *g = arg;
    int64_t next_report = sl_time_mono_ms() + REPORT_MS;

    pthread_mutex_lock(&g->lock);
    while (!g->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)TICK_MS * SL_NSEC_PER_MSEC;
        if (until.tv_nsec >= SL_NSEC_PER_SEC) {
            until.tv_sec++;
            until.tv_nsec -= SL_NSEC_PER_SEC;
        }
        pthread_cond_timedwait(&g->wake, &g->lock, &until);
        if (g->stopping)
            break;
        int64_t now = sl_time_mono_ms();
        for (struct tracked *t = g->all.next; t != &g->all; t = t->next) {
            if (t->deadline_ms && t->deadline_ms <= now && t->fd >= 0) {
                /* MHD sees the end of the stream and closes it in its own thread */
                shutdown(t->fd, SHUT_RDWR);
                t->deadline_ms = 0;
                g->timed_out++;
            }
        }
        if (now >= next_report) {
            next_report = now + REPORT_MS;
            uint64_t refused = g->refused, timed_out = g->timed_out;
            g->refused = g->timed_out = 0;
            if ((refused || timed_out) && g->cfg.report) {
                pthread_mutex_unlock(&g->lock);
                g->cfg.report(g->cfg.report_ctx, refused, timed_out);
                pthread_mutex_lock(&g->lock);
            }
        }
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

struct sl_conn_guard *sl_conn_guard_new(const struct sl_conn_guard_config *cfg)
{
    struct sl_conn_guard *g = xzalloc(sizeof(*g));
    pthread_condattr_t attr;

    g->cfg = *cfg;
    g->all.next = g->all.prev = &g->all;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&g->thread, NULL, deadline_loop, g) != 0)
        abort(); /* as an allocation failure: nothing sensible to go on with */
    return g;
}

void sl_conn_guard_free(struct sl_conn_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    g->stopping = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    /* the daemon is stopped: every CLOSED came, the ring is empty */
    while (g->reserved) {
        struct reserved *r = g->reserved;
        g->reserved = r->next;
        free(r);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

void sl_conn_guard_mhd_log(void *prefix, const char *fmt, va_list ap)
{
    char line[512];

    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    log_debug("%s: %s", (const char *)prefix, line);
}
