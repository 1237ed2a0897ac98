#include "ports.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "api.h"
#include "secrets.h"
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
    if (ports_check(cfg->services_desktop_port, err) < 0) {
        sl_error_prefix(err, "option 'services.desktop_port'");
        return -1;
    }
    return 0;
}

/* LABEL.DOMAIN of host (any case, a port and a final dot allowed) into
 * label (lowercase, 256 bytes); false when host is not in domain or the
 * label has a dot. */
static bool host_label(const char *host, const char *domain, char *h)
{
    size_t n = strcspn(host ? host : "", ":");
    size_t dn = strlen(domain);

    if (!host || n == 0 || n >= 256)
        return false;
    for (size_t i = 0; i < n; i++)
        h[i] = (char)tolower((unsigned char)host[i]);
    h[n] = '\0';
    if (n > 0 && h[n - 1] == '.') /* a fully qualified "name." */
        h[--n] = '\0';
    if (n < dn + 2 || strcmp(h + n - dn, domain) != 0 || h[n - dn - 1] != '.')
        return false;
    h[n - dn - 1] = '\0';
    return strchr(h, '.') == NULL;
}

/* ID-LABEL.DOMAIN's ID into id (SL_ID_MAX); false for any other host. */
static bool parse_labelled_host(const char *host, const char *domain, const char *label, char *id)
{
    char h[256];

    if (!host_label(host, domain, h))
        return false;
    size_t n = strlen(h), ln = strlen(label);
    if (n <= ln + 1 || h[n - ln - 1] != '-' || strcmp(h + n - ln, label) != 0)
        return false;
    h[n - ln - 1] = '\0';
    if (!sl_id_valid(h, "i-") || strlen(h) >= SL_ID_MAX)
        return false;
    memcpy(id, h, strlen(h) + 1); /* shorter than SL_ID_MAX: checked above */
    return true;
}

bool ports_parse_terminal_host(const char *host, const char *domain, char *id)
{
    return parse_labelled_host(host, domain, PORTS_TERMINAL_LABEL, id);
}

bool ports_parse_files_host(const char *host, const char *domain, char *id)
{
    return parse_labelled_host(host, domain, PORTS_FILES_LABEL, id);
}

char *ports_files_url(const struct server_config *cfg, const char *id)
{
    if (cfg->services_proxy_port == 80)
        return xasprintf("http://%s-" PORTS_FILES_LABEL ".%s/", id, cfg->services_domain);
    return xasprintf("http://%s-" PORTS_FILES_LABEL ".%s:%" PRId64 "/", id, cfg->services_domain,
                     cfg->services_proxy_port);
}

char *ports_terminal_url(const struct server_config *cfg, const char *id)
{
    if (cfg->services_proxy_port == 80)
        return xasprintf("ws://%s-" PORTS_TERMINAL_LABEL ".%s/", id, cfg->services_domain);
    return xasprintf("ws://%s-" PORTS_TERMINAL_LABEL ".%s:%" PRId64 "/", id, cfg->services_domain,
                     cfg->services_proxy_port);
}

bool ports_parse_host(const char *host, const char *domain, char *id, int64_t *port)
{
    char h[256];

    /* LABEL "." DOMAIN, LABEL = ID "-" PORT */
    if (!host_label(host, domain, h))
        return false;
    char *dash = strrchr(h, '-');
    if (!dash || !dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1) ||
        strlen(dash + 1) > 5)
        return false;
    *dash = '\0';
    long v = strtol(dash + 1, NULL, 10);
    if (v < 1 || v > 65535 || dash[1] == '0' || !sl_id_valid(h, "i-") || strlen(h) >= SL_ID_MAX)
        return false;
    memcpy(id, h, strlen(h) + 1); /* shorter than SL_ID_MAX: checked above */
    *port = v;
    return true;
}

/* http://ID-PORT.DOMAIN[:PROXY_PORT]/; the caller frees it. */
static char *ports_url(const struct server_config *cfg, const char *id, int64_t port)
{
    if (cfg->services_proxy_port == 80)
        return xasprintf("http://%s-%" PRId64 ".%s/", id, port, cfg->services_domain);
    return xasprintf("http://%s-%" PRId64 ".%s:%" PRId64 "/", id, port, cfg->services_domain,
                     cfg->services_proxy_port);
}

/* The sealing contexts: a sealed token moved to another row does not open. */
static char *token_context(const char *column, const char *id, int64_t port)
{
    return xasprintf("%s:%s:%" PRId64, column, id, port);
}

