/* libmicrohttpd front of the API: reads requests (bounded bodies), hands them
 * to api_dispatch() and logs one line per request. */
#ifndef SL_HTTP_H
#define SL_HTTP_H

#include "server.h"

struct http_server;

/* listen: "HOST:PORT" or "[V6]:PORT". */
struct http_server *http_start(struct server *srv, const char *listen, struct sl_error *err);
void http_stop(struct http_server *h);

#endif
