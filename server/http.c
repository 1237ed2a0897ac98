#include "http.h"
#include "api.h"
#include "auth.h"
#include "console.h"
#include "desired-wait.h"
#include "event-stream.h"

#include "../lib/cleanup.h"
#include "../lib/conn-guard.h"
#include "../lib/log.h"
#include "../lib/netaddr.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <sodium.h>
#include <fcntl.h>
#include <errno.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <inttypes.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

struct http_server {
    struct MHD_Daemon *daemon;
    struct server *srv;
    struct sl_net_list trusted; /* http.trusted_proxies */
    struct sl_conn_guard *guard;
    struct desired_waits *waits;   /* agents' long-polls, suspended (desired-wait.h) */
    struct event_streams *streams; /* GET /v1/events/stream (event-stream.h) */
    char *console_dir;             /* console.dir, or its default (console.h) */
};

struct conn_state {
    struct sl_buf body;
    bool too_large;
    int64_t started_us;
    /* API_UPLOAD: the body goes to a file in DATA/uploads as it arrives */
    int upload_fd;
    char *upload_path;
    uint64_t upload_len;
    crypto_hash_sha256_state sha;
    bool upload_failed;
    bool waited;  /* suspended once for a long-poll: the next dispatch answers */
    bool console; /* a console GET or HEAD without a body, answered on the next call */
};

static const char *lookup(void *ctx, enum MHD_ValueKind kind, const char *name)
{
    return MHD_lookup_connection_value(ctx, kind, name);
}

static const char *io_header(void *ctx, const char *name)
{
    return lookup(ctx, MHD_HEADER_KIND, name);
}

static const char *io_query(void *ctx, const char *name)
{
    return lookup(ctx, MHD_GET_ARGUMENT_KIND, name);
}

static const char *io_cookie(void *ctx, const char *name)
{
    return lookup(ctx, MHD_COOKIE_KIND, name);
}

/* Who is asking, as far as this connection can tell (docs/design/
 * control-plane.md, "Client addresses"). */
struct client {
    char peer[SL_ADDR_TEXT_MAX];
    char addr[SL_ADDR_TEXT_MAX]; /* the peer, or what a trusted proxy says */
    bool https;                  /* a trusted proxy says the client used https */
    const char *forwarded_host;  /* a trusted proxy's X-Forwarded-Host */
};

struct last_value {
    const char *name;
    const char *value;
};

static enum MHD_Result keep_last(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    struct last_value *lv = cls;
    (void)kind;

    if (key && value && strcasecmp(key, lv->name) == 0)
        lv->value = value;
    return MHD_YES;
}

/* The client behind the trusted proxies of X-Forwarded-For: walking from
 * the right (the entry our own proxy added), the first address that is not
 * a trusted proxy. A malformed entry ends the walk: what is left of it was
 * written by the client and proves nothing. */
static void forwarded_for(struct http_server *h, const char *xff, char *addr)
{
    cleanup_free char *copy = xstrdup(xff);
    char *end = copy + strlen(copy);

    while (end > copy) {
        char *start = end;
        while (start > copy && start[-1] != ',')
            start--;
        *end = '\0';
        char *entry = start + strspn(start, " \t");
        size_t n = strlen(entry);
        while (n > 0 && (entry[n - 1] == ' ' || entry[n - 1] == '\t'))
            entry[--n] = '\0';
        if (!sl_addr_valid(entry))
            return;
        snprintf(addr, SL_ADDR_TEXT_MAX, "%s", entry);
        if (!sl_net_list_has_text(&h->trusted, entry))
            return;
        end = start > copy ? start - 1 : copy;
    }
}

