/* Keeps one client address from starving the others of a libmicrohttpd
 * server (suanlid's API, the node's metadata endpoint):
 *
 * - per address: at most per_address connections from one address (one
 *   IPv6 /64, netaddr.h); more are closed as soon as they are accepted.
 *   Addresses in `exempt` (trusted proxies, which carry many clients) are
 *   not counted. The daemon's own MHD_OPTION_CONNECTION_LIMIT stays the
 *   total, which one address can then never fill.
 * - a header deadline: a request's headers must be complete within
 *   header_timeout seconds of the connection being accepted (or of the
 *   previous response on a kept-alive connection). A client that sends
 *   nothing, or a byte now and then (slowloris), is cut off then; the
 *   daemon's MHD_OPTION_CONNECTION_TIMEOUT, an idle timeout, would wait
 *   forever for the second kind.
 *
 * Wiring: pass sl_conn_guard_accept as MHD_start_daemon's accept policy
 * with the guard as its closure, and MHD_OPTION_NOTIFY_CONNECTION,
 * sl_conn_guard_notify, guard. Call sl_conn_guard_request_started() on the
 * first call of the access handler for a request (its headers are in) and
 * sl_conn_guard_request_done() from MHD_OPTION_NOTIFY_COMPLETED. */
#ifndef SL_CONN_GUARD_H
#define SL_CONN_GUARD_H

#include <microhttpd.h>
#include <stdarg.h>
#include <stdint.h>

#include "netaddr.h"

struct sl_conn_guard_config {
    unsigned per_address;             /* 0: no per-address limit */
    unsigned header_timeout;          /* seconds; 0: no deadline */
    const struct sl_net_list *exempt; /* may be NULL; must outlive the guard */
    /* Called about once a minute from the guard's thread when connections
     * were refused or cut off since the last call (for a log line). */
    void (*report)(void *ctx, uint64_t refused, uint64_t timed_out);
    void *report_ctx;
};

struct sl_conn_guard;

/* Starts the guard's thread (the deadline). Never fails. */
struct sl_conn_guard *sl_conn_guard_new(const struct sl_conn_guard_config *cfg);
/* Stops it; call after MHD_stop_daemon. NULL is fine. */
void sl_conn_guard_free(struct sl_conn_guard *g);

enum MHD_Result sl_conn_guard_accept(void *guard, const struct sockaddr *addr, socklen_t len);
void sl_conn_guard_notify(void *guard, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code);
void sl_conn_guard_request_started(struct MHD_Connection *conn);
void sl_conn_guard_request_done(struct MHD_Connection *conn);

/* An MHD_OPTION_EXTERNAL_LOGGER: libmicrohttpd's own messages (a client
 * that dropped its connection, one the guard closed) are routine, logged
 * at debug level after the prefix passed as its closure ("http"). */
void sl_conn_guard_mhd_log(void *prefix, const char *fmt, va_list ap);

#endif
