#include "nginx.h"
#include "fsutil.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* the system's certificate authorities (Debian's ca-certificates) */
#define PROXY_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

/* a dead nginx is started again at most this often */
#define RESTART_EVERY_MS 3000

bool proxy_listen_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    const char *colon = s ? strrchr(s, ':') : NULL;
    const char *port = colon ? colon + 1 : s;
    unsigned char addr[sizeof(struct in6_addr)];
    char host[64];

    if (n == 0 || n > 64 || !*port || strspn(port, "0123456789") != strlen(port) ||
        strlen(port) > 5)
        return false;
    long v = strtol(port, NULL, 10);
    if (v < 1 || v > 65535)
        return false;
    if (!colon)
        return true;
    /* an address, never a name nginx would resolve */
    size_t hn = (size_t)(colon - s);
    if (hn > 2 && s[0] == '[' && s[hn - 1] == ']') {
        snprintf(host, sizeof(host), "%.*s", (int)(hn - 2), s + 1);
        return inet_pton(AF_INET6, host, addr) == 1;
    }
    snprintf(host, sizeof(host), "%.*s", (int)hn, s);
    return inet_pton(AF_INET, host, addr) == 1;
}

bool proxy_auth_url_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    size_t scheme = n > 8 && strncmp(s, "https://", 8) == 0  ? 8
                    : n > 7 && strncmp(s, "http://", 7) == 0 ? 7
                                                             : 0;
    return scheme && n < 256 && s[scheme] != '/' &&
           strspn(s + scheme,
                  "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:[]-_/") ==
               n - scheme;
}

static bool word_valid(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < max &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == n;
}

/* A path nginx takes inside double quotes: absolute, no quote, backslash,
 * '$' (a variable), blank or control byte. */
static bool dir_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 1024 || s[0] != '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == '"' || s[i] == '\\' || s[i] == '$' ||
            s[i] == ';' || s[i] == '{' || s[i] == '}' || s[i] == '#' || s[i] == 0x7f)
            return false;
    return true;
}

