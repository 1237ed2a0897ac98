/* Service ports (DESIGN.md section 5): ports inside an instance published by
 * its node's nginx as http://{instance}-{port}.{domain}:{proxy port}/. The
 * control plane keeps the list (instance_ports), the access link tokens and
 * who may pass; nodes are told which ports to route in their desired state
 * and ask GET /v1/proxy/auth about every request (docs/design/access.md). */
#ifndef SL_PORTS_H
#define SL_PORTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../lib/id.h"
#include "server.h"

#define PORTS_MAX        64
#define PORTS_TOKEN_HEX  33 /* 128 random bits in hex + NUL */
#define PORTS_COOKIE     "suanli_port_token"
#define PORTS_QUERY      "suanli_token"
#define PORTS_SSH        22 /* reserved: sshd, reached through its own mapped port */
#define PORTS_RECIPE_APP "jupyter"

/* A port a renter may publish: 1..65535 and not 22 (SL_E_INVALID, codes
 * "invalid_port" and "reserved_port"). */
int ports_check(int64_t port, struct sl_error *err);

/* Parses a comma-separated list such as "6006,6008" (blanks allowed, empty
 * means none) into ports, at most max, each passing ports_check and none
 * twice. */
int ports_parse_list(const char *text, int64_t *ports, size_t max, size_t *n, struct sl_error *err);

/* Checks the services.* options at start-up. */
int ports_check_config(const struct server_config *cfg, struct sl_error *err);

/* Splits a Host header ("i-ab12cd-6006.localhost:8080", any case) of the
 * service domain into an instance id (SL_ID_MAX bytes, lowercase) and a
 * port; false when it names no service of this domain. */
bool ports_parse_host(const char *host, const char *domain, char *id, int64_t *port);

/* The value of the suanli_token query parameter of a request URI
 * ("/tree?a=1&suanli_token=T"), copied into out (size bytes); false when
 * absent or too long. */
bool ports_uri_token(const char *uri, char *out, size_t size);

/* http://ID-PORT.DOMAIN[:PROXY_PORT]/; the caller frees it. */
char *ports_url(const struct server_config *cfg, const char *id, int64_t port);

/* Records the ports of a new instance, in the placement's transaction: the
 * services.ports list and, for an image built from the jupyter recipe,
 * Jupyter's port with its own token. */
int ports_create_defaults(struct server *srv, const char *id, const char *image,
                          struct sl_error *err);

struct store;

/* Publishes port of instance id with a new access token (app: "" or
 * "jupyter", which gets a token of its own); a port already there stays
 * as it is. */
int ports_insert(struct store *st, const char *id, int64_t port, bool public, const char *app,
                 struct sl_error *err);

/* Adds "services" ([{port, public, app, url, access_url}]) and "jupyter"
 * ({port, url} or null) to an instance's JSON (its owner's view: the links
 * carry the tokens). */
int ports_instance_json(struct server *srv, json_t *inst, struct sl_error *err);

/* Adds "ports" ([{port, app?, app_token?}]) to every item of a node's
 * desired instances. */
int ports_desired(struct server *srv, json_t *items, struct sl_error *err);

/* What the proxy may do with one request. */
enum ports_verdict {
    PORTS_PASS,            /* public, the owner's session, or the token cookie */
    PORTS_PASS_COOKIE,     /* the link's token: pass and set the cookie */
    PORTS_UNAUTHENTICATED, /* no credentials, or a token that is not this port's */
    PORTS_FORBIDDEN,       /* someone else's session; or no such service */
};

struct ports_request {
    const char *host;         /* X-Original-Host */
    const char *uri;          /* X-Original-URI, may be NULL */
    const char *cookie_token; /* the suanli_port_token cookie, may be NULL */
    const char *user_id;      /* the caller's session, NULL when none */
};

/* Decides on one proxied request and, when it passes, records the time in
 * instances.last_http_at (at most one write per instance every 10 s).
 * token receives the port's token (PORTS_TOKEN_HEX) for PORTS_PASS_COOKIE;
 * why (if not NULL) a short reason for a refusal. */
int ports_authorize(struct server *srv, const struct ports_request *rq, enum ports_verdict *out,
                    char *token, const char **why, struct sl_error *err);

#endif
