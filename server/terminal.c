/* The browser's terminal: tickets (POST /v1/instances/{id}/terminal) and
 * their judgement when the node's nginx asks about a terminal host
 * (terminal.h). */
#include "terminal.h"

#include "auth.h"
#include "ports.h"
#include "routes.h"
#include "store.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The value of the URI's one "ticket" parameter, 64 hex digits, into out
 * (TERMINAL_TICKET_HEX); false when absent or malformed. */
static bool uri_ticket(const char *uri, char *out)
{
    const char *q = uri ? strchr(uri, '?') : NULL;

    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        size_t n = strcspn(p, "&#");
        if (n > sizeof(TERMINAL_QUERY) &&
            strncmp(p, TERMINAL_QUERY "=", sizeof(TERMINAL_QUERY)) == 0) {
            const char *v = p + sizeof(TERMINAL_QUERY);
            size_t vn = n - sizeof(TERMINAL_QUERY);
            if (vn != TERMINAL_TICKET_HEX - 1 || strspn(v, "0123456789abcdef") < vn)
                return false;
            memcpy(out, v, vn);
            out[vn] = '\0';
            return true;
        }
        if (p[n] != '&')
            break;
        p += n + 1;
    }
    return false;
}

char *terminal_console_origin(struct api_request *req, struct sl_error *err)
{
    const char *origin = api_header(req, "Origin");
    const char *host = req->forwarded_host ? req->forwarded_host : api_header(req, "Host");

    if (origin) {
        if (auth_check_browser_origin(req, err) < 0)
            return NULL;
    } else if (!host || !*host) {
        sl_fail(err, SL_E_INVALID, "missing_header",
                "the request has no Host header: send the API's address as Host, or Origin");
        return NULL;
    }
    char *bound =
        origin ? xstrdup(origin) : xasprintf("%s://%s", req->https ? "https" : "http", host);
    for (const char *p = bound; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f) {
            free(bound);
            sl_fail(err, SL_E_INVALID, "invalid_origin",
                    "the Origin or Host header holds a blank or control byte");
            return NULL;
        }
    if (strlen(bound) >= TERMINAL_ORIGIN_MAX) {
        free(bound);
        sl_fail(err, SL_E_INVALID, "invalid_origin", "the Origin or Host header is too long");
        return NULL;
    }
    return bound;
}

int api_instances_terminal(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    int64_t now = sl_time_now(), open;
    char ticket[TERMINAL_TICKET_HEX], hash[SL_HASH_HEX_MAX];

    if (strcmp(req->instance.state, "running") != 0)
        return sl_fail(err, SL_E_CONFLICT, "instance_not_running",
                       "instance '%s' is %s: start it first (suanli start %s, or Start in the "
                       "console), then open its terminal",
                       req->instance.id, req->instance.state, req->instance.id);
    int64_t serves = 0;
    if (store_get_int(st, "SELECT terminals FROM nodes WHERE id = ?1",
                      DB_ARGS(DB_TEXT(req->instance.node_id)), &serves, err) < 0)
        return -1;
    if (!serves)
        return sl_fail(err, SL_E_CONFLICT, "terminal_unavailable",
                       "the host of instance '%s' serves no terminal in the browser (its agent "
                       "runs without nginx, or in a chroot): use SSH (suanli ssh %s)",
                       req->instance.id, req->instance.id);
    cleanup_free char *origin = terminal_console_origin(req, err);
    if (!origin)
        return -1;
    if (store_exec(st, "DELETE FROM terminal_tickets WHERE expires_at <= ?1", DB_ARGS(DB_INT(now)),
                   err) < 0 ||
        store_get_int(st,
                      "SELECT COUNT(*) FROM terminal_tickets WHERE instance_id = ?1 AND"
                      " expires_at > ?2",
                      DB_ARGS(DB_TEXT(req->instance.id), DB_INT(now)), &open, err) < 0)
        return -1;
    if (open >= TERMINAL_TICKETS_MAX)
        return sl_fail(err, SL_E_RATE_LIMITED, "too_many_tickets",
                       "instance '%s' has %d terminal tickets not used yet: use one, or wait a "
                       "minute for them to expire",
                       req->instance.id, TERMINAL_TICKETS_MAX);
    sl_random_hex(ticket, (TERMINAL_TICKET_HEX - 1) / 2);
    sl_sha256_hex(ticket, strlen(ticket), hash);
    if (store_exec(st,
                   "INSERT INTO terminal_tickets (hash, instance_id, user_id, origin, expires_at)"
                   " VALUES (?1, ?2, ?3, ?4, ?5)",
                   DB_ARGS(DB_TEXT(hash), DB_TEXT(req->instance.id), DB_TEXT(req->caller.user_id),
                           DB_TEXT(origin), DB_INT(now + TERMINAL_TICKET_TTL)),
                   err) < 0)
        return -1;
    cleanup_free char *base = ports_terminal_url(&req->srv->cfg, req->instance.id);
    cleanup_free char *url = xasprintf("%s?" TERMINAL_QUERY "=%s", base, ticket);
    api_reply(res, 201,
              json_pack("{s:s, s:s, s:s, s:o}", "ticket", ticket, "url", url, "origin", origin,
                        "expires_at", api_time(now + TERMINAL_TICKET_TTL)));
    return 0;
}

