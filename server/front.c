#include "front.h"
#include "ports.h"

#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/file.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(((struct server *)0)->front_token) >= FRONT_TOKEN_MAX,
               "server.front_token holds a front token");

int front_token_load(const char *data_dir, char token[static FRONT_TOKEN_MAX], struct sl_error *err)
{
    cleanup_free char *path = xasprintf("%s/front-token", data_dir);

    for (int tries = 0; tries < 2; tries++) {
        FILE *f = fopen(path, "re");
        if (f) {
            bool ok = fgets(token, FRONT_TOKEN_MAX, f) != NULL;
            fclose(f);
            token[strcspn(token, "\n")] = '\0';
            if (!ok || strncmp(token, FRONT_TOKEN_PREFIX, strlen(FRONT_TOKEN_PREFIX)) != 0 ||
                strlen(token) != FRONT_TOKEN_MAX - 1)
                return sl_fail(err, SL_E_INTERNAL, "bad_front_token",
                               "'%s' holds no front token: delete it and restart suanlid", path);
            return 0;
        }
        if (errno != ENOENT)
            return sl_fail_errno(err, "unable to open '%s'", path);
        char hex[65], line[FRONT_TOKEN_MAX + 1];
        sl_random_hex(hex, 32);
        int n = snprintf(line, sizeof(line), FRONT_TOKEN_PREFIX "%s\n", hex);
        struct sl_error e = SL_ERROR_INIT;
        /* exclusive: of two made at once (suanlid, front-config), one stays */
        if (sl_file_write(path, line, (size_t)n, 0600, SL_FILE_EXCLUSIVE, &e) < 0 &&
            e.sys_errno != EEXIST) {
            *err = e;
            return -1;
        }
    }
    return sl_fail(err, SL_E_INTERNAL, "bad_front_token", "unable to make '%s'", path);
}

/* An address nginx can proxy to without a resolver: a literal, and
 * bracketed when IPv6. */
static char *upstream_of(const char *address, int64_t port)
{
    unsigned char buf[16];
    if (inet_pton(AF_INET, address, buf) == 1)
        return xasprintf("%s:%lld", address, (long long)port);
    if (inet_pton(AF_INET6, address, buf) == 1)
        return xasprintf("[%s]:%lld", address, (long long)port);
    return NULL;
}

int front_authenticate(struct api_request *req, struct sl_error *err)
{
    const char *auth = api_header(req, "Authorization");

    memset(&req->caller, 0, sizeof(req->caller));
    if (!req->srv->front_token[0] || !auth || strncmp(auth, "Bearer ", 7) != 0 ||
        !sl_secret_equal(auth + 7, req->srv->front_token))
        return sl_fail(err, SL_E_UNAUTHENTICATED, "unauthenticated",
                       "this route is for the front door's nginx, with the token in suanlid's "
                       "DATA/front-token (suanlid front-config prints its configuration)");
    return 0;
}

int api_front_route(struct api_request *req, struct api_response *res, struct sl_error *err)
{
    struct server *srv = req->srv;
    const char *host = api_header(req, "X-Original-Host");
    char id[SL_ID_MAX];
    int64_t port = 0;
    int rc;

    if (!host)
        return sl_fail(err, SL_E_INVALID, "missing_header",
                       "X-Original-Host is missing: this route is for the front door's nginx");
    /* a terminal (terminal.h) and the files of the storage (files.h) are on
     * the instance's host, as its ports are */
    bool terminal = ports_parse_terminal_host(host, srv->cfg.services_domain, id) ||
                    ports_parse_files_host(host, srv->cfg.services_domain, id);
    if (!terminal && !ports_parse_host(host, srv->cfg.services_domain, id, &port))
        return sl_fail(err, SL_E_FORBIDDEN, "no_such_service", "no such service");
    cleanup_rows struct db_rows *rows =
        terminal ? store_query(srv->store,
                               "SELECT n.address FROM instances i"
                               " JOIN nodes n ON n.id = i.node_id"
                               " WHERE i.id = ?1 AND i.state NOT IN ('released', 'releasing')",
                               DB_ARGS(DB_TEXT(id)), err)
                 : store_query(srv->store,
                               "SELECT n.address FROM instances i"
                               " JOIN instance_ports p ON p.instance_id = i.id AND p.port = ?2"
                               " JOIN nodes n ON n.id = i.node_id"
                               " WHERE i.id = ?1 AND i.state NOT IN ('released', 'releasing')",
                               DB_ARGS(DB_TEXT(id), DB_INT(port)), err);
    if (!rows || (rc = db_next(rows, err)) < 0)
        return -1;
    if (rc == 0)
        return sl_fail(err, SL_E_FORBIDDEN, "no_such_service", "no such service");
    int64_t proxy_port = srv->cfg.services_node_proxy_port ? srv->cfg.services_node_proxy_port
                                                           : srv->cfg.services_proxy_port;
    cleanup_free char *upstream = upstream_of(db_text(rows, 0), proxy_port);
    if (!upstream)
        return sl_fail(err, SL_E_UNAVAILABLE, "host_unreachable",
                       "the host's address '%s' is not an IP address the front can reach: "
                       "start its agent with --address IP",
                       db_text(rows, 0));
    api_add_header(res, "X-Suanli-Upstream", upstream);
    api_reply(res, 204, NULL);
    return 0;
}

/* Values going into nginx.conf: nothing that ends a directive or a string. */
static bool conf_safe(const char *s)
{
    return *s && !strpbrk(s, " \t\r\n;{}\"'\\$#");
}