static bool route_valid(const struct proxy_route *r)
{
    struct in_addr a;
    size_t n = r->id ? strlen(r->id) : 0;
    return n > 2 && n < 64 && strncmp(r->id, "i-", 2) == 0 &&
           strspn(r->id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n && r->ip &&
           inet_pton(AF_INET, r->ip, &a) == 1 && r->port >= 1 && r->port <= 65535;
}

/* Whether a valid route before routes[i] has its key: nginx refuses a map
 * with a key twice, and the first one wins. */
static bool routed_before(const struct proxy_route *routes, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (routes[j].port == routes[i].port && route_valid(&routes[j]) &&
            strcmp(routes[j].id, routes[i].id) == 0)
            return true;
    return false;
}

/* The parts of nginx.conf around the routes. Every request is judged on ONE
 * host value, nginx's $host (the request line's host, else the Host header;
 * lowercase, without port or final dot): it picks the route and it is what
 * suanlid is asked about. The subrequest carries only headers nginx sets
 * itself, so nothing a client sends (X-Original-*, X-Forwarded-*) reaches
 * suanlid as a judgement's input, and the node's token, so suanlid answers
 * this node only. The instance gets what suanlid let through: the URI,
 * Cookie, Referer and Authorization without suanli's credentials. */
static const char config_head[] =
    "    map $http_upgrade $suanli_connection { default upgrade; '' close; }\n"
    "    # INSTANCE-PORT.DOMAIN: the domain is suanlid's to check\n"
    "    map $host $suanli_service {\n"
    "        default \"\";\n"
    "        \"~^(?<suanli_label>[a-z0-9-]+)\\.\" $suanli_label;\n"
    "    }\n"
    "    # a Host header naming another host than the request line's is refused\n"
    "    map \"$host $http_host\" $suanli_host_agrees {\n"
    "        default 0;\n"
    "        \" \" 1;\n"
    "        \"~*^([^ ]+) \\1\\.?(:[0-9]*)?$\" 1;\n"
    "    }\n"
    "    # suanlid's URI always starts with '/': nothing it says can name another upstream\n"
    "    map $suanli_uri $suanli_upstream_uri { default \"/\"; \"~^/\" $suanli_uri; }\n"
    "    map $suanli_service $suanli_backend {\n"
    "        default \"\";\n";

static const char config_server[] =
    "        server_name _;\n"
    "        if ($suanli_host_agrees = 0) {\n"
    "            return 400 \"the request line and the Host header name different hosts: send "
    "one\\n\";\n"
    "        }\n"
    "        if ($suanli_backend = \"\") {\n"
    "            return 400 \"no such service here: the link is wrong, the instance is not "
    "running, or the port is not published (suanli port ls)\\n\";\n"
    "        }\n"
    "        location / {\n"
    "            auth_request /_suanli/auth;\n"
    "            auth_request_set $suanli_set_cookie $upstream_http_x_suanli_set_cookie;\n"
    "            auth_request_set $suanli_uri $upstream_http_x_suanli_uri;\n"
    "            auth_request_set $suanli_cookie $upstream_http_x_suanli_cookie;\n"
    "            auth_request_set $suanli_referer $upstream_http_x_suanli_referer;\n"
    "            auth_request_set $suanli_authorization $upstream_http_x_suanli_authorization;\n"
    "            add_header Set-Cookie $suanli_set_cookie always;\n"
    "            proxy_pass http://$suanli_backend$suanli_upstream_uri;\n"
    "            proxy_http_version 1.1;\n"
    "            proxy_set_header Host $http_host;\n"
    "            proxy_set_header Cookie $suanli_cookie;\n"
    "            proxy_set_header Referer $suanli_referer;\n"
    "            proxy_set_header Authorization $suanli_authorization;\n"
    "            proxy_set_header Upgrade $http_upgrade;\n"
    "            proxy_set_header Connection $suanli_connection;\n"
    "            proxy_set_header X-Forwarded-For $remote_addr;\n"
    "            proxy_set_header X-Forwarded-Host $http_host;\n"
    "            proxy_set_header X-Forwarded-Proto $scheme;\n"
    "            # an app's cookies stay on its own host, never a sibling's domain\n"
    "            proxy_cookie_domain ~.+ $host;\n"
    "            # an app does not steer nginx (an internal redirect to /_suanli/auth)\n"
    "            proxy_ignore_headers X-Accel-Redirect X-Accel-Expires X-Accel-Limit-Rate "
    "X-Accel-Buffering X-Accel-Charset;\n"
    "            proxy_read_timeout 1d;\n"
    "            proxy_send_timeout 1d;\n"
    "            proxy_buffering off;\n"
    "            proxy_request_buffering off;\n"
    "            error_page 401 /_suanli/401;\n"
    "            error_page 403 /_suanli/403;\n"
    "            error_page 502 /_suanli/502;\n"
    "        }\n";

/* The auth location of both servers, up to suanlid's address. */
static const char config_auth[] =
    "        location = /_suanli/auth {\n"
    "            internal;\n"
    "            proxy_pass_request_body off;\n"
    "            proxy_pass_request_headers off;\n"
    "            proxy_set_header Content-Length \"\";\n"
    "            proxy_set_header Transfer-Encoding \"\";\n"
    "            proxy_set_header X-Original-Host $host;\n"
    "            proxy_set_header X-Original-URI $request_uri;\n"
    "            proxy_set_header Cookie $http_cookie;\n"
    "            proxy_set_header X-Original-Referer $http_referer;\n"
    "            proxy_set_header X-Original-Authorization $http_authorization;\n"
    "            proxy_set_header X-Original-Method $request_method;\n"
    "            proxy_set_header X-Original-Sec-Fetch-Site $http_sec_fetch_site;\n"
    "            proxy_set_header X-Original-Sec-Fetch-Mode $http_sec_fetch_mode;\n"
    "            proxy_set_header X-Original-Origin $http_origin;\n"
    "            # the answer carries the Cookie and URI back: room for the largest\n"
    "            proxy_buffer_size 64k;\n"
    "            proxy_buffers 4 64k;\n"
    "            proxy_connect_timeout 5s;\n"
    "            proxy_read_timeout 15s;\n";

static const char config_errors[] =
    "        location = /_suanli/401 {\n"
    "            internal;\n"
    "            return 401 \"sign in first: open the service's access link (suanli show "
    "INSTANCE prints it)\\n\";\n"
    "        }\n"
    "        location = /_suanli/403 {\n"
    "            internal;\n"
    "            return 403 \"this service is not yours: ask its owner for its access "
    "link\\n\";\n"
    "        }\n"
    "        location = /_suanli/502 {\n"
    "            internal;\n"
    "            return 502 \"nothing answers on this port inside the instance (yet)\\n\";\n"
    "        }\n";

/* The terminal (node/terminal.h): ID-terminal.DOMAIN goes to the agent's
 * socket, after the same auth subrequest, which accepts a ticket and
 * nothing else there; the agent learns the instance from suanlid's answer
 * and serves only requests carrying the key, which goes nowhere else. Only
 * what a websocket handshake needs is passed on (no Cookie, no
 * Authorization, no extensions), and not the URI: its ticket is spent. */
static const char config_terminal[] =
    "        server_name \"~^i-[a-z0-9-]+-terminal\\.\";\n"
    "        if ($suanli_host_agrees = 0) {\n"
    "            return 400 \"the request line and the Host header name different hosts: send "
    "one\\n\";\n"
    "        }\n"
    "        location / {\n"
    "            auth_request /_suanli/auth;\n"
    "            auth_request_set $suanli_terminal $upstream_http_x_suanli_terminal;\n"
    "            rewrite ^ /terminal? break;\n"
    "            proxy_http_version 1.1;\n"
    "            proxy_pass_request_headers off;\n"
    "            proxy_pass_request_body off;\n"
    "            proxy_set_header Host terminal;\n"
    "            proxy_set_header Upgrade $http_upgrade;\n"
    "            proxy_set_header Connection $suanli_connection;\n"
    "            proxy_set_header Sec-WebSocket-Key $http_sec_websocket_key;\n"
    "            proxy_set_header Sec-WebSocket-Version $http_sec_websocket_version;\n"
    "            proxy_set_header X-Suanli-Terminal $suanli_terminal;\n"
    "            proxy_read_timeout 1d;\n"
    "            proxy_send_timeout 1d;\n"
    "            proxy_buffering off;\n"
    "            error_page 401 /_suanli/401t;\n"
    "            error_page 403 /_suanli/403t;\n"
    "            error_page 502 /_suanli/502t;\n";

static const char config_terminal_errors[] =
    "        location = /_suanli/401t {\n"
    "            internal;\n"
    "            return 401 \"open the terminal from the instance's page in the console: its "
    "ticket works once, for a minute\\n\";\n"
    "        }\n"
    "        location = /_suanli/403t {\n"
    "            internal;\n"
    "            return 403 \"this terminal is not yours, or not from this page\\n\";\n"
    "        }\n"
    "        location = /_suanli/502t {\n"
    "            internal;\n"
    "            return 502 \"the host's agent does not answer for terminals (yet)\\n\";\n"
    "        }\n";

/* Files of the renter's storage (node/files.h): ID-files.DOMAIN goes to
 * the same socket as the terminal after the same auth subrequest, which
 * accepts a files ticket only; suanlid's answer names the instance, the
 * operation and its path, and the origin the console runs at, the only
 * one the answer is readable from (CORS). A preflight is answered here,
 * before any ticket is looked at: it allows nothing by itself, the request
 * that follows is judged whole. Only the body and its length go on. */
static const char config_files[] =
    "        server_name \"~^i-[a-z0-9-]+-files\\.\";\n"
    "        if ($suanli_host_agrees = 0) {\n"
    "            return 400 \"the request line and the Host header name different hosts: send "
    "one\\n\";\n"
    "        }\n"
    "        location / {\n"
    "            if ($request_method = OPTIONS) {\n"
    "                add_header Access-Control-Allow-Origin $http_origin always;\n"
    "                add_header Access-Control-Allow-Methods \"GET, PUT\" always;\n"
    "                add_header Access-Control-Allow-Headers \"Content-Type\" always;\n"
    "                add_header Access-Control-Max-Age 60 always;\n"
    "                add_header Vary Origin always;\n"
    "                return 204;\n"
    "            }\n"
    "            auth_request /_suanli/auth;\n"
    "            auth_request_set $suanli_files $upstream_http_x_suanli_files;\n"
    "            auth_request_set $suanli_files_op $upstream_http_x_suanli_files_op;\n"
    "            auth_request_set $suanli_files_path $upstream_http_x_suanli_files_path;\n"
    "            auth_request_set $suanli_files_origin $upstream_http_x_suanli_files_origin;\n"
    "            add_header Access-Control-Allow-Origin $suanli_files_origin always;\n"
    "            add_header Vary Origin always;\n"
    "            rewrite ^ /files? break;\n"
    "            proxy_http_version 1.1;\n"
    "            proxy_pass_request_headers off;\n"
    "            proxy_request_buffering off;\n"
    "            proxy_buffering off;\n"
    "            proxy_set_header Host files;\n"
    "            proxy_set_header Connection close;\n"
    "            proxy_set_header X-Suanli-Files $suanli_files;\n"
    "            proxy_set_header X-Suanli-Files-Op $suanli_files_op;\n"
    "            proxy_set_header X-Suanli-Files-Path $suanli_files_path;\n"
    "            proxy_read_timeout 1h;\n"
    "            proxy_send_timeout 1h;\n"
    "            error_page 401 /_suanli/401f;\n"
    "            error_page 403 /_suanli/403f;\n"
    "            error_page 502 /_suanli/502f;\n";

static const char config_files_errors[] =
    "        location = /_suanli/401f {\n"
    "            internal;\n"
    "            return 401 \"ask for a files ticket again (the console's File storage page): it "
    "works once, for a minute\\n\";\n"
    "        }\n"
    "        location = /_suanli/403f {\n"
    "            internal;\n"
    "            return 403 \"these files are not yours, or not from this page\\n\";\n"
    "        }\n"
    "        location = /_suanli/502f {\n"
    "            internal;\n"
    "            return 502 \"the host's agent does not answer for files (yet)\\n\";\n"
    "        }\n";

static bool socket_path_valid(const char *s)
{
    /* nginx's "unix:PATH:" ends the path at a colon */
    return dir_valid(s) && strlen(s) < 108 && !strchr(s, ':');
}

/* The auth location, asking suanlid at auth (auth_len bytes). */
static void add_auth(struct sl_buf *b, const struct proxy_settings *s, const char *auth,
                     size_t auth_len)
{
    sl_buf_adds(b, config_auth);
    sl_buf_addf(b,
                "            proxy_pass %.*s/v1/nodes/%s/proxy/auth;\n"
                "            proxy_set_header Authorization \"Bearer %s\";\n",
                (int)auth_len, auth, s->node_id, s->node_token);
    if (strncmp(auth, "https://", 8) == 0)
        /* the node's token goes only to a suanlid whose certificate checks
         * out, as the agent's own requests do (libcurl's defaults) */
        sl_buf_adds(b, "            proxy_ssl_server_name on;\n"
                       "            proxy_ssl_verify on;\n"
                       "            proxy_ssl_trusted_certificate " PROXY_CA_BUNDLE ";\n");
    sl_buf_adds(b, "        }\n");
}

/* A server block for the agent's socket (the terminal's or the files'
 * hosts: locations, their key and the socket, the auth subrequest and the
 * error pages). */
static void add_socket_server(struct sl_buf *b, const struct proxy_settings *s,
                              const char *locations, const char *errors, const char *auth,
                              size_t auth_len)
{
    sl_buf_addf(b,
                "    server {\n"
                "        listen %s;\n",
                s->listen);
    sl_buf_adds(b, locations);
    sl_buf_addf(b,
                "            proxy_set_header X-Suanli-Terminal-Key %s;\n"
                "            proxy_pass http://unix:%s:;\n"
                "        }\n",
                s->terminal_key, s->terminal_socket);
    add_auth(b, s, auth, auth_len);
    sl_buf_adds(b, errors);
    sl_buf_adds(b, "    }\n");
}

char *proxy_config(const struct proxy_settings *s, const struct proxy_route *routes, size_t n)
{
    cleanup_buf struct sl_buf b = SL_BUF_INIT;
    const char *auth = s->auth_url;

    if (!dir_valid(s->dir) || !proxy_listen_valid(s->listen) || !proxy_auth_url_valid(auth) ||
        !word_valid(s->node_id, 64) || !word_valid(s->node_token, 256) ||
        (s->terminal_socket &&
         (!socket_path_valid(s->terminal_socket) || !word_valid(s->terminal_key, 256))))
        return NULL;
    size_t auth_len = strlen(auth);
    while (auth_len > 0 && auth[auth_len - 1] == '/')
        auth_len--;
    sl_buf_adds(&b, "# Written by suanli-node from its desired state: service ports\n"
                    "# (docs/design/access.md). Edits are overwritten. 0600: the node's token.\n");
    if (s->drop_privileges)
        sl_buf_adds(&b, "user nobody nogroup;\n");
    sl_buf_addf(&b,
                "daemon off;\n"
                "worker_processes 1;\n"
                "pid \"%s/nginx.pid\";\n"
                "error_log \"%s/error.log\" warn;\n"
                "events { worker_connections 4096; }\n"
                "http {\n"
                "    access_log off;\n"
                "    server_tokens off;\n"
                "    default_type text/plain;\n"
                "    client_max_body_size 0;\n"
                "    client_body_temp_path \"%s/tmp/body\";\n"
                "    proxy_temp_path \"%s/tmp/proxy\";\n"
                "    fastcgi_temp_path \"%s/tmp/fastcgi\";\n"
                "    uwsgi_temp_path \"%s/tmp/uwsgi\";\n"
                "    scgi_temp_path \"%s/tmp/scgi\";\n",
                s->dir, s->dir, s->dir, s->dir, s->dir, s->dir, s->dir);
    sl_buf_adds(&b, config_head);
    for (size_t i = 0; i < n; i++) {
        if (route_valid(&routes[i]) && !routed_before(routes, i))
            sl_buf_addf(&b, "        %s-%u %s:%u;\n", routes[i].id, routes[i].port, routes[i].ip,
                        routes[i].port);
    }
    sl_buf_addf(&b,
                "    }\n"
                "    server {\n"
                "        listen %s default_server;\n",
                s->listen);
    sl_buf_adds(&b, config_server);
    add_auth(&b, s, auth, auth_len);
    sl_buf_adds(&b, config_errors);
    sl_buf_adds(&b, "    }\n");
    if (s->terminal_socket) {
        add_socket_server(&b, s, config_terminal, config_terminal_errors, auth, auth_len);
        add_socket_server(&b, s, config_files, config_files_errors, auth, auth_len);
    }
    sl_buf_adds(&b, "}\n");
    return sl_buf_detach(&b, NULL);
}

static char *path_in(const struct proxy *p, const char *name)
{
    return xasprintf("%s/%s", p->s.dir, name);
}

/* Whether pid is an nginx master running our configuration. */
static bool is_ours(const struct proxy *p, pid_t pid)
{
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/%d/cmdline", (int)pid);
    cleanup_free char *conf = path_in(p, "nginx.conf");
    size_t len = 0;
    cleanup_free char *cmd = fs_read_file(proc, 4096, &len, NULL);
    if (!cmd)
        return false;
    for (size_t i = 0; i < len; i++)
        if (cmd[i] == '\0')
            cmd[i] = ' ';
    return strstr(cmd, "nginx") && strstr(cmd, conf);
}

static bool alive(struct proxy *p)
{
    if (p->pid > 0 && p->child) {
        int status;
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid) {
            bool missing = WIFEXITED(status) && WEXITSTATUS(status) == 127;
            if (missing && !p->warned)
                log_warn("proxy: nginx is not installed (scripts/deps.sh run installs it)");
            else if (!missing)
                log_warn("proxy: nginx exited (status %d); see %s/error.log", status, p->s.dir);
            p->warned = missing;
            p->dead_pid = p->pid;
            p->pid = 0;
            p->child = false;
        }
    }
    /* a child is ours until waitpid says it ended (before its exec its
     * command line is still the agent's); an adopted master is checked */
    if (p->pid > 0 && !p->child && !is_ours(p, p->pid)) {
        p->dead_pid = p->pid;
        p->pid = 0;
    }
    if (p->pid == 0) {
        /* a master left by an agent before this one */
        cleanup_free char *pidfile = path_in(p, "nginx.pid");
        cleanup_free char *text = fs_read_file(pidfile, 64, NULL, NULL);
        long v = text ? strtol(text, NULL, 10) : 0;
        if (v > 1 && is_ours(p, (pid_t)v)) {
            p->pid = (pid_t)v;
            p->child = false;
            log_info("proxy: adopted nginx (pid %ld)", v);
        }
    }
    return p->pid > 0;
}