int terminal_ticket_take(struct server *srv, const char *uri, struct terminal_ticket *t,
                         enum terminal_ticket_found *found, struct sl_error *err)
{
    char ticket[TERMINAL_TICKET_HEX], hash[SL_HASH_HEX_MAX];
    int rc;

    *found = TICKET_NONE;
    if (!uri_ticket(uri, ticket))
        return 0;
    *found = TICKET_SPENT;
    sl_sha256_hex(ticket, strlen(ticket), hash);
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT t.instance_id, t.user_id, t.origin, t.expires_at, i.user_id, i.state,"
                    " i.node_id, t.kind, t.path FROM terminal_tickets t"
                    " JOIN instances i ON i.id = t.instance_id WHERE t.hash = ?1",
                    DB_ARGS(DB_TEXT(hash)), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return 0;
    /* used once, whatever comes of it; a ticket two requests present at
     * once is taken by the one whose delete removed it */
    int deleted = store_exec(srv->store, "DELETE FROM terminal_tickets WHERE hash = ?1",
                             DB_ARGS(DB_TEXT(hash)), err);
    if (deleted < 0)
        return -1;
    if (deleted == 0 || db_int(rows, 3) <= sl_time_now())
        return 0;
    snprintf(t->instance_id, sizeof(t->instance_id), "%s", db_text(rows, 0));
    snprintf(t->user_id, sizeof(t->user_id), "%s", db_text(rows, 1));
    snprintf(t->origin, sizeof(t->origin), "%s", db_text(rows, 2));
    snprintf(t->owner, sizeof(t->owner), "%s", db_text(rows, 4));
    snprintf(t->state, sizeof(t->state), "%s", db_text(rows, 5));
    snprintf(t->node_id, sizeof(t->node_id), "%s", db_text(rows, 6));
    snprintf(t->kind, sizeof(t->kind), "%s", db_text(rows, 7));
    snprintf(t->path, sizeof(t->path), "%s", db_text(rows, 8));
    *found = TICKET_TAKEN;
    return 0;
}

int terminal_authorize(struct server *srv, const struct terminal_request *rq,
                       enum terminal_verdict *out, const char **why, struct sl_error *err)
{
    char id[SL_ID_MAX];
    struct terminal_ticket t;
    enum terminal_ticket_found found;

    *out = TERMINAL_FORBIDDEN;
    *why = "no such terminal";
    if (!ports_parse_terminal_host(rq->host, srv->cfg.services_domain, id))
        return 0;
    if (terminal_ticket_take(srv, rq->uri, &t, &found, err) < 0)
        return -1;
    *out = TERMINAL_UNAUTHENTICATED;
    if (found == TICKET_NONE) {
        *why = "a terminal opens with a ticket: open it from the instance's page in the console "
               "(POST /v1/instances/ID/terminal)";
        return 0;
    }
    if (found == TICKET_SPENT) {
        *why = "the terminal ticket is not valid, was used, or expired: open the terminal again "
               "from the console";
        return 0;
    }
    *out = TERMINAL_FORBIDDEN;
    if (strcmp(t.kind, "terminal") != 0) {
        *why = "this ticket is for the instance's files, not its terminal";
        return 0;
    }
    if (strcmp(t.instance_id, id) != 0) {
        *why = "the terminal ticket is for another instance";
        return 0;
    }
    if (strcmp(t.user_id, t.owner) != 0 || !t.node_id[0] || !rq->node_id ||
        strcmp(t.node_id, rq->node_id) != 0) {
        *why = "no such terminal";
        return 0;
    }
    if (strcmp(t.state, "running") != 0) {
        *why = "the instance is not running: start it, then open its terminal again";
        return 0;
    }
    if (!rq->method || strcmp(rq->method, "GET") != 0) {
        *why = "a terminal is a websocket: GET with Upgrade";
        return 0;
    }
    if (!rq->origin || strcasecmp(rq->origin, t.origin) != 0) {
        *why = "the terminal opens only from the console's own page";
        return 0;
    }
    *out = TERMINAL_PASS;
    return 0;
}

int terminal_node_serves(struct server *srv, const char *node_id, bool serves, struct sl_error *err)
{
    return store_exec(srv->store,
                      "UPDATE nodes SET terminals = ?2 WHERE id = ?1 AND terminals != ?2",
                      DB_ARGS(DB_TEXT(node_id), DB_INT(serves)), err) < 0
               ? -1
               : 0;
}