static char *seal(struct server *srv, const char *column, const char *id, int64_t port,
                  const char *plaintext)
{
    if (!*plaintext)
        return xstrdup("");
    cleanup_free char *context = token_context(column, id, port);
    return secrets_seal(srv, context, plaintext);
}

/* The plaintext of a stored token; NULL with err filled when it does not
 * open (the log has the details, the caller a 500). */
static char *unseal(struct server *srv, const char *column, const char *id, int64_t port,
                    const char *stored, struct sl_error *err)
{
    cleanup_free char *context = token_context(column, id, port);
    return secrets_open(srv, context, stored, err);
}

int ports_insert(struct server *srv, const char *id, int64_t port, bool public, const char *app,
                 struct sl_error *err)
{
    char token[PORTS_TOKEN_HEX], app_token[PORTS_TOKEN_HEX] = "";

    sl_random_hex(token, (PORTS_TOKEN_HEX - 1) / 2);
    if (*app)
        sl_random_hex(app_token, (PORTS_TOKEN_HEX - 1) / 2);
    cleanup_free char *sealed = seal(srv, "port_token", id, port, token);
    cleanup_free char *app_sealed = seal(srv, "app_token", id, port, app_token);
    return store_exec(srv->store,
                      "INSERT INTO instance_ports (instance_id, port, public, created_at, token,"
                      " app, app_token) VALUES (?1, ?2, ?7, ?3, ?4, ?5, ?6)"
                      " ON CONFLICT (instance_id, port) DO NOTHING",
                      DB_ARGS(DB_TEXT(id), DB_INT(port), DB_INT(sl_time_now()), DB_TEXT(sealed),
                              DB_TEXT(app), DB_TEXT(app_sealed), DB_INT(public)),
                      err) < 0
               ? -1
               : 0;
}

int ports_seal_stored(struct server *srv, struct sl_error *err)
{
    struct store *st = srv->store;
    cleanup_tx struct store *tx = NULL;
    int64_t done = 0;
    int rc;

    if (secrets_rewrite_begin(st, err) < 0)
        return -1;
    tx = st;
    {
        cleanup_rows struct db_rows *rows =
            store_query(st,
                        "SELECT instance_id, port, token, app_token FROM instance_ports WHERE"
                        " (token <> '' AND token NOT LIKE '" SECRETS_PREFIX "%') OR"
                        " (app_token <> '' AND app_token NOT LIKE '" SECRETS_PREFIX "%')",
                        DB_NO_ARGS, err);
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            const char *id = db_text(rows, 0), *token = db_text(rows, 2), *app = db_text(rows, 3);
            int64_t port = db_int(rows, 1);
            cleanup_free char *sealed = secrets_is_sealed(token)
                                            ? xstrdup(token)
                                            : seal(srv, "port_token", id, port, token);
            cleanup_free char *app_sealed =
                secrets_is_sealed(app) ? xstrdup(app) : seal(srv, "app_token", id, port, app);
            if (store_exec(st,
                           "UPDATE instance_ports SET token = ?3, app_token = ?4 WHERE"
                           " instance_id = ?1 AND port = ?2",
                           DB_ARGS(DB_TEXT(id), DB_INT(port), DB_TEXT(sealed), DB_TEXT(app_sealed)),
                           err) < 0)
                return -1;
            done++;
        }
        if (rc < 0)
            return -1;
    }
    if (store_commit(st, err) < 0)
        return -1;
    tx = NULL;
    if (!done)
        return 0;
    if (secrets_scrub_log(st, err) < 0)
        return -1;
    log_info("sealed the tokens of %" PRId64 " service ports stored in plaintext", done);
    return 0;
}

int ports_create_defaults(struct server *srv, const char *id, const char *image,
                          struct sl_error *err)
{
    int64_t ports[PORTS_MAX];
    size_t n;