/* Only the front's own requests reach suanlid from it; the route's answer
 * is the one thing the front uses, and only as an address. Every other
 * part of the request goes to the host as the client sent it, Host
 * included (the host's proxy judges the same single host value). */
static const char front_conf[] =
    "# suanli's front door for service ports: `suanlid front-config` made it.\n"
    "# Include it in nginx's http {} context (e.g. /etc/nginx/conf.d/suanli-front.conf).\n"
    "# It holds the front's token: keep it readable by root only.\n"
    "map $http_upgrade $suanli_front_connection { default upgrade; '' close; }\n"
    "map \"$host $http_host\" $suanli_front_host_agrees {\n"
    "    default 0;\n"
    "    \" \" 1;\n"
    "    \"~*^([^ ]+) \\1\\.?(:[0-9]*)?$\" 1;\n"
    "}\n"
    "map $http_host $suanli_front_host { default $http_host; \"\" $host; }\n"
    "server {\n"
    "    listen %s;\n"
    "    server_name _;\n"
    "    client_max_body_size 0;\n"
    "    if ($suanli_front_host_agrees = 0) {\n"
    "        return 400 \"the request line and the Host header name different hosts: send "
    "one\\n\";\n"
    "    }\n"
    "    location / {\n"
    "        auth_request /_suanli_front/route;\n"
    "        auth_request_set $suanli_front_upstream $upstream_http_x_suanli_upstream;\n"
    "        proxy_pass http://$suanli_front_upstream;\n"
    "        proxy_http_version 1.1;\n"
    "        proxy_set_header Host $suanli_front_host;\n"
    "        proxy_set_header Upgrade $http_upgrade;\n"
    "        proxy_set_header Connection $suanli_front_connection;\n"
    "        proxy_ignore_headers X-Accel-Redirect X-Accel-Expires X-Accel-Limit-Rate "
    "X-Accel-Buffering X-Accel-Charset;\n"
    "        proxy_read_timeout 1d;\n"
    "        proxy_send_timeout 1d;\n"
    "        proxy_buffering off;\n"
    "        proxy_request_buffering off;\n"
    "        error_page 401 =502 /_suanli_front/misconfigured;\n"
    "        error_page 403 =404 /_suanli_front/none;\n"
    "        error_page 500 502 504 =502 /_suanli_front/down;\n"
    "    }\n"
    "    location = /_suanli_front/route {\n"
    "        internal;\n"
    "        proxy_pass %s/v1/front/route;\n"
    "        proxy_pass_request_body off;\n"
    "        proxy_pass_request_headers off;\n"
    "        proxy_set_header Content-Length \"\";\n"
    "        proxy_set_header Transfer-Encoding \"\";\n"
    "        proxy_set_header X-Original-Host $host;\n"
    "        proxy_set_header Authorization \"Bearer %s\";\n"
    "        proxy_connect_timeout 5s;\n"
    "        proxy_read_timeout 15s;\n"
    "    }\n"
    "    location = /_suanli_front/none {\n"
    "        internal;\n"
    "        return 404 \"no such service: the link is wrong, or the instance is "
    "released\\n\";\n"
    "    }\n"
    "    location = /_suanli_front/misconfigured {\n"
    "        internal;\n"
    "        return 502 \"the front door's token is not suanlid's: run suanlid front-config "
    "again\\n\";\n"
    "    }\n"
    "    location = /_suanli_front/down {\n"
    "        internal;\n"
    "        return 502 \"the instance's host does not answer (yet)\\n\";\n"
    "    }\n"
    "}\n";

int front_config_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "data-dir", required_argument, NULL, 'd' },
        { "server", required_argument, NULL, 's' },
        { "listen", required_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    static const char usage[] =
        "usage: suanlid front-config [--data-dir DIR] [--server URL] [--listen ADDR:PORT]\n"
        "  prints the nginx configuration of the front door for service ports\n"
        "  --data-dir  suanlid's data directory, holding front-token (/var/lib/suanli)\n"
        "  --server    suanlid's URL as the front reaches it (http://127.0.0.1:7070)\n"
        "  --listen    where the front listens (80): set services.proxy_port to its port\n";
    const char *data_dir = "/var/lib/suanli", *server = "http://127.0.0.1:7070", *listen = "80";
    int opt;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd':
            data_dir = optarg;
            break;
        case 's':
            server = optarg;
            break;
        case 'l':
            listen = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "suanlid front-config: unexpected argument '%s'\n%s", argv[optind], usage);
        return 2;
    }
    size_t url_len = strlen(server);
    while (url_len > 0 && server[url_len - 1] == '/')
        url_len--;
    cleanup_free char *url = xstrndup(server, url_len);
    if (!conf_safe(url) || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        fprintf(stderr,
                "suanlid front-config: --server takes suanlid's URL, e.g. "
                "http://10.0.0.1:7070, got '%s'\n",
                server);
        return 2;
    }
    if (!conf_safe(listen) || strspn(listen, "0123456789abcdefABCDEF.:[]*") != strlen(listen)) {
        fprintf(stderr, "suanlid front-config: --listen takes ADDR:PORT or PORT, got '%s'\n",
                listen);
        return 2;
    }
    struct sl_error err = SL_ERROR_INIT;
    char token[FRONT_TOKEN_MAX];
    if (front_token_load(data_dir, token, &err) < 0) {
        fprintf(stderr, "suanlid front-config: %s\n", err.message);
        return 1;
    }
    printf(front_conf, listen, url, token);
    return 0;
}
