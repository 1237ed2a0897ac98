/* Request dispatch: route lookup, authentication, idempotency, errors. */
#include "api.h"
#include "auth.h"
#include "front.h"
#include "idempotency.h"
#include "metrics.h"

#include "../lib/cleanup.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void api_response_init(struct api_response *res)
{
    memset(res, 0, sizeof(*res));
    res->status = 200;
    res->file_fd = -1;
    sl_buf_init(&res->headers);
}

void api_response_release(struct api_response *res)
{
    json_decref(res->json);
    free(res->raw);
    if (res->file_fd >= 0)
        close(res->file_fd);
    sl_buf_release(&res->headers);
    memset(res, 0, sizeof(*res));
    res->file_fd = -1;
}

void api_reply(struct api_response *res, int status, json_t *json)
{
    json_decref(res->json);
    res->status = status;
    res->json = json;
}

void api_add_header(struct api_response *res, const char *name, const char *value)
{
    sl_buf_addf(&res->headers, "%s: %s\r\n", name, value);
}

const char *api_query(struct api_request *req, const char *name)
{
    return req->io.query ? req->io.query(req->io.ctx, name) : NULL;
}

const char *api_header(struct api_request *req, const char *name)
{
    return req->io.header ? req->io.header(req->io.ctx, name) : NULL;
}

json_t *api_time(int64_t t)
{
    char buf[SL_TIME_FORMAT_MAX];
    return json_string(sl_time_format(t, buf));
}

size_t api_route_index(const struct api_route *route)
{
    return (size_t)(route - api_routes);
}

int api_body_fields(struct api_request *req, const struct sl_json_field *fields, size_t n,
                    struct sl_error *err)
{
    if (!req->json) {
        /* a route with no required field accepts an empty body */
        bool any_required = false;
        for (size_t i = 0; i < n; i++)
            any_required |= fields[i].required;
        if (req->body_len == 0 && !any_required)
            return 0;
        req->json = sl_json_parse_object(req->body, req->body_len, err);
        if (!req->json)
            return -1;
    }
    return sl_json_fields(req->json, fields, n, err);
}

static int parse_int_param(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out,
                           struct sl_error *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return sl_fail(err, SL_E_INVALID, "invalid_parameter",
                       "query parameter '%s' must be an integer from %" PRId64 " to %" PRId64, name,
                       lo, hi);
    *out = v;
    return 0;
}

int api_page_params(struct api_request *req, int64_t *limit, int64_t *after, struct sl_error *err)
{
    const char *l = api_query(req, "limit"), *c = api_query(req, "cursor");

    *limit = 50;
    *after = 0;
    if (l && parse_int_param("limit", l, 1, req->srv->cfg.page_size_max, limit, err) < 0)
        return -1;
    if (c && parse_int_param("cursor", c, 0, INT64_MAX, after, err) < 0)
        return -1;
    return 0;
}

/* {"items": items, "next_cursor": next or null}; takes items. */
static json_t *api_page(json_t *items, int64_t limit, int64_t last_seq)
{
    json_t *next =
        json_array_size(items) == (size_t)limit ? json_sprintf("%" PRId64, last_seq) : json_null();
    return json_pack("{s:o, s:o}", "items", items, "next_cursor", next);
}

int api_reply_rows(struct api_response *res, struct db_rows *rows,
                   json_t *(*row_json)(struct db_rows *rows, void *ctx), void *ctx, int64_t limit,
                   struct sl_error *err)
{
    cleanup_json json_t *items = json_array();
    int64_t last = 0;
    int rc;

    while ((rc = db_next(rows, err)) == 1) {
        last = db_int(rows, 0);
        json_array_append_new(items, row_json(rows, ctx));
    }
    if (rc < 0)
        return -1;
    api_reply(res, 200, api_page(TAKE_PTR(items), limit, last));
    return 0;
}

/* Matches path against pattern, filling params; true on a match. */
static bool match(const char *pattern, const char *path, struct api_request *req, bool fill)
{
    size_t used = 0, np = 0;
    const char *p = pattern, *s = path;

    while (*p && *s) {
        if (*p == '{') {
            const char *pend = strchr(p, '}');
            size_t n = strcspn(s, "/");
            if (!pend || n == 0)
                return false;
            if (fill) {
                if (np >= API_MAX_PARAMS || used + n + 1 > sizeof(req->param_buf))
                    return false;
                memcpy(req->param_buf + used, s, n);
                req->param_buf[used + n] = '\0';
                req->params[np++] = req->param_buf + used;
                used += n + 1;
            }
            p = pend + 1;
            s += n;
            continue;
        }
        if (*p != *s)
            return false;
        p++;
        s++;
    }
    return *p == '\0' && *s == '\0';
}

