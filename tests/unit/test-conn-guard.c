/* lib/conn-guard.c: the per-address connection limit holds exactly, even
 * when the daemon's threads accept from one address at the same moment. */
#include "harness.h"

#include "../../lib/conn-guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in v4(const char *text)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    inet_pton(AF_INET, text, &sa.sin_addr);
    return sa;
}

/* Between the accept policy and the connection's STARTED notification
 * another thread may accept from the same address: the slot granted first
 * must already count. */
TEST(accepted_slots_count_before_their_connection_starts)
{
    struct sl_conn_guard_config cfg = { .per_address = 2 };
    struct sl_conn_guard *g = sl_conn_guard_new(&cfg);
    struct sockaddr_in a = v4("192.0.2.1"), b = v4("192.0.2.2");

    CHECK(sl_conn_guard_accept(g, (struct sockaddr *)&a, sizeof(a)) == MHD_YES);
    CHECK(sl_conn_guard_accept(g, (struct sockaddr *)&a, sizeof(a)) == MHD_YES);
    CHECK(sl_conn_guard_accept(g, (struct sockaddr *)&a, sizeof(a)) == MHD_NO);
    /* another address has its own slots */
    CHECK(sl_conn_guard_accept(g, (struct sockaddr *)&b, sizeof(b)) == MHD_YES);
    sl_conn_guard_free(g); /* frees the unclaimed slots (ASan checks) */
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *size, void **ctx)
{
    (void)cls, (void)url, (void)method, (void)version, (void)data, (void)size, (void)ctx;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(2, (void *)"ok", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static bool closed_by_peer(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    char c;

    return poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

static unsigned count_open(const int *fds, unsigned n)
{
    unsigned open = 0;

    for (unsigned i = 0; i < n; i++)
        open += !closed_by_peer(fds[i]);
    return open;
}

/* A real daemon with a pool of threads all accepting on one socket: however
 * the accepts interleave, no more than the limit stay open. */
TEST(a_thread_pool_keeps_one_address_to_its_limit)
{
    enum {
        LIMIT = 4,
        CONNECTIONS = 200,
        THREADS = 8
    };
    struct sl_conn_guard_config cfg = { .per_address = LIMIT };
    struct sl_conn_guard *g = sl_conn_guard_new(&cfg);
    struct sockaddr_in listen_at = v4("127.0.0.1");
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_USE_TURBO, 0,
        sl_conn_guard_accept, g, answer, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&listen_at,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)THREADS, MHD_OPTION_NOTIFY_CONNECTION,
        sl_conn_guard_notify, g, MHD_OPTION_END);
    int fds[CONNECTIONS];
    unsigned opened = 0;

    if (!CHECK(d != NULL)) {
        sl_conn_guard_free(g);
        return;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    struct sockaddr_in to = v4("127.0.0.1");
    to.sin_port = htons(info->port);
    for (; opened < CONNECTIONS; opened++) {
        fds[opened] = socket(AF_INET, SOCK_STREAM, 0);
        if (!CHECK(fds[opened] >= 0) ||
            !CHECK(connect(fds[opened], (struct sockaddr *)&to, sizeof(to)) == 0))
            break;
    }
    /* every refused one is closed as it is accepted: wait for the count to
     * settle (all accepted), then it must be the limit, never more */
    unsigned open = opened, same = 0;
    for (int i = 0; i < 500 && same < 20; i++) {
        struct timespec tick = { 0, 10 * 1000 * 1000 };
        unsigned now = count_open(fds, opened);
        same = now == open ? same + 1 : 0;
        open = now;
        nanosleep(&tick, NULL);
    }
    CHECK_EQ_INT(open, LIMIT);
    for (unsigned i = 0; i < opened; i++)
        close(fds[i]);
    MHD_stop_daemon(d);
    sl_conn_guard_free(g);
}