static void client_of(struct http_server *h, struct MHD_Connection *conn, struct client *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;

    memset(c, 0, sizeof(*c));
    sl_addr_format(sa, c->peer);
    snprintf(c->addr, sizeof(c->addr), "%s", c->peer);
    if (!h->trusted.n || !sl_net_list_has(&h->trusted, sa))
        return;
    struct last_value xff = { "X-Forwarded-For", NULL };
    MHD_get_connection_values(conn, MHD_HEADER_KIND, keep_last, &xff);
    if (xff.value)
        forwarded_for(h, xff.value, c->addr);
    const char *proto = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Forwarded-Proto");
    c->https = proto && strncasecmp(proto + strspn(proto, " \t"), "https", 5) == 0;
    c->forwarded_host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Forwarded-Host");
}

static void add_headers(struct MHD_Response *r, const char *lines)
{
    const char *p = lines;

    while (*p) {
        const char *eol = strstr(p, "\r\n"), *colon = strchr(p, ':');
        if (!eol || !colon || colon > eol)
            break;
        cleanup_free char *name = xstrndup(p, (size_t)(colon - p));
        cleanup_free char *value = xstrndup(colon + 2, (size_t)(eol - colon - 2));
        MHD_add_response_header(r, name, value);
        p = eol + 2;
    }
}

static enum MHD_Result send_response(struct MHD_Connection *conn, struct api_response *res)
{
    const char *ctype;
    size_t len;
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (res->file_fd >= 0) {
        /* MHD owns the descriptor from here and closes it */
        r = MHD_create_response_from_fd_at_offset64(res->file_size, res->file_fd, res->file_offset);
        res->file_fd = -1;
        ctype = "application/octet-stream";
    } else {
        char *body = api_response_body(res, &len, &ctype);
        r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    }

    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    add_headers(r, res->headers.data);
    ret = MHD_queue_response(conn, (unsigned)res->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, int status, const char *code,
                                  const char *message)
{
    struct api_response res;
    enum MHD_Result ret;

    api_response_init(&res);
    api_reply(&res, status, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message));
    ret = send_response(conn, &res);
    api_response_release(&res);
    return ret;
}

/* The answer to an upload the server could not store (the details are in
 * the log); on_completed removes what was written of it. */
static enum MHD_Result upload_failed(struct MHD_Connection *conn)
{
    return send_error(conn, 507, "upload_failed",
                      "the server could not store the archive: its disk may be full; the "
                      "operator has the details in the log");
}

/* An upload route: only an admin may send (checked before a byte of the
 * body is read), and the body is written to DATA/uploads/.upload-XXXXXX. */
static enum MHD_Result start_upload(struct http_server *h, struct MHD_Connection *conn,
                                    struct conn_state *cs, const char *method, const char *url,
                                    const struct api_route *route)
{
    struct sl_error err = SL_ERROR_INIT;
    struct api_request req = {
        .srv = h->srv,
        .method = method,
        .path = url,
        .route = route,
        .io = { .header = io_header, .query = io_query, .cookie = io_cookie, .ctx = conn },
    };
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");

    bool node_route = route->flags & API_NODE;
    if (auth_authenticate(&req, &err) < 0 ||
        (!req.caller.authenticated && !(node_route && req.caller.node_id[0])))
        return send_error(conn, 401, err.code[0] ? err.code : "unauthenticated",
                          "log in first: send 'Authorization: Bearer TOKEN' (suanli login)");
    if (req.caller.via_cookie)
        return send_error(conn, 403, "origin_not_allowed",
                          "upload with 'Authorization: Bearer TOKEN' (suanli admin image import), "
                          "not the session cookie");
    if (node_route) {
        /* a node agent's upload (a saved image's layer): to its own path
         * only; the handler checks the rest */
        if (!req.caller.node_id[0]) /* a renter's token is no node's, as elsewhere */
            return send_error(conn, 401, "unauthenticated",
                              "this route is a node agent's: its own node token only");
        cleanup_free char *own = xasprintf("/v1/nodes/%s/", req.caller.node_id);
        if (strncmp(url, own, strlen(own)) != 0)
            return send_error(conn, 404, "not_found", "no such route");
    } else if (!req.caller.admin) {
        return send_error(conn, 404, "not_found", "no such route");
    }
    if (cl && strtoull(cl, NULL, 10) > (uint64_t)h->srv->cfg.max_upload_bytes) {
        cs->too_large = true;
        return send_error(conn, 413, "body_too_large",
                          "the archive is over images.max_upload_bytes");
    }
    cleanup_free char *dir = xasprintf("%s/uploads", h->srv->cfg.data_dir);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        log_error("upload: unable to create '%s': %s", dir, strerror(errno));
        return upload_failed(conn);
    }
    cs->upload_path = xasprintf("%s/.upload-XXXXXX", dir);
    cs->upload_fd = mkostemp(cs->upload_path, O_CLOEXEC);
    if (cs->upload_fd < 0) {
        log_error("upload: unable to create a file in '%s': %s", dir, strerror(errno));
        free(cs->upload_path);
        cs->upload_path = NULL;
        return upload_failed(conn);
    }
    crypto_hash_sha256_init(&cs->sha);
    return MHD_YES;
}

