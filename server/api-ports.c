/* Service ports through the API: the owner lists, adds, removes and opens
 * them; the nodes' nginx asks whether a request may pass (ports.h). */
#include "instance-states.h"
#include "instance-sync.h"
#include "ports.h"
#include "routes.h"
#include "files.h"
#include "terminal.h"

#include "../lib/cleanup.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The routes with {id} are API_INSTANCE: the dispatcher found the caller's
 * instance (req->instance). Once it is released its ports are gone: 409. */
static int not_released(struct api_request *req, struct sl_error *err)
{
    int state = instance_state_parse(req->instance.state);

    if (state >= 0 && instance_state_gone(state))
        return sl_fail(err, SL_E_CONFLICT, "instance_released",
                       "instance '%s' is released: its ports are gone", req->instance.id);
    return 0;
}

/* The owner's view of one port (the services item of the instance). */
static json_t *port_json(struct api_request *req, int64_t port, struct sl_error *err)
{
    cleanup_json json_t *inst = json_pack("{s:s}", "id", req->instance.id);

    if (ports_instance_json(req->srv, inst, err) < 0)
        return NULL;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(inst, "services"), i, s)
    {
        if (json_integer_value(json_object_get(s, "port")) == port)
            return json_incref(s);
    }
    sl_fail(err, SL_E_NOT_FOUND, "no_such_port", "instance '%s' publishes no port %" PRId64,
            req->instance.id, port);
    return NULL;
}

static int bump_node(struct store *st, const char *node_id, struct sl_error *err)
{
    return instances_node_changed(st, node_id, err);
}

int api_instances_ports_list(struct api_request *req, struct api_response *res,
                             struct sl_error *err)
{
    cleanup_json json_t *inst = json_pack("{s:s}", "id", req->instance.id);

    if (not_released(req, err) < 0 || ports_instance_json(req->srv, inst, err) < 0)
        return -1;
    api_reply(res, 200,
              json_pack("{s:O, s:O, s:O}", "items", json_object_get(inst, "services"), "jupyter",
                        json_object_get(inst, "jupyter"), "desktop",
                        json_object_get(inst, "desktop")));
    return 0;
}

int api_instances_ports_set(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct store *st = req->srv->store;
    int64_t port = 0, have, exists;
    bool public = false, public_given;
    const struct sl_json_field fields[] = {
        { "port", SL_JSON_INT, .required = true, .min = -1000000000, .max = 1000000000,
          .out = &port },
        { "public", SL_JSON_BOOL, .out = &public },
    };

    if (api_body_fields(req, fields, ARRAY_SIZE(fields), err) < 0 || ports_check(port, err) < 0 ||
        not_released(req, err) < 0)
        return -1;
    public_given = json_object_get(req->json, "public") != NULL;
    if (store_get_int(st,
                      "SELECT COUNT(*) FROM instance_ports WHERE instance_id = ?1 AND port = ?2",
                      DB_ARGS(DB_TEXT(req->instance.id), DB_INT(port)), &exists, err) < 0 ||
        store_get_int(st, "SELECT COUNT(*) FROM instance_ports WHERE instance_id = ?1",
                      DB_ARGS(DB_TEXT(req->instance.id)), &have, err) < 0)
        return -1;
    if (!exists) {
        if (have >= req->srv->cfg.services_max_ports)
            return sl_fail(err, SL_E_CONFLICT, "too_many_ports",
                           "instance '%s' already publishes %" PRId64 " ports, the most allowed: "
                           "remove one first (suanli port rm)",
                           req->instance.id, have);
        if (ports_insert(req->srv, req->instance.id, port, public, "", err) < 0)
            return -1;
    } else if (public_given &&
               store_exec(st,
                          "UPDATE instance_ports SET public = ?3 WHERE instance_id = ?1 AND"
                          " port = ?2",
                          DB_ARGS(DB_TEXT(req->instance.id), DB_INT(port), DB_INT(public)),
                          err) < 0) {
        return -1;
    }
    if (bump_node(st, req->instance.node_id, err) < 0)
        return -1;
    json_t *j = port_json(req, port, err);
    if (!j)
        return -1;
    api_reply(res, exists ? 200 : 201, j);
    return 0;
}

