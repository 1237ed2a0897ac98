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
#include "auth.h"
#include "server.h"

#define PORTS_MAX            64
#define PORTS_TOKEN_HEX      33 /* 128 random bits in hex + NUL */
#define PORTS_COOKIE         "suanli_port_token"
#define PORTS_SESSION_COOKIE AUTH_COOKIE
#define PORTS_QUERY          "suanli_token"
#define PORTS_SSH            22 /* reserved: sshd, reached through its own mapped port */
#define PORTS_RECIPE_APP     "jupyter"
#define PORTS_DESKTOP_APP    "desktop" /* the desktop recipe's noVNC page */

/* A port a renter may publish: 1..65535 and not 22 (SL_E_INVALID, codes
 * "invalid_port" and "reserved_port"). */
int ports_check(int64_t port, struct sl_error *err);

/* Parses a comma-separated list such as "6006,6008" (blanks allowed, empty
 * means none) into ports, at most max, each passing ports_check and none
 * twice. */
int ports_parse_list(const char *text, int64_t *ports, size_t max, size_t *n, struct sl_error *err);

/* Checks the services.* options at start-up. */
int ports_check_config(const struct server_config *cfg, struct sl_error *err);

/* Splits a host ("i-ab12cd-6006.localhost:8080", any case, a final dot
 * allowed) of the service domain into an instance id (SL_ID_MAX bytes,
 * lowercase) and a port; false when it names no service of this domain. */
bool ports_parse_host(const char *host, const char *domain, char *id, int64_t *port);

/* The terminal's host ("i-ab12cd-terminal.localhost:8080", the same rules
 * as ports_parse_host) into an instance id (SL_ID_MAX bytes, lowercase);
 * false when it names no terminal of this domain (docs/design/access.md,
 * "Terminal"). */
#define PORTS_TERMINAL_LABEL "terminal"
bool ports_parse_terminal_host(const char *host, const char *domain, char *id);

/* ws://ID-terminal.DOMAIN[:PROXY_PORT]/, built as the service links are;
 * the caller frees it. */
char *ports_terminal_url(const struct server_config *cfg, const char *id);

/* The files host of an instance ("i-ab12cd-files.localhost:8080"), as the
 * terminal's (server/files.h), and its http:// URL; the caller frees it. */
#define PORTS_FILES_LABEL "files"
bool ports_parse_files_host(const char *host, const char *domain, char *id);
char *ports_files_url(const struct server_config *cfg, const char *id);

/* Request filtering (ports-filter.c): one parser finds suanli's credentials
 * in a proxied request and strips them from what the instance receives. */

/* The value of the first suanli_token query parameter of a request URI
 * ("/tree?a=1&suanli_token=T"; '&' or ';' separate, the name may be
 * percent-encoded and in any case), copied into out (size bytes); false when
 * absent, empty or too long. */
bool ports_uri_token(const char *uri, char *out, size_t size);

/* The URI without its suanli_token parameters, newly allocated; NULL when
 * uri is not nginx's $request_uri of a request ("/...", or "?..." which
 * becomes "/?...", without blanks or control bytes). */
char *ports_uri_filter(const char *uri);

/* A Referer without the suanli_token parameters of its query; NULL when
 * empty or holding control bytes (then none is sent). */
char *ports_referer_filter(const char *referer);

/* The values (up to PORTS_VALUE_MAX - 1 bytes; longer ones are skipped) of
 * the cookies named name (any case) in a Cookie header, at most max of them;
 * returns how many. */
#define PORTS_VALUE_MAX 64
size_t ports_cookie_values(const char *header, const char *name, char (*out)[PORTS_VALUE_MAX],
                           size_t max);

/* A Cookie header without suanli's cookies (suanli_session,
 * suanli_port_token, in any case), newly allocated: untouched when it has
 * none, the other cookies joined with "; " when it had some. NULL when no
 * cookie is left, or the header holds control bytes (then none is sent). */
char *ports_cookie_filter(const char *header);

/* Whether a request's cookies may sign it in, from its method and the
 * browser's Sec-Fetch-Site and Sec-Fetch-Mode (NULL when absent): always
 * from the service's own origin, a direct visit, or a client that sends no
 * fetch metadata; from any other origin (a sibling service, another site)
 * only a GET or HEAD navigation. So another renter's page cannot make a
 * visitor's browser post to, or read from, a private service with the
 * visitor's cookies (services share a site: every host is under one
 * domain). */
bool ports_cookies_count(const char *method, const char *fetch_site, const char *fetch_mode);

/* Whether an Authorization value carries a suanli token ("Bearer sl_...",
 * or sl_... after any scheme or none): such a header is not passed to the
 * instance. */
bool ports_authorization_is_suanli(const char *value);

/* Records the ports of a new instance, in the placement's transaction: the
 * services.ports list and, for an image built from the jupyter recipe,
 * Jupyter's port with its own token; from the desktop recipe, the desktop's
 * (noVNC's) port with its own token, whose first 8 digits are the VNC
 * password. */
int ports_create_defaults(struct server *srv, const char *id, const char *image,
                          struct sl_error *err);

/* Publishes port of instance id with a new access token (app: "",
 * "jupyter" or "desktop", which get a token of their own), both stored sealed
 * (secrets.h); a port already there stays as it is. */
int ports_insert(struct server *srv, const char *id, int64_t port, bool public, const char *app,
                 struct sl_error *err);

/* Seals the tokens stored in plaintext by a version before they were
 * sealed, in one transaction, and logs how many; run at start-up. */
int ports_seal_stored(struct server *srv, struct sl_error *err);

/* Adds "services" ([{port, public, app, url, access_url}]), "jupyter" and
 * "desktop" ({port, url} or null) to an instance's JSON (its owner's view:
 * the links carry the tokens). */
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
    const char *node_id;    /* the node whose nginx asks: only its instances */
    const char *host;       /* nginx's $host: what it routed on */
    const char *uri;        /* $request_uri, may be NULL */
    const char *cookie;     /* the Cookie header, may be NULL */
    const char *method;     /* the request's method */
    const char *fetch_site; /* Sec-Fetch-Site, Sec-Fetch-Mode: may be NULL */
    const char *fetch_mode;
};

/* Decides on one proxied request and, when it passes, records the time in
 * instances.last_http_at (at most one write per instance every 10 s). The
 * credentials are every suanli_session (the owner's passes, one of another
 * renter alone is PORTS_FORBIDDEN) and suanli_port_token cookie, and the
 * URI's suanli_token (cookies only when ports_cookies_count); an instance
 * not on node_id is no such service. token
 * receives the port's token (PORTS_TOKEN_HEX) for PORTS_PASS_COOKIE; why
 * (if not NULL) a short reason for a refusal. */
int ports_authorize(struct server *srv, const struct ports_request *rq, enum ports_verdict *out,
                    char *token, const char **why, struct sl_error *err);

#endif
