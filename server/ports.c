#include "ports.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "store.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* a write per proxied request would serialise the store: one per instance
 * every this many seconds is enough for idle detection */
#define LAST_HTTP_RESOLUTION 10

int ports_check(int64_t port, struct sl_error *err)
{
    if (port < 1 || port > 65535)
        return sl_fail(err, SL_E_INVALID, "invalid_port",
                       "port %" PRId64 " is not a TCP port: use 1 to 65535", port);
    if (port == PORTS_SSH)
        return sl_fail(err, SL_E_INVALID, "reserved_port",
                       "port 22 is reserved for SSH, which has its own mapped port: pick another");
    return 0;
}

int ports_parse_list(const char *text, int64_t *ports, size_t max, size_t *n, struct sl_error *err)
{
    const char *p = text ? text : "";

    *n = 0;
    while (*p) {
        char *end;
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        if (!isdigit((unsigned char)*p))
            return sl_fail(err, SL_E_INVALID, "invalid_port", "'%s' is not a list of ports", text);
        long long v = strtoll(p, &end, 10);
        if (end - p > 6)
            v = -1;
        if (ports_check(v, err) < 0)
            return -1;
        for (size_t i = 0; i < *n; i++)
            if (ports[i] == v)
                return sl_fail(err, SL_E_INVALID, "invalid_port", "port %lld is listed twice", v);
        if (*n >= max)
            return sl_fail(err, SL_E_INVALID, "too_many_ports", "'%s' lists more than %zu ports",
                           text, max);
        ports[(*n)++] = v;
        p = end;
        if (*p && *p != ',' && *p != ' ')
            return sl_fail(err, SL_E_INVALID, "invalid_port", "'%s' is not a list of ports", text);
    }
    return 0;
}

int ports_check_config(const struct server_config *cfg, struct sl_error *err)
{
    int64_t ports[PORTS_MAX];
    size_t n;

    if (ports_parse_list(cfg->services_ports, ports, PORTS_MAX, &n, err) < 0) {
        sl_error_prefix(err, "option 'services.ports'");
        return -1;
    }
    if ((int64_t)n > cfg->services_max_ports)
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'services.ports' lists %zu ports, more than services.max_ports "
                       "(%" PRId64 ")",
                       n, cfg->services_max_ports);
    const char *d = cfg->services_domain;
    if (!*d || strspn(d, "abcdefghijklmnopqrstuvwxyz0123456789.-") != strlen(d) || d[0] == '.' ||
        d[0] == '-')
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'services.domain' must be a lowercase DNS name, not '%s'", d);
    if (ports_check(cfg->services_jupyter_port, err) < 0) {
        sl_error_prefix(err, "option 'services.jupyter_port'");
        return -1;
    }
    return 0;
}

bool ports_parse_host(const char *host, const char *domain, char *id, int64_t *port)
{
    char h[256];
    size_t n = strcspn(host ? host : "", ":");
    size_t dn = strlen(domain);

    if (!host || n == 0 || n >= sizeof(h))
        return false;
    for (size_t i = 0; i < n; i++)
        h[i] = (char)tolower((unsigned char)host[i]);
    h[n] = '\0';
    if (n > 0 && h[n - 1] == '.') /* a fully qualified "name." */
        h[--n] = '\0';
    /* LABEL "." DOMAIN, LABEL = ID "-" PORT */
    if (n < dn + 2 || strcmp(h + n - dn, domain) != 0 || h[n - dn - 1] != '.')
        return false;
    h[n - dn - 1] = '\0';
    if (strchr(h, '.'))
        return false;
    char *dash = strrchr(h, '-');
    if (!dash || !dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1) ||
        strlen(dash + 1) > 5)
        return false;
    *dash = '\0';
    long v = strtol(dash + 1, NULL, 10);
    if (v < 1 || v > 65535 || dash[1] == '0' || !sl_id_valid(h, "i-") || strlen(h) >= SL_ID_MAX)
        return false;
    snprintf(id, SL_ID_MAX, "%s", h);
    *port = v;
    return true;
}