int api_instances_ports_delete(struct api_request *req, struct api_response *res,
                               struct sl_error *err)
{
    char *end;
    /* NULL when the path's parameters overflow the dispatcher's buffer */
    const char *text = req->params[1] ? req->params[1] : "";

    errno = 0;
    long long port = strtoll(text, &end, 10);
    if (errno || end == text || *end || port > 65535)
        port = -1;
    if (ports_check(port, err) < 0 || not_released(req, err) < 0)
        return -1;
    int n = store_exec(req->srv->store,
                       "DELETE FROM instance_ports WHERE instance_id = ?1 AND port = ?2",
                       DB_ARGS(DB_TEXT(req->instance.id), DB_INT(port)), err);
    if (n < 0)
        return -1;
    if (n == 0)
        return sl_fail(err, SL_E_NOT_FOUND, "no_such_port",
                       "instance '%s' publishes no port %lld: see suanli port ls", req->instance.id,
                       port);
    if (bump_node(req->srv->store, req->instance.node_id, err) < 0)
        return -1;
    api_reply(res, 204, NULL);
    return 0;
}

/* Adds "name: value" when value is set and fits on a header line. */
static void add_filtered(struct api_response *res, const char *name, const char *value)
{
    if (value && *value && !strpbrk(value, "\r\n"))
        api_add_header(res, name, value);
}

/* What a ticket is judged by: the proxied request, and the Origin the
 * client sent (nginx passes it on as X-Original-Origin). */
static struct terminal_request ticket_request(struct api_request *req,
                                              const struct ports_request *prq)
{
    return (struct terminal_request){
        .node_id = prq->node_id,
        .host = prq->host,
        .uri = prq->uri,
        .method = prq->method,
        .origin = api_header(req, "X-Original-Origin"),
    };
}

/* A terminal host (terminal.h): its ticket and nothing else; a pass names
 * the instance for the agent's terminal server (X-Suanli-Terminal). */
static int terminal_auth(struct api_request *req, struct api_response *res,
                         const struct ports_request *prq, const char *id, struct sl_error *err)
{
    struct terminal_request rq = ticket_request(req, prq);
    enum terminal_verdict verdict;
    const char *why;

    if (terminal_authorize(req->srv, &rq, &verdict, &why, err) < 0)
        return -1;
    if (verdict == TERMINAL_PASS) {
        api_add_header(res, "X-Suanli-Terminal", id);
        api_reply(res, 204, NULL);
        return 0;
    }
    return sl_fail(err, verdict == TERMINAL_UNAUTHENTICATED ? SL_E_UNAUTHENTICATED : SL_E_FORBIDDEN,
                   "access_denied", "%s", why);
}

/* A files host (files.h): its ticket and nothing else; a pass names the
 * instance, the operation, its path (percent-encoded: blanks and bytes
 * past ASCII survive the header) and the origin the answer may be read
 * from. */
static int files_auth(struct api_request *req, struct api_response *res,
                      const struct ports_request *prq, const char *id, struct sl_error *err)
{
    struct terminal_request rq = ticket_request(req, prq);
    enum terminal_verdict verdict;
    const char *why;
    char op[8], path[FILES_PATH_MAX], origin[TERMINAL_ORIGIN_MAX];

    if (files_authorize(req->srv, &rq, &verdict, &why, op, path, origin, err) < 0)
        return -1;
    if (verdict != TERMINAL_PASS)
        return sl_fail(err,
                       verdict == TERMINAL_UNAUTHENTICATED ? SL_E_UNAUTHENTICATED : SL_E_FORBIDDEN,
                       "access_denied", "%s", why);
    cleanup_buf struct sl_buf enc = SL_BUF_INIT;
    sl_buf_adds(&enc, "/");
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("._~/-", *p))
            sl_buf_addf(&enc, "%c", *p);
        else
            sl_buf_addf(&enc, "%%%02X", *p);
    }
    cleanup_free char *encoded = sl_buf_detach(&enc, NULL);
    api_add_header(res, "X-Suanli-Files", id);
    api_add_header(res, "X-Suanli-Files-Op", op);
    api_add_header(res, "X-Suanli-Files-Path", encoded);
    add_filtered(res, "X-Suanli-Files-Origin", origin);
    api_reply(res, 204, NULL);
    return 0;
}