    if (ports_parse_list(srv->cfg.services_ports, ports, PORTS_MAX, &n, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (ports_insert(srv, id, ports[i], false, "", err) < 0)
            return -1;
    /* the recipes whose image serves an app on a port of its own */
    const struct {
        const char *recipe;
        int64_t port;
    } apps[] = {
        { PORTS_RECIPE_APP, srv->cfg.services_jupyter_port },
        { PORTS_DESKTOP_APP, srv->cfg.services_desktop_port },
    };
    for (size_t i = 0; i < ARRAY_SIZE(apps); i++) {
        int64_t found;
        if (store_get_int(srv->store, "SELECT COUNT(*) FROM images WHERE name = ?1 AND recipe = ?2",
                          DB_ARGS(DB_TEXT(image), DB_TEXT(apps[i].recipe)), &found, err) < 0)
            return -1;
        if (!found)
            continue;
        /* the app's port is the image's: it replaces a default port of that number */
        if (store_exec(srv->store,
                       "DELETE FROM instance_ports WHERE instance_id = ?1 AND port = ?2",
                       DB_ARGS(DB_TEXT(id), DB_INT(apps[i].port)), err) < 0 ||
            ports_insert(srv, id, apps[i].port, false, apps[i].recipe, err) < 0)
            return -1;
    }
    return 0;
}

static json_t *service_json(struct server *srv, const char *id, struct db_rows *rows,
                            const char *token)
{
    int64_t port = db_int(rows, 0);
    cleanup_free char *url = ports_url(&srv->cfg, id, port);
    cleanup_free char *access = xasprintf("%s?" PORTS_QUERY "=%s", url, token); /* token is hex */
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
    cleanup_json json_t *services = json_array();
    cleanup_json json_t *jupyter = json_null();
    cleanup_json json_t *desktop = json_null();
    int rc;

    if (!rows)
        return -1;
    while ((rc = db_next(rows, err)) == 1) {
        int64_t port = db_int(rows, 0);
        cleanup_free char *token = unseal(srv, "port_token", id, port, db_text(rows, 2), err);
        if (!token)
            return -1;
        json_array_append_new(services, service_json(srv, id, rows, token));
        if (strcmp(db_text(rows, 3), PORTS_RECIPE_APP) == 0 && json_is_null(jupyter)) {
            cleanup_free char *app_token =
                unseal(srv, "app_token", id, port, db_text(rows, 4), err);
            if (!app_token)
                return -1;
            cleanup_free char *url = ports_url(&srv->cfg, id, port);
            cleanup_free char *link =
                xasprintf("%stree?token=%s&" PORTS_QUERY "=%s", url, app_token, token);
            json_decref(jupyter);
            jupyter = json_pack("{s:I, s:s}", "port", (json_int_t)port, "url", link);
        }
        if (strcmp(db_text(rows, 3), PORTS_DESKTOP_APP) == 0 && json_is_null(desktop)) {
            cleanup_free char *app_token =
                unseal(srv, "app_token", id, port, db_text(rows, 4), err);
            if (!app_token)
                return -1;
            /* noVNC connects at once; the VNC password (the app token's
             * first 8 digits, boot.h) rides in the fragment, which the
             * browser never sends: noVNC reads it from there */
            cleanup_free char *url = ports_url(&srv->cfg, id, port);
            cleanup_free char *link =
                xasprintf("%svnc.html?autoconnect=1&resize=remote&" PORTS_QUERY "=%s#password=%.8s",
                          url, token, app_token);
            json_decref(desktop);
            desktop = json_pack("{s:I, s:s}", "port", (json_int_t)port, "url", link);
        }
    }
    if (rc < 0)
        return -1;
    json_object_set_new(inst, "services", TAKE_PTR(services));
    json_object_set_new(inst, "jupyter", TAKE_PTR(jupyter));
    json_object_set_new(inst, "desktop", TAKE_PTR(desktop));
    return 0;
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
        cleanup_json json_t *ports = json_array();
        int rc;
        if (!rows)
            return -1;
        while ((rc = db_next(rows, err)) == 1) {
            int64_t port = db_int(rows, 0);
            json_t *p = json_pack("{s:I}", "port", (json_int_t)port);
            json_array_append_new(ports, p);
            if (!*db_text(rows, 1))
                continue;
            /* the node starts the app with its token: it needs the plaintext */
            cleanup_free char *app_token =
                unseal(srv, "app_token", id, port, db_text(rows, 2), err);
            if (!app_token)
                return -1;
            json_object_set_new(p, "app", json_string(db_text(rows, 1)));
            json_object_set_new(p, "app_token", json_string(app_token));
        }
        if (rc < 0)
            return -1;
        json_object_set_new(item, "ports", TAKE_PTR(ports));
    }
    return 0;
}

/* The user whose unexpired session token is token, into user_id; 0 when
 * none. Sessions only: the cookie is the console's. */
static int session_user(struct store *st, const char *token, char *user_id, struct sl_error *err)
{
    char hash[SL_HASH_HEX_MAX];
    int rc;

    sl_sha256_hex(token, strlen(token), hash);
    cleanup_rows struct db_rows *rows =
        store_query(st,
                    "SELECT user_id FROM tokens WHERE hash = ?1 AND kind = 'session' AND"
                    " (expires_at IS NULL OR expires_at > ?2)",
                    DB_ARGS(DB_TEXT(hash), DB_INT(sl_time_now())), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 1)
        snprintf(user_id, SL_ID_MAX, "%s", db_text(rows, 0));
    return rc;
}

/* A browser may hold several cookies of one name (host-only and a parent
 * domain's, other paths); a sibling service could add some of its own to
 * lock the owner out. Each is tried, a few at most. */
#define COOKIES_TRIED 4

int ports_authorize(struct server *srv, const struct ports_request *rq, enum ports_verdict *out,
                    char *token, const char **why, struct sl_error *err)
{
    char id[SL_ID_MAX], link_token[PORTS_TOKEN_HEX], user_id[SL_ID_MAX];
    char sessions[COOKIES_TRIED][PORTS_VALUE_MAX], tokens[COOKIES_TRIED][PORTS_VALUE_MAX];
    int64_t port, now = sl_time_now();
    const char *dummy;
    bool other_session = false;
    int rc;

    if (!why)
        why = &dummy;
    *out = PORTS_FORBIDDEN;
    *why = "no such service";
    if (!ports_parse_host(rq->host, srv->cfg.services_domain, id, &port))
        return 0;
    cleanup_rows struct db_rows *rows =
        store_query(srv->store,
                    "SELECT i.user_id, i.state, p.public, p.token, i.last_http_at, i.node_id"
                    " FROM instances i JOIN instance_ports p ON p.instance_id = i.id AND"
                    " p.port = ?2 WHERE i.id = ?1",
                    DB_ARGS(DB_TEXT(id), DB_INT(port)), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    const char *state = rc ? db_text(rows, 1) : "";
    /* another node's instance is no service of the asking node's */
    if (rc == 0 || strcmp(state, "released") == 0 || strcmp(state, "releasing") == 0 ||
        db_null(rows, 5) || !rq->node_id || strcmp(db_text(rows, 5), rq->node_id) != 0)
        return 0;
    cleanup_free char *want = unseal(srv, "port_token", id, port, db_text(rows, 3), err);
    if (!want)
        return -1;
    bool has_link = ports_uri_token(rq->uri, link_token, sizeof(link_token));
    bool cookies = ports_cookies_count(rq->method, rq->fetch_site, rq->fetch_mode);
    size_t n_sessions =
        cookies ? ports_cookie_values(rq->cookie, PORTS_SESSION_COOKIE, sessions, COOKIES_TRIED)
                : 0;
    size_t n_tokens =
        cookies ? ports_cookie_values(rq->cookie, PORTS_COOKIE, tokens, COOKIES_TRIED) : 0;
    bool pass = db_int(rows, 2) != 0; /* public */
    for (size_t i = 0; !pass && i < n_sessions; i++) {
        if ((rc = session_user(srv->store, sessions[i], user_id, err)) < 0)
            return -1;
        if (rc == 1 && strcmp(user_id, db_text(rows, 0)) == 0)
            pass = true;
        else if (rc == 1)
            other_session = true;
    }
    if (pass) {
        *out = PORTS_PASS;
    } else if (has_link && *want && sl_secret_equal(link_token, want)) {
        *out = PORTS_PASS_COOKIE;
        snprintf(token, PORTS_TOKEN_HEX, "%s", want);
    } else {
        for (size_t i = 0; !has_link && i < n_tokens; i++)
            if (*want && sl_secret_equal(tokens[i], want))
                pass = true;
        if (pass) {
            *out = PORTS_PASS;
        } else if (other_session && !has_link && !n_tokens) {
            *why = "this service belongs to another renter";
            return 0;
        } else {
            *out = PORTS_UNAUTHENTICATED;
            *why = has_link || n_tokens ? "the access token is not valid for this service"
                   : cookies            ? "open the service's access link first (suanli show ID)"
                                        : "a request from another site does not sign in with this "
                                          "service's cookies: open the service itself";
            return 0;
        }
    }
    int64_t last = db_null(rows, 4) ? 0 : db_int(rows, 4);
    db_rows_free(TAKE_PTR(rows));
    if (now - last >= LAST_HTTP_RESOLUTION)
        store_exec(srv->store, "UPDATE instances SET last_http_at = ?2 WHERE id = ?1",
                   DB_ARGS(DB_TEXT(id), DB_INT(now)), NULL);
    return 0;
}
