/* The terminal in the browser (docs/design/access.md, "Terminal"): the
 * owner asks for a ticket (POST /v1/instances/{id}/terminal) and opens
 * ws://{instance}-terminal.{domain}:{proxy port}/?ticket=T with it; the
 * node's nginx asks suanlid about that request as it asks about the service
 * ports (GET /v1/nodes/{id}/proxy/auth), and suanlid accepts the ticket and
 * nothing else: no session cookie, no port's access token. */
#ifndef SL_TERMINAL_H
#define SL_TERMINAL_H

#include <stdbool.h>

#include "api.h"
#include "server.h"

#define TERMINAL_TICKET_TTL  60 /* seconds */
#define TERMINAL_TICKET_HEX  65 /* 256 random bits in hex + NUL */
#define TERMINAL_TICKETS_MAX 16 /* unexpired tickets per instance */
#define TERMINAL_QUERY       "ticket"
#define TERMINAL_ORIGIN_MAX  256
#define TERMINAL_PATH_MAX    4096 /* a files ticket's path (files.h: FILES_PATH_MAX) */

/* What the proxy may do with one request to a terminal host. */
enum terminal_verdict {
    TERMINAL_PASS,            /* a valid ticket: the instance's terminal opens */
    TERMINAL_UNAUTHENTICATED, /* no ticket, or one that is unknown, used or expired */
    TERMINAL_FORBIDDEN,       /* a ticket of another instance, another origin; no such terminal */
};

struct terminal_request {
    const char *node_id; /* the node whose nginx asks: only its instances */
    const char *host;    /* nginx's $host: ID-terminal.DOMAIN */
    const char *uri;     /* $request_uri: /?ticket=T */
    const char *method;
    const char *origin; /* the request's Origin header, may be NULL */
};

/* A ticket as presented at a terminal or files host (terminal_ticket_take). */
struct terminal_ticket {
    char instance_id[SL_ID_MAX];
    char user_id[SL_ID_MAX];
    char origin[TERMINAL_ORIGIN_MAX];
    char owner[SL_ID_MAX];        /* the instance's owner now */
    char state[24];               /* the instance's state now */
    char node_id[SL_ID_MAX];      /* the instance's host now; "" when none */
    char kind[16];                /* "terminal", "files-list", "files-get", "files-put" */
    char path[TERMINAL_PATH_MAX]; /* a files ticket's path in the storage */
};

enum terminal_ticket_found {
    TICKET_NONE,  /* the URI has no well-formed ticket */
    TICKET_SPENT, /* unknown, used or expired */
    TICKET_TAKEN, /* valid until now, and deleted: t filled */
};

/* Looks up the ticket of uri and deletes it whatever comes of it (a ticket
 * works once, and one tried at another host or origin is gone for its
 * holder too). -1 with err on a store failure. */
int terminal_ticket_take(struct server *srv, const char *uri, struct terminal_ticket *t,
                         enum terminal_ticket_found *found, struct sl_error *err);

/* Judges one request to a terminal host: the ticket of the URI is looked up
 * and deleted whatever the outcome (a ticket works once), then it must be
 * unexpired, for the host's instance, of the instance's owner, the
 * instance running on node_id, the method GET and the Origin the one the
 * ticket was made for. why: a short reason for a refusal. */
int terminal_authorize(struct server *srv, const struct terminal_request *rq,
                       enum terminal_verdict *out, const char **why, struct sl_error *err);

/* The origin the console runs at, as this request shows it: its Origin
 * (allowed: auth_check_browser_origin), else the API's own address; a
 * ticket is bound to it. Freed by the caller. */
char *terminal_console_origin(struct api_request *req, struct sl_error *err);

/* Records what a node's heartbeat says: whether its agent serves terminals
 * (not without nginx, nor in a chroot, where the runtime's exec would land
 * on the host's root). A ticket for an instance on a node that does not is
 * refused with 409 terminal_unavailable. */
int terminal_node_serves(struct server *srv, const char *node_id, bool serves,
                         struct sl_error *err);

#endif