/* nginx's auth_request, with the node's own token (API_NODE): 204 lets the
 * request pass, 401 and 403 refuse it (anything else would be a 500 to the
 * browser). Every header it reads is one nginx sets itself for the
 * subrequest (node/proxy.c): the host nginx routed on, the request's
 * method and URI, the client's Cookie, Referer, Authorization and fetch
 * metadata (Sec-Fetch-Site, Sec-Fetch-Mode); a passing answer carries
 * them back without suanli's credentials, and nginx sends those to the
 * instance. Asked for every proxied request, so it logs nothing when it
 * passes (API_QUIET). */
int api_proxy_auth(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct ports_request rq = {
        .node_id = req->caller.node_id,
        .host = api_header(req, "X-Original-Host"),
        .uri = api_header(req, "X-Original-URI"),
        .cookie = api_header(req, "Cookie"),
        .method = api_header(req, "X-Original-Method"),
        .fetch_site = api_header(req, "X-Original-Sec-Fetch-Site"),
        .fetch_mode = api_header(req, "X-Original-Sec-Fetch-Mode"),
    };
    enum ports_verdict verdict;
    char token[PORTS_TOKEN_HEX], terminal_id[SL_ID_MAX];
    const char *why;

    if (!rq.host || !rq.uri)
        return sl_fail(err, SL_E_INVALID, "missing_header",
                       "X-Original-Host or X-Original-URI is missing: this route is for the "
                       "node's nginx");
    if (ports_parse_terminal_host(rq.host, req->srv->cfg.services_domain, terminal_id))
        return terminal_auth(req, res, &rq, terminal_id, err);
    if (ports_parse_files_host(rq.host, req->srv->cfg.services_domain, terminal_id))
        return files_auth(req, res, &rq, terminal_id, err);
    cleanup_free char *uri = ports_uri_filter(rq.uri);
    if (!uri)
        return sl_fail(err, SL_E_INVALID, "invalid_uri",
                       "X-Original-URI is not a request path: this route is for the node's nginx");
    if (ports_authorize(req->srv, &rq, &verdict, token, &why, err) < 0)
        return -1;
    switch (verdict) {
    case PORTS_PASS_COOKIE: {
        /* host-only: the cookie reaches this service, no other */
        cleanup_free char *cookie =
            xasprintf(PORTS_COOKIE "=%s; Path=/; HttpOnly; SameSite=Lax", token);
        api_add_header(res, "X-Suanli-Set-Cookie", cookie);
    }
    /* fall through */
    case PORTS_PASS: {
        const char *authorization = api_header(req, "X-Original-Authorization");
        cleanup_free char *cookie = ports_cookie_filter(rq.cookie);
        cleanup_free char *referer = ports_referer_filter(api_header(req, "X-Original-Referer"));
        api_add_header(res, "X-Suanli-URI", uri);
        add_filtered(res, "X-Suanli-Cookie", cookie);
        add_filtered(res, "X-Suanli-Referer", referer);
        if (!ports_authorization_is_suanli(authorization))
            add_filtered(res, "X-Suanli-Authorization", authorization);
        api_reply(res, 204, NULL);
        return 0;
    }
    case PORTS_UNAUTHENTICATED:
        return sl_fail(err, SL_E_UNAUTHENTICATED, "access_denied", "%s", why);
    case PORTS_FORBIDDEN:
        break;
    }
    return sl_fail(err, SL_E_FORBIDDEN, "access_denied", "%s", why);
}