/* A master killed with SIGKILL leaves its workers running, holding the
 * listening socket with the old routes. They are in the master's process
 * group (it called setsid), so they are found by that group and nginx's
 * name. */
static void kill_orphans(pid_t group)
{
    cleanup_dir DIR *d = group > 1 ? opendir("/proc") : NULL;
    struct dirent *e;

    while (d && (e = readdir(d))) {
        char path[sizeof("/proc//stat") + NAME_MAX], stat[512], comm[64];
        int pid, ppid, pgrp;
        char state;
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        cleanup_fclose FILE *f = fopen(path, "r");
        if (!f || !fgets(stat, sizeof(stat), f))
            continue;
        if (sscanf(stat, "%d (%63[^)]) %c %d %d", &pid, comm, &state, &ppid, &pgrp) == 5 &&
            pgrp == group && strcmp(comm, "nginx") == 0) {
            log_warn("proxy: killing nginx worker %d left by a killed master", pid);
            kill(pid, SIGKILL);
        }
    }
}

/* Whether the master has written its pid file: nginx does that after it
 * installs its signal handlers, so a SIGHUP before then would end it. */
static bool ready(struct proxy *p)
{
    cleanup_free char *pidfile = path_in(p, "nginx.pid");
    cleanup_free char *text = fs_read_file(pidfile, 64, NULL, NULL);

    return text && strtol(text, NULL, 10) == (long)p->pid;
}