static void upload_chunk(struct http_server *h, struct conn_state *cs, const char *data, size_t len)
{
    if (cs->upload_failed)
        return;
    if (cs->upload_len + len > (uint64_t)h->srv->cfg.max_upload_bytes) {
        cs->upload_failed = cs->too_large = true;
        return;
    }
    crypto_hash_sha256_update(&cs->sha, (const unsigned char *)data, len);
    for (size_t done = 0; done < len;) {
        ssize_t n = write(cs->upload_fd, data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            log_error("upload: write to '%s': %s", cs->upload_path, strerror(errno));
            cs->upload_failed = true;
            return;
        }
        done += (size_t)n;
    }
    cs->upload_len += len;
}

static void resume_connection(void *conn)
{
    MHD_resume_connection(conn);
}

/* The console's security headers, its connect-src naming the files hosts
 * of the services domain too (server/files.h: the File storage page
 * lists, uploads and downloads there), when the domain is a plain one. */
static void add_console_headers(struct http_server *h, struct MHD_Response *r)
{
    static const char at[] = "connect-src 'self' ws: wss:";
    const char *domain = h->srv->cfg.services_domain;
    int64_t port = h->srv->cfg.services_proxy_port;
    const char *p = strstr(console_security_headers, at);

    if (!p || !domain || !*domain ||
        strspn(domain, "abcdefghijklmnopqrstuvwxyz0123456789.-") != strlen(domain)) {
        add_headers(r, console_security_headers);
        return;
    }
    size_t n = (size_t)(p - console_security_headers) + sizeof(at) - 1;
    cleanup_free char *source = port == 80 ? xasprintf(" http://*.%s", domain)
                                           : xasprintf(" http://*.%s:%" PRId64, domain, port);
    cleanup_free char *lines = xasprintf("%.*s%s%s", (int)n, console_security_headers, source,
                                         console_security_headers + n);
    add_headers(r, lines);
}

/* A console page or asset (console.h), answered before any body is read. */
static enum MHD_Result serve_console(struct http_server *h, struct MHD_Connection *conn,
                                     const char *url, const char *method, int64_t started_us)
{
    struct console_reply cr;
    struct MHD_Response *r;

    console_resolve(h->console_dir, method, url,
                    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept-Encoding"),
                    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match"), &cr);
    if (cr.fd >= 0)
        r = MHD_create_response_from_fd64(cr.size, cr.fd); /* MHD closes it */
    else
        r = MHD_create_response_from_buffer(cr.status == 304 ? 0 : strlen(cr.body),
                                            (void *)(cr.body ? cr.body : ""),
                                            MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (cr.fd >= 0)
            close(cr.fd);
        return MHD_NO;
    }
    if (cr.status != 304)
        MHD_add_response_header(r, "Content-Type", cr.content_type);
    MHD_add_response_header(r, "Cache-Control", cr.cache_control);
    if (cr.content_encoding)
        MHD_add_response_header(r, "Content-Encoding", cr.content_encoding);
    if (cr.vary)
        MHD_add_response_header(r, "Vary", "Accept-Encoding");
    if (cr.etag[0])
        MHD_add_response_header(r, "ETag", cr.etag);
    if (cr.allow)
        MHD_add_response_header(r, "Allow", cr.allow);
    add_console_headers(h, r);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)cr.status, r);
    MHD_destroy_response(r);
    sl_log(cr.status < 400 ? SL_LOG_DEBUG : SL_LOG_INFO, "http %s %.200s %d %.1fms (console)",
           method, url, cr.status, (double)(sl_time_mono_us() - started_us) / SL_USEC_PER_MSEC);
    return ret;
}

