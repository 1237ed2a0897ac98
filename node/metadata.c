#include "metadata.h"
#include "boot.h"
#include "firewall.h"
#include "fsutil.h"

#include "../lib/client.h"
#include "../lib/cleanup.h"
#include "../lib/conn-guard.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* One instance (one address) must not starve the others: each holds at most
 * PER_ADDRESS connections of the TOTAL (a thread each), and a request's
 * headers are due HEADER_TIMEOUT seconds after connecting; more
 * connections are closed as they come (lib/conn-guard.h). */
#define PER_ADDRESS    8u
#define TOTAL          256u
#define HEADER_TIMEOUT 10u
#define IDLE_TIMEOUT   30u

struct metadata_server {
    struct metadata_config cfg;
    struct MHD_Daemon *daemon;
    struct sl_conn_guard *guard;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return MHD_NO;
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len++] = '\n';
    text[len] = '\0';
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result fail(struct MHD_Connection *conn, unsigned status, const char *code,
                            const char *message)
{
    return reply(conn, status,
                 json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message));
}

/* Splits the path: "" (the caller's own), or the id named in
 * "/instances/ID[/stop]"; sets *stop. Returns false for unknown paths. */
static bool parse_path(const char *url, char *named, bool *stop)
{
    named[0] = '\0';
    *stop = false;
    if (strcmp(url, "/") == 0)
        return true;
    if (strcmp(url, "/stop") == 0)
        return *stop = true;
    if (strncmp(url, "/instances/", 11) != 0)
        return false;
    const char *id = url + 11;
    size_t len = strcspn(id, "/");
    if (len == 0 || len >= SL_ID_MAX)
        return false;
    snprintf(named, SL_ID_MAX, "%.*s", (int)len, id);
    if (id[len] == '\0')
        return true;
    return strcmp(id + len, "/stop") == 0 && (*stop = true);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct metadata_server *m = cls;
    static int started;
    (void)version;
    (void)upload_data;

    if (!*con_cls) {
        *con_cls = &started; /* the headers: answer once the body is read */
        sl_conn_guard_request_started(conn);
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0; /* a body means nothing here */
        return MHD_YES;
    }
    char named[SL_ID_MAX], id[SL_ID_MAX], ip[64] = "";
    bool stop;
    if (!parse_path(url, named, &stop))
        return fail(conn, 404, "not_found",
                    "GET / for this instance, POST /stop to stop it (see shutdown --help)");
    if (strcmp(method, stop ? "POST" : "GET") != 0)
        return fail(conn, 405, "method_not_allowed",
                    stop ? "stop with POST" : "read the instance with GET");
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
    if (!ip[0] || !metadata_instance_for_ip(m->cfg.net_state, ip, id))
        return fail(conn, 403, "forbidden",
                    "this endpoint answers the instances of this host, each about itself only");
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!metadata_token_ok(m->cfg.data_dir, id, auth))
        return fail(conn, 403, "forbidden",
                    "send the instance's token: Authorization: Bearer $(cat "
                    "/.suanli/" BOOT_TOKEN_FILE ")");
    if (named[0] && strcmp(named, id) != 0)
        return fail(conn, 404, "no_such_instance",
                    "an instance may only ask about itself: use GET / or POST /stop");

    struct sl_error err = SL_ERROR_INIT;
    struct sl_client c;
    json_t *out = NULL;
    cleanup_free char *path =
        xasprintf("/v1/nodes/%s/instances/%s/%s", m->cfg.node_id, id, stop ? "stop" : "metadata");
    sl_client_init(&c, m->cfg.server, m->cfg.node_token); /* one per request: MHD threads */
    int rc = sl_client_request(&c, stop ? "POST" : "GET", path, NULL, NULL, &out, &err);
    sl_client_release(&c);
    if (rc < 0) {
        log_warn("metadata: %s %s for %s: %s", method, url, id, err.message);
        return fail(conn, (unsigned)sl_error_http_status(err.kind),
                    err.code[0] ? err.code : sl_error_kind_code(err.kind), err.message);
    }
    if (stop)
        log_info("metadata: %s asked to stop from inside", id);
    return reply(conn, 200, out ? out : json_object());
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)con_cls;
    (void)toe;
    sl_conn_guard_request_done(conn);
}

static void guard_report(void *ctx, uint64_t refused, uint64_t timed_out)
{
    (void)ctx;
    log_warn("metadata: in the last minute refused %llu connections over %u from one instance, "
             "closed %llu that sent no complete request within %u s",
             (unsigned long long)refused, PER_ADDRESS, (unsigned long long)timed_out,
             HEADER_TIMEOUT);
}

/* A listening socket on address:port that may be bound before the address
 * exists (IP_FREEBIND): the bridge and its gateway come with the first
 * instance. */
static int listen_socket(const char *address, unsigned port, struct sl_error *err)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int one = 1;

    if (inet_pton(AF_INET, address, &sa.sin_addr) != 1)
        return sl_fail(err, SL_E_INVALID, "invalid_config", "'%s' is not an IPv4 address", address);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return sl_fail_errno(err, "unable to make a socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0) {
        sl_fail_errno(err, "unable to listen on %s:%u (metadata.port)", address, port);
        close(fd);
        return -1;
    }
    return fd;
}

struct metadata_server *metadata_start(const struct metadata_config *cfg, struct sl_error *err)
{
    char gateway[64];

    if (metadata_gateway(cfg->subnet, gateway, err) < 0 ||
        firewall_allow_metadata(cfg->bridge, gateway, cfg->port, err) < 0)
        return NULL;
    int fd = listen_socket(gateway, cfg->port, err);
    if (fd < 0)
        return NULL;
    struct metadata_server *m = xzalloc(sizeof(*m));
    m->cfg = *cfg;
    const struct sl_conn_guard_config guard = {
        .per_address = PER_ADDRESS,
        .header_timeout = HEADER_TIMEOUT,
        .report = guard_report,
    };
    m->guard = sl_conn_guard_new(&guard);
    m->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
        sl_conn_guard_accept, m->guard, on_request, m, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT, MHD_OPTION_CONNECTION_LIMIT, TOTAL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, m, MHD_OPTION_NOTIFY_CONNECTION,
        sl_conn_guard_notify, m->guard, MHD_OPTION_EXTERNAL_LOGGER, sl_conn_guard_mhd_log,
        (void *)"metadata", MHD_OPTION_END);
    if (!m->daemon) {
        sl_conn_guard_free(m->guard);
        close(fd);
        free(m);
        sl_fail(err, SL_E_UNAVAILABLE, "listen_failed", "unable to serve the metadata endpoint");
        return NULL;
    }
    log_info("agent: metadata endpoint 169.254.169.254:80 -> %s:%u on %s", gateway, cfg->port,
             cfg->bridge);
    return m;
}

void metadata_stop(struct metadata_server *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->daemon);
    sl_conn_guard_free(m->guard);
    free(m);
}
