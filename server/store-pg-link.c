/* PostgreSQL links (store.h, store_link_open): a libpq connection of its
 * own, outside the store's pool, for a session-level advisory lock and
 * LISTEN/NOTIFY between the suanlid replicas of one database (docs/design/
 * control-plane.md, "Replicas and the leader").
 *
 * Every round trip is asynchronous with a deadline (timeout_ms): a
 * database that stops answering fails the call in time instead of holding
 * the leader's thread, and the caller drops the link, and with it any lock
 * it held. TCP keepalives make the server notice a vanished client too, so
 * that its lock is freed for another replica. */
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

struct pg_link {
    PGconn *pg;
    int timeout_ms;
};

static int link_fail(struct sl_error *err, struct pg_link *l, const char *what)
{
    char msg[256];

    snprintf(msg, sizeof(msg), "%s", PQerrorMessage(l->pg));
    msg[strcspn(msg, "\n")] = '\0';
    return sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable", "PostgreSQL link: %s: %s", what,
                   msg[0] ? msg : "no answer in time");
}

static void *link_open(const char *target, int timeout_ms, struct sl_error *err)
{
    /* target is what follows "postgres:": libpq takes the whole URI back,
     * or a conninfo string; the later keywords override what it says */
    cleanup_free char *dbname =
        strncmp(target, "//", 2) == 0 ? xasprintf("postgresql:%s", target) : xstrdup(target);
    char connect_s[16];
    snprintf(connect_s, sizeof(connect_s), "%d", timeout_ms < 2000 ? 2 : timeout_ms / 1000);
    const char *keys[] = { "dbname",
                           "connect_timeout",
                           "keepalives_idle",
                           "keepalives_interval",
                           "keepalives_count",
                           "application_name",
                           NULL };
    const char *values[] = { dbname, connect_s, "5", "2", "2", "suanlid-link", NULL };
    PGconn *pg = PQconnectdbParams(keys, values, 1);

    if (!pg || PQstatus(pg) != CONNECTION_OK) {
        struct pg_link tmp = { pg, timeout_ms };
        link_fail(err, &tmp, "unable to connect");
        PQfinish(pg);
        return NULL;
    }
    if (PQsetnonblocking(pg, 1) != 0) {
        PQfinish(pg);
        sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable", "PostgreSQL link: not non-blocking");
        return NULL;
    }
    struct pg_link *l = xzalloc(sizeof(*l));
    l->pg = pg;
    l->timeout_ms = timeout_ms;
    return l;
}

static void link_close(void *p)
{
    struct pg_link *l = p;

    if (!l)
        return;
    PQfinish(l->pg);
    free(l);
}

/* Waits until the socket is readable (or writable), up to deadline: 1
 * ready, 0 timed out, -1 poll failed. */
static int await(struct pg_link *l, short events, int extra_fd, int64_t deadline_ms)
{
    struct pollfd fds[2] = { { .fd = PQsocket(l->pg), .events = events },
                             { .fd = extra_fd, .events = POLLIN } };
    int64_t left = deadline_ms - sl_time_mono_ms();

    if (left < 0)
        left = 0;
    int n = poll(fds, extra_fd >= 0 ? 2 : 1, (int)left);
    if (n < 0 && errno != EINTR)
        return -1;
    return n > 0 ? 1 : 0;
}

/* Sends sql (one parameter at most, an int8) and returns its one result,
 * or NULL: failed or late. */
static PGresult *round_trip(struct pg_link *l, const char *sql, const char *param,
                            struct sl_error *err)
{
    int64_t deadline = sl_time_mono_ms() + l->timeout_ms;
    static const Oid int8 = 20;
    const char *params[1] = { param };
    int sent = param ? PQsendQueryParams(l->pg, sql, 1, &int8, params, NULL, NULL, 0)
                     : PQsendQuery(l->pg, sql);

    if (!sent) {
        link_fail(err, l, "unable to send");
        return NULL;
    }
    int flushed;
    while ((flushed = PQflush(l->pg)) == 1)
        if (await(l, POLLOUT, -1, deadline) != 1) {
            link_fail(err, l, "unable to send in time");
            return NULL;
        }
    if (flushed < 0) {
        link_fail(err, l, "unable to send");
        return NULL;
    }
    PGresult *first = NULL;
    for (;;) {
        while (PQisBusy(l->pg)) {
            if (await(l, POLLIN, -1, deadline) != 1 || !PQconsumeInput(l->pg)) {
                PQclear(first);
                link_fail(err, l, "no answer");
                return NULL;
            }
        }
        PGresult *res = PQgetResult(l->pg);
        if (!res)
            break;
        if (first)
            PQclear(res);
        else
            first = res;
    }
    if (!first) {
        link_fail(err, l, "no result");
        return NULL;
    }
    ExecStatusType status = PQresultStatus(first);
    if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
        sl_fail(err, SL_E_UNAVAILABLE, "store_unavailable", "PostgreSQL link: %s",
                PQresultErrorMessage(first));
        err->message[strcspn(err->message, "\n")] = '\0';
        PQclear(first);
        return NULL;
    }
    return first;
}

static int link_lock(void *p, int64_t key, struct sl_error *err)
{
    char param[24];

    snprintf(param, sizeof(param), "%" PRId64, key);
    PGresult *res = round_trip(p, "SELECT pg_try_advisory_lock($1::int8)", param, err);
    if (!res)
        return -1;
    int taken = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return taken;
}

static int link_ping(void *p, struct sl_error *err)
{
    PGresult *res = round_trip(p, "SELECT 1", NULL, err);

    PQclear(res);
    return res ? 0 : -1;
}

static int link_channel(struct pg_link *l, const char *verb, const char *channel,
                        struct sl_error *err)
{
    char *quoted = PQescapeIdentifier(l->pg, channel, strlen(channel));
    if (!quoted)
        return link_fail(err, l, "bad channel name");
    cleanup_free char *sql = xasprintf("%s %s", verb, quoted);
    PQfreemem(quoted);
    PGresult *res = round_trip(l, sql, NULL, err);
    PQclear(res);
    return res ? 0 : -1;
}

static int link_listen(void *p, const char *channel, struct sl_error *err)
{
    return link_channel(p, "LISTEN", channel, err);
}

static int link_notify(void *p, const char *channel, struct sl_error *err)
{
    return link_channel(p, "NOTIFY", channel, err);
}

/* 1 if a notice from another backend is queued; its own are dropped */
static int take_notices(struct pg_link *l)
{
    int pid = PQbackendPID(l->pg), heard = 0;
    PGnotify *n;

    while ((n = PQnotifies(l->pg)) != NULL) {
        if (n->be_pid != pid)
            heard = 1;
        PQfreemem(n);
    }
    return heard;
}

static int link_wait(void *p, int wake_fd, int ms, struct sl_error *err)
{
    struct pg_link *l = p;
    int heard = take_notices(l);

    if (heard)
        return 1;
    int ready = await(l, POLLIN, wake_fd, sl_time_mono_ms() + ms);
    if (ready < 0)
        return sl_fail_errno(err, "PostgreSQL link: poll");
    /* a closed socket is readable too: consuming finds it gone */
    if (!PQconsumeInput(l->pg) || PQstatus(l->pg) != CONNECTION_OK)
        return link_fail(err, l, "connection lost");
    return take_notices(l);
}

const struct store_link_ops store_pg_link_ops = {
    .open = link_open,
    .close = link_close,
    .lock = link_lock,
    .ping = link_ping,
    .listen = link_listen,
    .notify = link_notify,
    .wait = link_wait,
};
