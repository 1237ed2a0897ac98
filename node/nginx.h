/* The service ports' proxy, which is nginx: its configuration (proxy_config)
 * and its process (proxy_sync, proxy_stop). The node's HTTP edge for service
 * ports (DESIGN.md section 5) is an nginx the agent runs as its own child,
 * with its own prefix under DATA/proxy, routing
 * http://{instance}-{port}.{domain}/ by host to the instance's bridge address
 * and asking suanlid (GET /v1/nodes/{id}/proxy/auth with the node's token,
 * nginx auth_request) whether each request may pass and what of it the
 * instance may see (docs/design/access.md, "Service ports").
 *
 *   DATA/proxy/nginx.conf   generated from the desired state (proxy_config);
 *                           0600: it holds the node's token
 *   DATA/proxy/nginx.pid    the master's pid: a restarted agent adopts it
 *   DATA/proxy/error.log    nginx's own log (no access log)
 *   DATA/proxy/tmp/         nginx's temp paths (unused: nothing is buffered)
 *
 * The configuration is written and nginx reloaded (SIGHUP) only when the
 * text changes; a dead nginx is started again (at most every few seconds). */
#ifndef SL_NODE_NGINX_H
#define SL_NODE_NGINX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "net.h"
#include "../lib/error.h"

/* One published port: the instance's id, its bridge address and the port. */
struct proxy_route {
    const char *id;
    const char *ip;
    unsigned port;
};

struct proxy_settings {
    const char *dir;        /* DATA/proxy, absolute */
    const char *listen;     /* nginx listen: "0.0.0.0:8080", "127.0.0.1:18080", "8080" */
    const char *auth_url;   /* suanlid's base URL: "http://127.0.0.1:7070" */
    const char *node_id;    /* this node ... */
    const char *node_token; /* ... and its token, for the auth subrequest */
    bool drop_privileges;   /* workers as nobody:nogroup (the agent runs as root) */
    /* the terminal server's socket (node/terminal.h) and the key it wants;
     * NULL: no terminals (no server block for ID-terminal hosts) */
    const char *terminal_socket;
    const char *terminal_key;
};

struct proxy {
    struct proxy_settings s;
    const char *nginx; /* the binary */
    char *text;        /* the configuration nginx runs with, NULL before the first sync */
    pid_t pid;         /* the master, 0 when unknown */
    pid_t dead_pid;    /* a master seen dead: its workers may live on */
    bool child;        /* started by this process: reaped with waitpid */
    bool reload;       /* nginx.conf changed since the master read it */
    int64_t next_start_ms;
    bool warned; /* said once that nginx is missing */
};

/* Whether s is a listen address nginx takes and this file writes safely:
 * PORT, IPV4:PORT or [IPV6]:PORT (addresses, never names to resolve). */
bool proxy_listen_valid(const char *s);

/* Whether s is a suanlid URL this file writes into nginx.conf safely:
 * http[s]://HOST[:PORT][/PATH] of plain characters. */
bool proxy_auth_url_valid(const char *s);

/* The nginx.conf text for these routes (routes with a bad id, address or
 * port are left out, and a second route of one id and port), which the
 * caller frees; NULL when a setting is not one nginx
 * can be given safely (proxy_listen_valid, proxy_auth_url_valid, a node id
 * and token of [A-Za-z0-9_-], a directory without quotes, '$', blanks or
 * controls; a terminal socket path with ':' or longer than a unix socket's,
 * a key not of [A-Za-z0-9_-]). */
char *proxy_config(const struct proxy_settings *s, const struct proxy_route *routes, size_t n);

/* proxy_sync for a desired state's instances ([{id, desired, ports:
 * [{port}]}]): a route for every port of every instance that should run
 * and has an address on the bridge. */
int proxy_sync_desired(struct proxy *p, json_t *instances, const struct net_config *net,
                       struct sl_error *err);

/* Stops nginx (SIGTERM, then SIGKILL after 3 s) and frees what p holds. */
void proxy_stop(struct proxy *p);

#endif