static int start(struct proxy *p, struct sl_error *err)
{
    cleanup_free char *conf = path_in(p, "nginx.conf");
    cleanup_free char *log = path_in(p, "error.log");
    cleanup_free char *prefix = xasprintf("%s/", p->s.dir);
    const char *argv[] = { p->nginx, "-p", prefix, "-c", conf, NULL };

    cleanup_free char *pidfile = path_in(p, "nginx.pid");
    cleanup_free char *old = fs_read_file(pidfile, 64, NULL, NULL);
    kill_orphans(p->dead_pid);
    if (old && strtol(old, NULL, 10) != p->dead_pid)
        kill_orphans((pid_t)strtol(old, NULL, 10));
    p->dead_pid = 0;
    pid_t pid = fork();
    if (pid < 0)
        return sl_fail_errno(err, "unable to start nginx");
    if (pid == 0) {
        /* its own session: a Ctrl-C meant for the agent does not reach it */
        setsid();
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int out = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (null >= 0)
            dup2(null, 0);
        if (out >= 0) {
            dup2(out, 1);
            dup2(out, 2);
        }
        closefrom(3);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    p->pid = pid;
    p->child = true;
    p->reload = false; /* it reads the configuration as it is now */
    log_info("proxy: started nginx (pid %d) on %s", (int)pid, p->s.listen);
    return 0;
}

/* Makes nginx run with the configuration for routes: adopts a running
 * master (the pid file, checked against /proc), writes the configuration
 * and reloads when it changed, starts nginx when it is not running. */
static int proxy_sync(struct proxy *p, const struct proxy_route *routes, size_t n,
                      struct sl_error *err)
{
    cleanup_free char *text = proxy_config(&p->s, routes, n);
    if (!text)
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "the proxy's settings cannot go into nginx.conf: check proxy.listen, "
                       "server (http://HOST:PORT) and the data directory's path");
    bool running = alive(p);
    bool changed = !p->text || strcmp(p->text, text) != 0;

    if (!changed && running && !p->reload)
        return 0;
    if (changed) {
        cleanup_free char *tmp = path_in(p, "tmp");
        cleanup_free char *conf = path_in(p, "nginx.conf");
        if (fs_mkdir_p(tmp, 0700, err) < 0 ||
            sl_file_write(conf, text, strlen(text), 0600, 0, err) < 0) {
            sl_error_prefix(err, "configure nginx");
            return -1;
        }
        free(p->text);
        p->text = TAKE_PTR(text);
        p->reload = true;
    }
    if (running) {
        if (!ready(p))
            return 0; /* still starting: reloaded on a later pass */
        if (kill(p->pid, SIGHUP) < 0)
            return sl_fail_errno(err, "unable to reload nginx (pid %d)", (int)p->pid);
        p->reload = false;
        log_info("proxy: reloaded nginx (%zu routes)", n);
        return 0;
    }
    if (sl_time_mono_ms() < p->next_start_ms)
        return 0;
    p->next_start_ms = sl_time_mono_ms() + RESTART_EVERY_MS;
    return start(p, err);
}