/* An event stream's connection: the stream, and the connection to park. */
struct stream_conn {
    struct event_stream *stream;
    struct MHD_Connection *conn;
};

/* Whether a parked stream's client is still there: a closed or reset
 * socket shows at once, without writing to it. */
static bool connection_alive(void *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct pollfd p = { .fd = ci ? ci->connect_fd : -1, .events = POLLIN | POLLRDHUP };

    if (p.fd < 0 || poll(&p, 1, 0) < 0)
        return true;
    return !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct stream_conn *sc = cls;
    ssize_t n = event_stream_read(sc->stream, buf, max);
    (void)pos;

    if (n != 0)
        return n > 0 ? n : MHD_CONTENT_READER_END_OF_STREAM;
    /* nothing due: the connection waits parked, not a worker thread */
    MHD_suspend_connection(sc->conn);
    if (event_stream_park(sc->stream))
        MHD_resume_connection(sc->conn);
    return 0;
}

static void stream_free(void *cls)
{
    struct stream_conn *sc = cls;

    event_stream_close(sc->stream);
    free(sc);
}

/* Answers with the caller's event stream (api_response.stream). */
static enum MHD_Result start_stream(struct event_streams *streams, struct MHD_Connection *conn,
                                    struct api_response *res)
{
    struct sl_error err = SL_ERROR_INIT;
    struct stream_conn *sc = xzalloc(sizeof(*sc));