const struct api_route *api_route_lookup(const char *method, const char *path)
{
    for (size_t i = 0; i < api_routes_count; i++)
        if (strcmp(api_routes[i].method, method) == 0 &&
            match(api_routes[i].pattern, path, NULL, false))
            return &api_routes[i];
    return NULL;
}

static const struct api_route *find_route(struct api_request *req, bool *path_known)
{
    *path_known = false;
    for (size_t i = 0; i < api_routes_count; i++) {
        const struct api_route *r = &api_routes[i];
        if (!match(r->pattern, req->path, req, false))
            continue;
        *path_known = true;
        if (strcmp(r->method, req->method) == 0) {
            /* parameters longer than param_buf name nothing that exists */
            if (!match(r->pattern, req->path, req, true)) {
                *path_known = false;
                return NULL;
            }
            return r;
        }
    }
    return NULL;
}

json_t *api_error_json(const char *code, const char *message)
{
    json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message);

    if (!j) {
        /* the message quotes request bytes that are not UTF-8 (a path, an
         * id): jansson refuses them, so send them as '?' */
        cleanup_free char *clean = xstrdup(message);
        for (char *p = clean; *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", clean);
    }
    return j;
}

static void reply_error(struct api_response *res, const struct sl_error *err)
{
    const char *code = err->code[0] ? err->code : sl_error_kind_code(err->kind);
    const char *msg = err->message[0] ? err->message : "internal error";

    if (err->kind == SL_E_INTERNAL || err->kind == SL_E_NONE) {
        /* details of internal failures go to the log, not to callers */
        log_error("internal error: %s", msg);
        msg = "internal error; the operator has the details in suanlid's log";
        code = "internal";
    }
    api_reply(res, sl_error_http_status(err->kind), api_error_json(code, msg));
}

/* API_INSTANCE (api.h): fills req->instance, or 404 as for an instance
 * that does not exist. */
static int resolve_instance(struct api_request *req, struct sl_error *err)
{
    bool node = req->route->flags & API_NODE;
    bool any = (req->route->flags & API_ADMIN_READS) && req->caller.admin && !node;
    const char *id = req->params[node ? 1 : 0];
    cleanup_rows struct db_rows *rows =
        any    ? store_query(req->srv->store,
                             "SELECT id, user_id, node_id, state FROM instances WHERE id = ?1",
                             DB_ARGS(DB_TEXT(id)), err)
        : node ? store_query(req->srv->store,
                             "SELECT id, user_id, node_id, state FROM instances"
                             " WHERE id = ?1 AND node_id = ?2 AND state != 'released'",
                             DB_ARGS(DB_TEXT(id), DB_TEXT(req->caller.node_id)), err)
               : store_query(req->srv->store,
                             "SELECT id, user_id, node_id, state FROM instances"
                             " WHERE id = ?1 AND user_id = ?2",
                             DB_ARGS(DB_TEXT(id), DB_TEXT(req->caller.user_id)), err);
    struct api_instance *in = &req->instance;
    int rc;

    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return node ? sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                              "no instance '%s' on node '%s'", id, req->caller.node_id)
                    : sl_fail(err, SL_E_NOT_FOUND, "no_such_instance",
                              "no instance '%s': list yours with suanli ls", id);
    snprintf(in->id, sizeof(in->id), "%s", db_text(rows, 0));
    snprintf(in->user_id, sizeof(in->user_id), "%s", db_text(rows, 1));
    snprintf(in->node_id, sizeof(in->node_id), "%s", db_text(rows, 2));
    snprintf(in->state, sizeof(in->state), "%s", db_text(rows, 3));
    return 0;
}

/* Runs the handler; a handler that changes things runs in a transaction (a
 * savepoint inside idempotency's), so a refusal half-way leaves nothing.
 * The route's instance is found first, inside it. */