bool ports_uri_token(const char *uri, char *out, size_t size)
{
    const char *q = uri ? strchr(uri, '?') : NULL;
    size_t klen = strlen(PORTS_QUERY);

    while (q) {
        q++;
        if (strncmp(q, PORTS_QUERY, klen) == 0 && q[klen] == '=') {
            const char *v = q + klen + 1;
            size_t n = strcspn(v, "&#");
            if (n == 0 || n >= size)
                return false;
            memcpy(out, v, n);
            out[n] = '\0';
            return true;
        }
        q = strchr(q, '&');
    }
    return false;
}

char *ports_url(const struct server_config *cfg, const char *id, int64_t port)
{
    if (cfg->services_proxy_port == 80)
        return xasprintf("http://%s-%" PRId64 ".%s/", id, port, cfg->services_domain);
    return xasprintf("http://%s-%" PRId64 ".%s:%" PRId64 "/", id, port, cfg->services_domain,
                     cfg->services_proxy_port);
}

int ports_insert(struct store *st, const char *id, int64_t port, bool public, const char *app,
                 struct sl_error *err)
{
    char token[PORTS_TOKEN_HEX], app_token[PORTS_TOKEN_HEX] = "";

    sl_random_hex(token, (PORTS_TOKEN_HEX - 1) / 2);
    if (*app)
        sl_random_hex(app_token, (PORTS_TOKEN_HEX - 1) / 2);
    return store_exec(st,
                      "INSERT INTO instance_ports (instance_id, port, public, created_at, token,"
                      " app, app_token) VALUES (?1, ?2, ?7, ?3, ?4, ?5, ?6)"
                      " ON CONFLICT (instance_id, port) DO NOTHING",
                      DB_ARGS(DB_TEXT(id), DB_INT(port), DB_INT(sl_time_now()), DB_TEXT(token),
                              DB_TEXT(app), DB_TEXT(app_token), DB_INT(public)),
                      err) < 0
               ? -1
               : 0;
}

int ports_create_defaults(struct server *srv, const char *id, const char *image,
                          struct sl_error *err)
{
    int64_t ports[PORTS_MAX], jupyter;
    size_t n;

    if (ports_parse_list(srv->cfg.services_ports, ports, PORTS_MAX, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (ports_insert(srv->store, id, ports[i], false, "", err) < 0)
            return -1;
    if (store_get_int(srv->store,
                      "SELECT COUNT(*) FROM images WHERE name = ?1 AND recipe = '" PORTS_RECIPE_APP
                      "'",
                      DB_ARGS(DB_TEXT(image)), &jupyter, err) < 0)
        return -1;
    if (!jupyter)
        return 0;
    /* Jupyter's port is the image's: it replaces a default port of that number */
    if (store_exec(srv->store, "DELETE FROM instance_ports WHERE instance_id = ?1 AND port = ?2",
                   DB_ARGS(DB_TEXT(id), DB_INT(srv->cfg.services_jupyter_port)), err) < 0)
        return -1;
    return ports_insert(srv->store, id, srv->cfg.services_jupyter_port, false, PORTS_RECIPE_APP,
                        err);
}

static json_t *service_json(struct server *srv, const char *id, struct db_rows *rows)
{
    int64_t port = db_int(rows, 0);
    cleanup_free char *url = ports_url(&srv->cfg, id, port);
    cleanup_free char *access =
        xasprintf("%s?" PORTS_QUERY "=%s", url, db_text(rows, 2)); /* token is hex */
    return json_pack("{s:I, s:b, s:s, s:s, s:s, s:o}", "port", (json_int_t)port, "public",
                     (int)db_int(rows, 1), "app", db_text(rows, 3), "url", url, "access_url",
                     access, "created_at", api_time(db_int(rows, 5)));
}

int ports_instance_json(struct server *srv, json_t *inst, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(inst, "id"));
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT port, public, token, app, app_token, created_at FROM instance_ports"
                    " WHERE instance_id = ?1 ORDER BY port",
                    DB_ARGS(DB_TEXT(id)), err);
    json_t *services = json_array(), *jupyter = json_null();
    int rc;