    sc->conn = conn;
    sc->stream = event_stream_open(streams, res->stream.user_id, res->stream.token_id,
                                   res->stream.resume ? &res->stream.from : NULL, resume_connection,
                                   connection_alive, conn, &err);
    if (!sc->stream) {
        free(sc);
        res->status = sl_error_http_status(err.kind);
        return send_error(conn, res->status, err.code, err.message);
    }
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, sc, stream_free);
    if (!r) {
        stream_free(sc);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* a proxy in front passes it on */
    enum MHD_Result ret = MHD_queue_response(conn, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct http_server *h = cls;
    struct conn_state *cs = *con_cls;
    size_t max = (size_t)h->srv->cfg.max_body_bytes;
    (void)version;

    if (!cs) {
        cs = xzalloc(sizeof(*cs));
        sl_buf_init(&cs->body);
        cs->started_us = sl_time_mono_us();
        cs->upload_fd = -1;
        *con_cls = cs;
        sl_conn_guard_request_started(conn); /* the headers are in */
        if (console_owns_path(url)) {
            /* answered at once, MHD closes the connection after: so only
             * what must not be read on (another method, a body) */
            bool bodyless =
                !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length") &&
                !MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
            if (bodyless && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)) {
                cs->console = true;
                return MHD_YES;
            }
            return serve_console(h, conn, url, method, cs->started_us);
        }
        const struct api_route *route = api_route_lookup(method, url);
        if (route && (route->flags & API_UPLOAD))
            return start_upload(h, conn, cs, method, url, route);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > max) {
            cs->too_large = true;
            /* answered before the body is read; MHD then closes the connection */
            char msg[128];
            snprintf(msg, sizeof(msg), "the request body is over %zu bytes", max);
            return send_error(conn, 413, "body_too_large", msg);
        }
        return MHD_YES;
    }
    if (cs->console)
        return serve_console(h, conn, url, method, cs->started_us);
    if (*upload_data_size && cs->upload_fd >= 0) {
        upload_chunk(h, cs, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!cs->too_large && cs->body.len + *upload_data_size <= max)
            sl_buf_add(&cs->body, upload_data, *upload_data_size);
        else
            cs->too_large = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cs->upload_fd >= 0 && !cs->upload_failed && fsync(cs->upload_fd) < 0) {
        log_error("upload: unable to sync '%s': %s", cs->upload_path, strerror(errno));
        cs->upload_failed = true;
    }
    if (cs->upload_failed && cs->too_large)
        return send_error(conn, 413, "body_too_large",
                          "the archive is over images.max_upload_bytes");
    if (cs->upload_failed)
        return upload_failed(conn);
    if (cs->too_large) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the request body is over %zu bytes", max);
        return send_error(conn, 413, "body_too_large", msg);
    }

    struct client client;
    client_of(h, conn, &client);
    struct api_request req = {
        .srv = h->srv,
        .method = method,
        .path = url,
        .body = cs->body.data,
        .body_len = cs->body.len,
        .remote_addr = client.addr,
        .https = client.https,
        .forwarded_host = client.forwarded_host,
        .io = { .header = io_header, .query = io_query, .cookie = io_cookie, .ctx = conn },
    };
    req.may_wait = !cs->waited && h->waits;
    struct event_streams *streams = __atomic_load_n(&h->streams, __ATOMIC_SEQ_CST);
    req.may_stream = streams != NULL;
    unsigned char digest[crypto_hash_sha256_BYTES];
    if (cs->upload_fd >= 0) {
        crypto_hash_sha256_final(&cs->sha, digest);
        sodium_bin2hex(req.upload_sha256, sizeof(req.upload_sha256), digest, sizeof(digest));
        req.upload_path = cs->upload_path;
        req.upload_size = cs->upload_len;
    }
    struct api_response res;
    api_response_init(&res);
    api_dispatch(&req, &res);
    struct desired_waits *waits = __atomic_load_n(&h->waits, __ATOMIC_SEQ_CST);
    if (res.wait.requested && waits) {
        /* no thread waits: the connection is put aside until the node's
         * desired state changes or the time is up, then dispatched again */
        cs->waited = true;
        MHD_suspend_connection(conn);
        desired_waits_add(waits, res.wait.node_id, res.wait.after,
                          sl_time_mono_ms() + res.wait.seconds * SL_MSEC_PER_SEC, resume_connection,
                          conn);
        api_response_release(&res);
        return MHD_YES;
    }
    enum MHD_Result ret = res.stream.requested && streams ? start_stream(streams, conn, &res)
                                                          : send_response(conn, &res);
    /* every call gets its line; the agents' polls only when asked for or failing */
    bool quiet = req.route && (req.route->flags & API_QUIET) && res.status < 400;
    bool proxied = strcmp(client.addr, client.peer) != 0;
    sl_log(quiet ? SL_LOG_DEBUG : SL_LOG_INFO, "http %s %s %d %.1fms ip=%s%s%s user=%s", method,
           url, res.status, (double)(sl_time_mono_us() - cs->started_us) / SL_USEC_PER_MSEC,
           client.addr, proxied ? " via=" : "", proxied ? client.peer : "",
           req.caller.authenticated ? req.caller.user_id
           : req.caller.node_id[0]  ? req.caller.node_id
                                    : "-");
    api_response_release(&res);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct conn_state *cs = *con_cls;
    (void)cls;
    (void)toe;

    /* a kept-alive connection has header_timeout for its next request */
    sl_conn_guard_request_done(conn);
    if (!cs)
        return;
    sl_buf_release(&cs->body);
    if (cs->upload_fd >= 0)
        close(cs->upload_fd);
    if (cs->upload_path)
        unlink(cs->upload_path); /* a handler that keeps it renamed it */
    free(cs->upload_path);
    free(cs);
    *con_cls = NULL;
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *len,
                        struct sl_error *err)
{
    char host[256];
    const char *colon;
    long port;
    char *end;