void proxy_stop(struct proxy *p)
{
    if (p->s.dir && alive(p)) {
        kill(p->pid, SIGTERM);
        for (int i = 0; i < 300; i++) {
            if (p->child ? waitpid(p->pid, NULL, WNOHANG) == p->pid : kill(p->pid, 0) < 0)
                break;
            if (i == 299) {
                kill(p->pid, SIGKILL);
                if (p->child)
                    waitpid(p->pid, NULL, 0);
            }
            usleep(10 * SL_USEC_PER_MSEC);
        }
        log_info("proxy: stopped nginx");
    }
    free(p->text);
    p->text = NULL;
    p->pid = 0;
}

int proxy_sync_desired(struct proxy *p, json_t *instances, const struct net_config *net,
                       struct sl_error *err)
{
    size_t n = 0, cap = 0, i, j;
    json_t *d, *port;
    struct proxy_route *routes = NULL;
    char(*ips)[64] = xcalloc(json_array_size(instances) + 1, sizeof(*ips));

    json_array_foreach(instances, i, d)
    {
        const char *id = json_string_value(json_object_get(d, "id"));
        const char *desired = json_string_value(json_object_get(d, "desired"));
        json_t *ports = json_object_get(d, "ports");
        /* a stopped or released instance has no route: nginx answers 404 */
        if (!id || !desired || strcmp(desired, "running") != 0 || json_array_size(ports) == 0 ||
            !net_address(net, id, ips[i], sizeof(ips[i])))
            continue;
        json_array_foreach(ports, j, port)
        {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                routes = xrealloc(routes, cap * sizeof(*routes));
            }
            routes[n++] = (struct proxy_route){
                .id = id,
                .ip = ips[i],
                .port = (unsigned)json_integer_value(json_object_get(port, "port")),
            };
        }
    }
    int rc = proxy_sync(p, routes, n, err);
    free(routes);
    free(ips);
    return rc;
}