    if (!rows) {
        json_decref(services);
        return -1;
    }
    while ((rc = db_next(rows, err)) == 1) {
        json_array_append_new(services, service_json(srv, id, rows));
        if (strcmp(db_text(rows, 3), PORTS_RECIPE_APP) == 0 && json_is_null(jupyter)) {
            cleanup_free char *url = ports_url(&srv->cfg, id, db_int(rows, 0));
            cleanup_free char *link = xasprintf("%stree?token=%s&" PORTS_QUERY "=%s", url,
                                                db_text(rows, 4), db_text(rows, 2));
            jupyter = json_pack("{s:I, s:s}", "port", (json_int_t)db_int(rows, 0), "url", link);
        }
    }
    json_object_set_new(inst, "services", services);
    json_object_set_new(inst, "jupyter", jupyter);
    return rc < 0 ? -1 : 0;
}

int ports_desired(struct server *srv, json_t *items, struct sl_error *err)
{
    size_t i;
    json_t *item;

    json_array_foreach(items, i, item)
    {
        const char *id = json_string_value(json_object_get(item, "id"));
        cleanup_rows struct db_rows *rows = store_query(
            srv->store,
            "SELECT port, app, app_token FROM instance_ports WHERE instance_id = ?1 ORDER BY port",
            DB_ARGS(DB_TEXT(id)), err);
        json_t *ports = json_array();
        int rc;
        if (!rows) {
            json_decref(ports);
            return -1;
        }
        while ((rc = db_next(rows, err)) == 1) {
            json_t *p = json_pack("{s:I}", "port", (json_int_t)db_int(rows, 0));
            if (*db_text(rows, 1)) {
                json_object_set_new(p, "app", json_string(db_text(rows, 1)));
                json_object_set_new(p, "app_token", json_string(db_text(rows, 2)));
            }
            json_array_append_new(ports, p);
        }
        json_object_set_new(item, "ports", ports);
        if (rc < 0)
            return -1;
    }
    return 0;
}

int ports_authorize(struct server *srv, const struct ports_request *rq, enum ports_verdict *out,
                    char *token, const char **why, struct sl_error *err)
{
    char id[SL_ID_MAX], link_token[PORTS_TOKEN_HEX];
    int64_t port, now = sl_time_now();
    const char *dummy;
    int rc;

    if (!why)
        why = &dummy;
    *out = PORTS_FORBIDDEN;
    *why = "no such service";
    if (!ports_parse_host(rq->host, srv->cfg.services_domain, id, &port))
        return 0;
    cleanup_rows struct db_rows *rows = store_query(
        srv->store,
        "SELECT i.user_id, i.state, p.public, p.token, i.last_http_at FROM instances i"
        " JOIN instance_ports p ON p.instance_id = i.id AND p.port = ?2 WHERE i.id = ?1",
        DB_ARGS(DB_TEXT(id), DB_INT(port)), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    const char *state = rc ? db_text(rows, 1) : "";
    if (rc == 0 || strcmp(state, "released") == 0 || strcmp(state, "releasing") == 0)
        return 0;
    bool has_link = ports_uri_token(rq->uri, link_token, sizeof(link_token));
    const char *want = db_text(rows, 3);
    if (db_int(rows, 2)) {
        *out = PORTS_PASS;
    } else if (rq->user_id && strcmp(rq->user_id, db_text(rows, 0)) == 0) {
        *out = PORTS_PASS;
    } else if (has_link && *want && sl_secret_equal(link_token, want)) {
        *out = PORTS_PASS_COOKIE;
        snprintf(token, PORTS_TOKEN_HEX, "%s", want);
    } else if (!has_link && rq->cookie_token && *want && sl_secret_equal(rq->cookie_token, want)) {
        *out = PORTS_PASS;
    } else if (rq->user_id && !has_link && !rq->cookie_token) {
        *out = PORTS_FORBIDDEN;
        *why = "this service belongs to another renter";
        return 0;
    } else {
        *out = PORTS_UNAUTHENTICATED;
        *why = has_link || rq->cookie_token ? "the access token is not valid for this service"
                                            : "open the service's access link first (suanli "
                                              "show ID)";
        return 0;
    }
    int64_t last = db_null(rows, 4) ? 0 : db_int(rows, 4);
    db_rows_free(TAKE_PTR(rows));
    if (now - last >= LAST_HTTP_RESOLUTION)
        store_exec(srv->store, "UPDATE instances SET last_http_at = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(now)), NULL);
    return 0;
}