    memset(ss, 0, sizeof(*ss));
    if (listen[0] == '[') {
        const char *close = strchr(listen, ']');
        if (!close || close[1] != ':')
            goto bad;
        snprintf(host, sizeof(host), "%.*s", (int)(close - listen - 1), listen + 1);
        colon = close + 1;
    } else {
        colon = strrchr(listen, ':');
        if (!colon)
            goto bad;
        snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
    }
    port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 0 || port > 65535)
        goto bad;
    struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *len = sizeof(*in4);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*in6);
        return 0;
    }
bad:
    return sl_fail(err, SL_E_INVALID, "invalid_config",
                   "listen address '%s' is not HOST:PORT with a numeric host, such as "
                   "127.0.0.1:7070 or [::1]:7070",
                   listen);
}

static void guard_report(void *ctx, uint64_t refused, uint64_t timed_out)
{
    struct http_server *h = ctx;

    log_warn("http: in the last minute refused %llu connections over "
             "http.max_connections_per_address (%lld), closed %llu that sent no complete "
             "request within http.header_timeout (%llds)",
             (unsigned long long)refused, (long long)h->srv->cfg.http_max_connections_per_address,
             (unsigned long long)timed_out, (long long)h->srv->cfg.http_header_timeout);
}

/* Every connection is a descriptor: the soft limit goes up to the hard one,
 * and the connection limit down to what fits under it. */
static unsigned connection_limit(const struct server_config *cfg)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)cfg->http_max_connections + 256;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
            unsigned fit = rl.rlim_cur > 512 ? (unsigned)(rl.rlim_cur - 256) : 256;
            log_warn("http: open files are limited to %llu (ulimit -n): serving %u connections, "
                     "not http.max_connections (%lld)",
                     (unsigned long long)rl.rlim_cur, fit, (long long)cfg->http_max_connections);
            return fit;
        }
    }
    return (unsigned)cfg->http_max_connections;
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Decodes %XX in the path and the query's values, as MHD's own does, but
 * leaves "%00" as it is: a NUL would end the string there and hide what
 * follows it from every check ("/assets/x.js%00.png", "id%00'"), so the
 * bytes stay visible and fail the checks they meet. */