static int run_handler(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    const struct api_route *r = req->route;
    struct store *st = req->srv->store;
    cleanup_tx struct store *tx = NULL;
    bool writes = strcmp(req->method, "GET") != 0 && !(r->flags & API_OWN_TX);

    if (writes) {
        if (store_begin(st, err) < 0)
            return -1;
        tx = st;
    }
    /* before the body: a stranger learns nothing from how it is judged */
    if ((r->flags & API_INSTANCE) && resolve_instance(req, err) < 0)
        return -1;
    if (!(r->flags & (API_RAW_BODY | API_UPLOAD)) && req->body_len > 0 && !req->json) {
        req->json = sl_json_parse_object(req->body, req->body_len, err);
        if (!req->json)
            return -1;
    }
    if (r->handler(req, res, err) < 0)
        return -1;
    if (writes) {
        if (store_commit(st, err) < 0)
            return -1;
        tx = NULL;
    }
    return 0;
}

void api_dispatch(struct api_request *req, struct api_response *res)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t started = sl_time_mono_us();
    bool path_known;
    int rc = -1;

    req->route = find_route(req, &path_known);
    if (!req->route) {
        /* the admin routes' methods are no one else's to learn: to others
         * a wrong method there is a route that does not exist */
        if (path_known && strncmp(req->path, "/v1/admin/", 10) == 0) {
            struct sl_error e = SL_ERROR_INIT;
            path_known = auth_authenticate(req, &e) == 0 && req->caller.admin;
        }
        if (path_known)
            sl_fail(&err, SL_E_METHOD, NULL, "%s is not allowed on %s", req->method, req->path);
        else
            sl_fail(&err, SL_E_NOT_FOUND, NULL, "no such route: %s %s", req->method, req->path);
        goto out;
    }
    if (req->body_len > (size_t)req->srv->cfg.max_body_bytes) {
        sl_fail(&err, SL_E_TOO_LARGE, NULL, "the request body is over %" PRId64 " bytes",
                req->srv->cfg.max_body_bytes);
        goto out;
    }
    if (req->route->flags & API_FRONT) {
        if (front_authenticate(req, &err) < 0)
            goto out;
    } else if (auth_authenticate(req, &err) < 0) {
        goto out;
    }
    /* the session cookie rides along with any page's requests: only the
     * API's own pages may use it (auth.h) */
    if (auth_check_cookie_request(req, &err) < 0)
        goto out;
    if (req->route->flags & API_FRONT) {
        /* the front's token was checked above */
    } else if (req->route->flags & API_NODE) {
        /* a node speaks for itself only: another node's id is 404 */
        if (!req->caller.node_id[0] || strcmp(req->caller.node_id, req->params[0]) != 0) {
            sl_fail(&err, req->caller.node_id[0] ? SL_E_NOT_FOUND : SL_E_UNAUTHENTICATED,
                    req->caller.node_id[0] ? "not_found" : "unauthenticated",
                    "this route is for the node agent of '%s', with its node token",
                    req->params[0]);
            goto out;
        }
    } else if (!(req->route->flags & API_PUBLIC) && !req->caller.authenticated) {
        sl_fail(&err, SL_E_UNAUTHENTICATED, NULL,
                "log in first: send 'Authorization: Bearer TOKEN' (suanli login)");
        goto out;
    }
    if ((req->route->flags & API_ADMIN) && !req->caller.admin) {
        sl_fail(&err, SL_E_NOT_FOUND, NULL, "no such route: %s %s", req->method, req->path);
        goto out;
    }
    if (req->route->prepare && req->route->prepare(req, &err) < 0)
        goto out;
    if (idempotency_applies(req))
        rc = idempotency_run(req, res, run_handler, &err);
    else
        rc = run_handler(req, res, &err);
out:
    if (req->prepared_free)
        req->prepared_free(req->prepared);
    req->prepared = NULL;
    req->prepared_free = NULL;
    if (rc < 0)
        reply_error(res, &err);
    metrics_observe_request(req->route, res->status, sl_time_mono_us() - started);
    json_decref(req->json);
    req->json = NULL;
}

char *api_response_body(struct api_response *res, size_t *len, const char **content_type)
{
    if (res->raw) {
        *len = res->raw_len;
        *content_type = res->content_type ? res->content_type : "text/plain; charset=utf-8";
        res->raw_len = 0;
        return TAKE_PTR(res->raw);
    }
    *content_type = "application/json";
    if (!res->json) {
        *len = 0;
        return xstrdup("");
    }
    char *s = json_dumps(res->json, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!s)
        s = xstrdup("{\"error\":{\"code\":\"internal\",\"message\":\"response too large\"}}");
    *len = strlen(s);
    return s;
}