static size_t unescape_keep_nul(void *cls, struct MHD_Connection *conn, char *s)
{
    char *r = s, *w = s;
    (void)cls;
    (void)conn;

    while (*r) {
        int hi = r[0] == '%' ? hex_value(r[1]) : -1, lo = hi >= 0 ? hex_value(r[2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* A commit that noted a change: waiting agents and event streams look. */
static void on_commit(void *ctx)
{
    struct http_server *h = ctx;
    struct desired_waits *waits = __atomic_load_n(&h->waits, __ATOMIC_SEQ_CST);
    struct event_streams *streams = __atomic_load_n(&h->streams, __ATOMIC_SEQ_CST);

    if (waits)
        desired_waits_wake(waits);
    if (streams)
        event_streams_wake(streams);
}

/* console.dir, or console/ beside the binary; says so when it is not built. */
static char *console_dir(const struct server_config *cfg)
{
    char *dir =
        cfg->console_dir && *cfg->console_dir ? xstrdup(cfg->console_dir) : console_default_dir();
    struct stat st;

    if (!dir)
        log_warn("http: the web console's directory is unknown (no /proc/self/exe): set "
                 "console.dir");
    else if (stat(dir, &st) < 0)
        log_info("http: no web console at '%s' (make console builds it; console.dir moves it): "
                 "/ answers a page that says so",
                 dir);
    else
        log_info("http: serving the web console from '%s'", dir);
    return dir;
}

struct http_server *http_start(struct server *srv, const char *listen, struct sl_error *err)
{
    const struct server_config *cfg = &srv->cfg;
    struct sockaddr_storage ss;
    socklen_t sslen;
    struct http_server *h;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY |
                     MHD_USE_ERROR_LOG | MHD_USE_TURBO | MHD_ALLOW_SUSPEND_RESUME;

    if (parse_listen(listen, &ss, &sslen, err) < 0)
        return NULL;
    if (cfg->http_max_connections_per_address >= cfg->http_max_connections) {
        sl_fail(err, SL_E_INVALID, "invalid_config",
                "http.max_connections_per_address (%lld) must be below http.max_connections "
                "(%lld), or one address could take them all",
                (long long)cfg->http_max_connections_per_address,
                (long long)cfg->http_max_connections);
        return NULL;
    }
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h = xzalloc(sizeof(*h));
    h->srv = srv;
    if (sl_net_list_parse(cfg->http_trusted_proxies, &h->trusted, err) < 0) {
        sl_error_prefix(err, "option 'http.trusted_proxies'");
        free(h);
        return NULL;
    }
    struct sl_conn_guard_config guard = {
        .per_address = (unsigned)cfg->http_max_connections_per_address,
        .header_timeout = (unsigned)cfg->http_header_timeout,
        .exempt = &h->trusted,
        .report = guard_report,
        .report_ctx = h,
    };
    h->waits = desired_waits_start(srv, err);
    if (!h->waits) {
        sl_net_list_release(&h->trusted);
        free(h);
        return NULL;
    }
    h->streams = event_streams_start(srv, err);
    if (!h->streams) {
        desired_waits_stop(h->waits);
        sl_net_list_release(&h->trusted);
        free(h);
        return NULL;
    }
    h->console_dir = console_dir(cfg);
    store_set_commit_hook(srv->store, on_commit, h);
    h->guard = sl_conn_guard_new(&guard);
    h->daemon = MHD_start_daemon(
        flags, 0, sl_conn_guard_accept, h->guard, on_request, h, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
        /* idle: a request's headers have their own, shorter deadline (the guard) */
        MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_CONNECTION_LIMIT, connection_limit(cfg),
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 512u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
        MHD_OPTION_NOTIFY_CONNECTION, sl_conn_guard_notify, h->guard, MHD_OPTION_UNESCAPE_CALLBACK,
        unescape_keep_nul, NULL, MHD_OPTION_EXTERNAL_LOGGER, sl_conn_guard_mhd_log, (void *)"http",
        MHD_OPTION_END);
    if (!h->daemon) {
        store_set_commit_hook(srv->store, NULL, NULL);
        desired_waits_stop(h->waits);
        event_streams_stop(h->streams);
        event_streams_free(h->streams);
        free(h->console_dir);
        sl_conn_guard_free(h->guard);
        sl_net_list_release(&h->trusted);
        free(h);
        sl_fail(err, SL_E_UNAVAILABLE, "listen_failed",
                "unable to listen on '%s': is the port in use, or the address not on this host?",
                listen);
        return NULL;
    }
    return h;
}

void http_stop(struct http_server *h)
{
    if (!h)
        return;
    /* waiting agents are answered (with what they have) before the end */
    store_set_commit_hook(h->srv->store, NULL, NULL);
    struct desired_waits *waits = h->waits;
    __atomic_store_n(&h->waits, NULL, __ATOMIC_SEQ_CST); /* new requests answer at once */
    desired_waits_stop(waits);
    /* streams end (their clients reconnect with Last-Event-ID elsewhere or
     * later); the hub outlives the connections that point into it */
    struct event_streams *streams = h->streams;
    __atomic_store_n(&h->streams, NULL, __ATOMIC_SEQ_CST);
    event_streams_stop(streams);
    MHD_stop_daemon(h->daemon);
    event_streams_free(streams);
    free(h->console_dir);
    sl_conn_guard_free(h->guard);
    sl_net_list_release(&h->trusted);
    free(h);
}
