/* server/ports.c (host parsing, port lists), server/ports-filter.c (finding
 * and stripping suanli's credentials: the link's token, cookies, Referer,
 * Authorization) and node/nginx.c (the nginx configuration: every generated
 * variant, hostile settings and routes included, checked with `nginx -t`
 * when nginx is installed). */
#include "harness.h"

#include "../../node/fsutil.h"
#include "../../node/nginx.h"
#include "../../server/ports.h"
#include "../../lib/cleanup.h"
#include "../../lib/file.h"
#include "../../lib/subprocess.h"
#include "../../lib/xalloc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int nginx_test(const char *dir, const char *text, struct sl_error *err);

#define NODE_TOKEN "sl_NodeToken-_0123456789abcdefghijklmnopqrstuvwxyzABCDEF"

TEST(ports_check_bounds)
{
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(ports_check(6006, &err), 0);
    CHECK_EQ_INT(ports_check(1, &err), 0);
    CHECK_EQ_INT(ports_check(65535, &err), 0);
    CHECK(ports_check(0, &err) < 0 && strcmp(err.code, "invalid_port") == 0);
    CHECK(ports_check(65536, &err) < 0 && strcmp(err.code, "invalid_port") == 0);
    CHECK(ports_check(-5, &err) < 0);
    CHECK(ports_check(22, &err) < 0 && strcmp(err.code, "reserved_port") == 0);
}

TEST(ports_parse_list)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t p[4];
    size_t n;
    CHECK_EQ_INT(ports_parse_list("6006,6008", p, 4, &n, &err), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(p[0], 6006);
    CHECK_EQ_INT(p[1], 6008);
    CHECK_EQ_INT(ports_parse_list(" 80 , 443 ", p, 4, &n, &err), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ports_parse_list("", p, 4, &n, &err), 0);
    CHECK_EQ_INT(n, 0);
    CHECK(ports_parse_list("6006,22", p, 4, &n, &err) < 0);
    CHECK(ports_parse_list("6006,6006", p, 4, &n, &err) < 0);
    CHECK(ports_parse_list("1,2,3,4,5", p, 4, &n, &err) < 0);
    CHECK(ports_parse_list("6006x", p, 4, &n, &err) < 0);
    CHECK(ports_parse_list("99999999999999999999", p, 4, &n, &err) < 0);
    CHECK(ports_parse_list("-1", p, 4, &n, &err) < 0);
}

TEST(ports_parse_host)
{
    char id[SL_ID_MAX];
    int64_t port = 0;
    CHECK(ports_parse_host("i-ab23cd45ef67-6006.localhost:8080", "localhost", id, &port));
    CHECK_STR(id, "i-ab23cd45ef67");
    CHECK_EQ_INT(port, 6006);
    CHECK(ports_parse_host("I-AB23CD45EF67-8888.Example.COM", "example.com", id, &port));
    CHECK_STR(id, "i-ab23cd45ef67");
    CHECK_EQ_INT(port, 8888);
    CHECK(ports_parse_host("i-ab23cd45ef67-6006.localhost.", "localhost", id, &port));
    /* no instance, wrong domain, extra labels, bad ports */
    CHECK(!ports_parse_host("localhost:8080", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab23cd45ef67-6006.evil.com", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab23cd45ef67-6006.xlocalhost", "localhost", id, &port));
    CHECK(!ports_parse_host("x.i-ab23cd45ef67-6006.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab23cd45ef67-0.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab23cd45ef67-070.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab23cd45ef67-65536.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab23cd45ef67-.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("u-ab23cd45ef67-6006.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("i-ab_cd-6006.localhost", "localhost", id, &port));
    CHECK(!ports_parse_host("", "localhost", id, &port));
    CHECK(!ports_parse_host(NULL, "localhost", id, &port));
}

TEST(ports_uri_token)
{
    char t[33];
    CHECK(ports_uri_token("/?suanli_token=abc", t, sizeof(t)));
    CHECK_STR(t, "abc");
    CHECK(ports_uri_token("/tree?token=x&suanli_token=def&y=1", t, sizeof(t)));
    CHECK_STR(t, "def");
    /* what an application would read as suanli_token is one */
    CHECK(ports_uri_token("/?a=1;suanli_token=ghi", t, sizeof(t)));
    CHECK_STR(t, "ghi");
    CHECK(ports_uri_token("/?suanli%5Ftoken=jkl", t, sizeof(t)));
    CHECK_STR(t, "jkl");
    CHECK(ports_uri_token("/?SUANLI_TOKEN=mno", t, sizeof(t)));
    CHECK_STR(t, "mno");
    CHECK(ports_uri_token("?suanli_token=pqr", t, sizeof(t)));
    CHECK_STR(t, "pqr");
    CHECK(!ports_uri_token("/?xsuanli_token=abc", t, sizeof(t)));
    CHECK(!ports_uri_token("/suanli_token=abc", t, sizeof(t)));
    CHECK(!ports_uri_token("/?suanli_token=", t, sizeof(t)));
    CHECK(!ports_uri_token("/?suanli_token", t, sizeof(t)));
    CHECK(ports_uri_token("/#?suanli_token=abc", t, sizeof(t)));
    CHECK(!ports_uri_token("/?suanli_token%=abc", t, sizeof(t)));
    CHECK(
        !ports_uri_token("/?suanli_token=0123456789012345678901234567890123456789", t, sizeof(t)));
    CHECK(!ports_uri_token(NULL, t, sizeof(t)));
}

static void check_uri(const char *in, const char *want)
{
    cleanup_free char *out = ports_uri_filter(in);
    if (!CHECK_STR(out, want))
        printf("  for %s\n", in ? in : "(null)");
}

TEST(ports_uri_filter)
{
    check_uri("/", "/");
    check_uri("/tree?token=x", "/tree?token=x");
    check_uri("/?suanli_token=abc", "/");
    check_uri("/tree?token=x&suanli_token=abc", "/tree?token=x");
    check_uri("/tree?suanli_token=abc&token=x", "/tree?token=x");
    check_uri("/t?a=1&suanli_token=1&b=2&suanli_token=2;c=3", "/t?a=1&b=2;c=3");
    check_uri("/t?a=1;SUANLI_TOKEN=1", "/t?a=1");
    check_uri("/t?suanli%5ftoken=1&suanli_tokenx=2", "/t?suanli_tokenx=2");
    check_uri("/t?suanli_token", "/t");
    check_uri("/t?&&suanli_token=1&", "/t?&");
    check_uri("/t?a=suanli_token=1", "/t?a=suanli_token=1");
    /* a request target has no fragment: a token after '#' goes too */
    check_uri("/t?suanli_token=1#frag", "/t");
    check_uri("/t?a=1#&suanli_token=1", "/t?a=1#");
    check_uri("/t#?suanli_token=1", "/t#");
    check_uri("/t?", "/t?");
    check_uri("/p/suanli_token=1?x", "/p/suanli_token=1?x");
    check_uri("?suanli_token=1&a=b", "/?a=b");
    check_uri("?a=b", "/?a=b");
    /* not a request target nginx sends */
    check_uri("", NULL);
    check_uri("http://x/", NULL);
    check_uri("@evil.example/", NULL);
    check_uri("/a b", NULL);
    check_uri("/a\tb", NULL);
    check_uri("/a\r\nX-Evil: 1", NULL);
    check_uri(NULL, NULL);
}

TEST(ports_referer_filter)
{
    cleanup_free char *a = ports_referer_filter("http://i-ab-6006.localhost:8080/t?suanli_token="
                                                "abc&x=1");
    CHECK_STR(a, "http://i-ab-6006.localhost:8080/t?x=1");
    cleanup_free char *b = ports_referer_filter("https://example.com/");
    CHECK_STR(b, "https://example.com/");
    CHECK(!ports_referer_filter(""));
    CHECK(!ports_referer_filter(NULL));
    CHECK(!ports_referer_filter("http://x/\r\n"));
}

static void check_cookie(const char *in, const char *want)
{
    cleanup_free char *out = ports_cookie_filter(in);
    if (!CHECK_STR(out, want))
        printf("  for %s\n", in ? in : "(null)");
}

TEST(ports_cookie_filter)
{
    /* the app's own cookies pass byte for byte */
    check_cookie("a=1; b=2", "a=1; b=2");
    check_cookie("a=1;b=2;;  c", "a=1;b=2;;  c");
    check_cookie("suanli_session=sl_x", NULL);
    check_cookie("suanli_port_token=abc; _xsrf=2|x; suanli_session=sl_y", "_xsrf=2|x");
    check_cookie("a=1; suanli_session=sl_1; b=2; suanli_session=sl_2", "a=1; b=2");
    check_cookie(" SUANLI_SESSION = sl_x ;\tSuanli_Port_Token=t; x=\"q\"", "x=\"q\"");
    check_cookie("suanli_session", NULL);
    check_cookie("suanli_sessionx=1; xsuanli_session=2", "suanli_sessionx=1; xsuanli_session=2");
    check_cookie("a=suanli_session=1", "a=suanli_session=1");
    check_cookie("", NULL);
    check_cookie(NULL, NULL);
    check_cookie("a=1\r\nX: y; suanli_session=s", NULL);

    char v[4][PORTS_VALUE_MAX];
    CHECK_EQ_INT(ports_cookie_values("a=1; suanli_port_token=t1; SUANLI_PORT_TOKEN = t2 ;"
                                     " suanli_port_token=; suanli_port_token=t3",
                                     PORTS_COOKIE, v, 4),
                 3);
    CHECK_STR(v[0], "t1");
    CHECK_STR(v[1], "t2");
    CHECK_STR(v[2], "t3");
    CHECK_EQ_INT(
        ports_cookie_values("suanli_port_token=1; suanli_port_token=2", PORTS_COOKIE, v, 1), 1);
    char long_value[200];
    snprintf(long_value, sizeof(long_value), "suanli_session=%0150d", 0);
    CHECK_EQ_INT(ports_cookie_values(long_value, PORTS_SESSION_COOKIE, v, 4), 0);
    CHECK_EQ_INT(ports_cookie_values(NULL, PORTS_SESSION_COOKIE, v, 4), 0);
}

TEST(ports_cookies_count)
{
    /* the service's own pages, a typed URL, clients without fetch metadata */
    CHECK(ports_cookies_count("POST", "same-origin", "cors"));
    CHECK(ports_cookies_count("GET", "none", "navigate"));
    CHECK(ports_cookies_count("DELETE", NULL, NULL));
    CHECK(ports_cookies_count("POST", "", NULL));
    /* from another origin: following a link, yes; anything else, no */
    CHECK(ports_cookies_count("GET", "cross-site", "navigate"));
    CHECK(ports_cookies_count("HEAD", "Same-Site", "NAVIGATE"));
    CHECK(!ports_cookies_count("POST", "same-site", "navigate"));
    CHECK(!ports_cookies_count("GET", "same-site", "cors"));
    CHECK(!ports_cookies_count("GET", "same-site", "no-cors"));
    CHECK(!ports_cookies_count("GET", "cross-site", "websocket"));
    CHECK(!ports_cookies_count("GET", "same-site", NULL));
    CHECK(!ports_cookies_count(NULL, "cross-site", "navigate"));
    CHECK(!ports_cookies_count("GET", "something-new", "cors"));
}

TEST(ports_authorization_is_suanli)
{
    CHECK(ports_authorization_is_suanli("Bearer sl_abc"));
    CHECK(ports_authorization_is_suanli("bearer\tsl_abc"));
    CHECK(ports_authorization_is_suanli("  BEARER   sl_"));
    CHECK(ports_authorization_is_suanli("Token sl_abc"));
    CHECK(ports_authorization_is_suanli("sl_abc"));
    CHECK(!ports_authorization_is_suanli("Bearer eyJhbGciOi"));
    CHECK(!ports_authorization_is_suanli("Basic c2xfYWJj"));
    CHECK(!ports_authorization_is_suanli("Bearer xsl_abc"));
    CHECK(!ports_authorization_is_suanli(""));
    CHECK(!ports_authorization_is_suanli(NULL));
}

TEST(proxy_listen_valid)
{
    CHECK(proxy_listen_valid("8080"));
    CHECK(proxy_listen_valid("0.0.0.0:8080"));
    CHECK(proxy_listen_valid("[::]:8080"));
    CHECK(proxy_listen_valid("[::1]:80"));
    CHECK(!proxy_listen_valid(""));
    CHECK(!proxy_listen_valid("cafe:80")); /* a name nginx would resolve */
    CHECK(!proxy_listen_valid("[::1:80"));
    CHECK(!proxy_listen_valid("999.0.0.1:80"));
    CHECK(!proxy_listen_valid("80 ssl"));
    CHECK(!proxy_listen_valid("0.0.0.0:0"));
    CHECK(!proxy_listen_valid("0.0.0.0:70000"));
    CHECK(!proxy_listen_valid("8080; include /etc/passwd"));
    CHECK(!proxy_listen_valid("host:"));
}

TEST(proxy_config)
{
    char dir[] = "/tmp/suanli-proxy-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    struct proxy_settings s = { .dir = dir,
                                .listen = "127.0.0.1:1",
                                .auth_url = "http://127.0.0.1:7070/",
                                .node_id = "n-ab23cd45ef67",
                                .node_token = NODE_TOKEN };
    const struct proxy_route routes[] = {
        { "i-ab23cd45ef67", "10.88.0.5", 6006 },
        { "i-ab23cd45ef67", "10.88.0.5", 8888 },
        { "i-bad;id", "10.88.0.6", 6006 },          /* left out */
        { "i-cd45ef67ab23", "10.88.0.7; x", 6006 }, /* left out */
    };
    cleanup_free char *text = proxy_config(&s, routes, 4);
    CHECK(strstr(text, "        i-ab23cd45ef67-6006 10.88.0.5:6006;\n"));
    CHECK(strstr(text, "        i-ab23cd45ef67-8888 10.88.0.5:8888;\n"));
    CHECK(!strstr(text, "bad"));
    CHECK(!strstr(text, "10.88.0.7"));
    CHECK(strstr(text, "proxy_pass http://127.0.0.1:7070/v1/nodes/n-ab23cd45ef67/proxy/auth;"));
    CHECK(strstr(text, "proxy_set_header Authorization \"Bearer " NODE_TOKEN "\";"));
    /* one host value: routing and the question to suanlid both use $host */
    CHECK(strstr(text, "map $host $suanli_service"));
    CHECK(strstr(text, "proxy_set_header X-Original-Host $host;"));
    CHECK(!strstr(text, "$http_host;\n            proxy_set_header X-Original"));
    CHECK(strstr(text, "proxy_pass_request_headers off;"));
    CHECK(!strstr(text, "proxy_ssl_verify"));
    /* over https the token goes to a verified suanlid only */
    struct proxy_settings tls = s;
    tls.auth_url = "https://suanli.example.com";
    cleanup_free char *tls_text = proxy_config(&tls, routes, 0);
    CHECK(tls_text && strstr(tls_text, "proxy_ssl_verify on;"));
    CHECK(tls_text && strstr(tls_text, "proxy_ssl_server_name on;"));
    CHECK(strstr(text, "listen 127.0.0.1:1 default_server;"));
    CHECK(strstr(text, "auth_request /_suanli/auth;"));
    CHECK(!strstr(text, "user nobody"));
    /* the same routes give the same text: no reload */
    cleanup_free char *again = proxy_config(&s, routes, 4);
    CHECK_STR(text, again);

    /* nginx itself accepts it */
    cleanup_free char *conf = xasprintf("%s/nginx.conf", dir);
    cleanup_free char *tmp = xasprintf("%s/tmp", dir);
    cleanup_free char *prefix = xasprintf("%s/", dir);
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(fs_mkdir_p(tmp, 0700, &err), 0);
    CHECK_EQ_INT(sl_file_write(conf, text, strlen(text), 0600, 0, &err), 0);
    const char *argv[] = { "nginx", "-t", "-q", "-p", prefix, "-c", conf, NULL };
    struct sl_subprocess sp = { .argv = argv };
    int rc = sl_subprocess_run(&sp, &err);
    if (rc < 0)
        printf("  (nginx is not installed: `nginx -t` skipped)\n");
    else
        CHECK_EQ_INT(rc, 0);
    fs_remove_tree(dir, &err);
}

/* The terminal's server block (node/terminal.h): its own server for
 * ID-terminal hosts, the same auth subrequest (now with the Origin), the
 * key only towards the agent's socket, hostile socket paths and keys
 * refused. */
TEST(proxy_config_terminal)
{
    char dir[] = "/tmp/suanli-proxy-XXXXXX";
    if (!CHECK(mkdtemp(dir)))
        return;
    struct proxy_settings s = { .dir = dir,
                                .listen = "127.0.0.1:1",
                                .auth_url = "http://127.0.0.1:7070",
                                .node_id = "n-ab23cd45ef67",
                                .node_token = NODE_TOKEN,
                                .terminal_socket = "/run/suanli-node/terminal-n-ab23cd45ef67.sock",
                                .terminal_key = "feedc0ffee4242ab" };
    const struct proxy_route routes[] = { { "i-ab23cd45ef67", "10.88.0.5", 6006 } };
    cleanup_free char *text = proxy_config(&s, routes, 1);
    if (!CHECK(text))
        return;
    CHECK(strstr(text, "server_name \"~^i-[a-z0-9-]+-terminal\\.\";"));
    CHECK(strstr(text, "proxy_pass http://unix:/run/suanli-node/terminal-n-ab23cd45ef67.sock:;"));
    CHECK(strstr(text, "proxy_set_header X-Original-Origin $http_origin;"));
    /* the key appears twice: in the terminal's location and in the files'
     * (server/files.h), both to the agent's socket, never towards an instance */
    const char *key = strstr(text, "X-Suanli-Terminal-Key feedc0ffee4242ab;");
    const char *key2 = key ? strstr(key + 38, "X-Suanli-Terminal-Key feedc0ffee4242ab;") : NULL;
    CHECK(key && key2 && !strstr(key2 + 38, "feedc0ffee4242ab") &&
          strstr(text, "feedc0ffee4242ab") == key + 22 &&
          strstr(key + 38, "feedc0ffee4242ab") == key2 + 22);
    CHECK(key && strstr(text, "-terminal\\.") < key);
    CHECK(key2 && strstr(text, "-files\\.") < key2 && strstr(text, "-files\\.") > key);
    CHECK(strstr(text, "add_header Access-Control-Allow-Origin $suanli_files_origin always;"));
    /* three auth locations, each with the node's token */
    const char *first = strstr(text, "location = /_suanli/auth {");
    const char *second = first ? strstr(first + 1, "location = /_suanli/auth {") : NULL;
    CHECK(second && strstr(second + 1, "location = /_suanli/auth {"));
    struct proxy_settings bad = s;
    const char *bad_sockets[] = { "relative.sock", "/run/a:b.sock", "/run/a b.sock",
                                  "/run/a;b",      "/run/a\"b",     "/run/$x.sock" };
    for (size_t i = 0; i < sizeof(bad_sockets) / sizeof(bad_sockets[0]); i++) {
        bad.terminal_socket = bad_sockets[i];
        char *t = proxy_config(&bad, routes, 1);
        CHECK(t == NULL);
        free(t);
    }
    bad = s;
    bad.terminal_key = "k; include /etc/passwd";
    char *t = proxy_config(&bad, routes, 1);
    CHECK(t == NULL);
    free(t);
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *tmp = xasprintf("%s/tmp", dir);
    CHECK_EQ_INT(fs_mkdir_p(tmp, 0700, &err), 0);
    int rc = nginx_test(dir, text, &err);
    if (rc < 0)
        printf("  (nginx is not installed: `nginx -t` skipped)\n");
    else
        CHECK_EQ_INT(rc, 0);
    fs_remove_tree(dir, &err);
}

TEST(ports_parse_terminal_host)
{
    char id[SL_ID_MAX];
    CHECK(ports_parse_terminal_host("i-ab23cd45ef67-terminal.localhost", "localhost", id));
    CHECK_STR(id, "i-ab23cd45ef67");
    CHECK(ports_parse_terminal_host("I-AB23CD45EF67-Terminal.LocalHost.:8080", "localhost", id));
    CHECK_STR(id, "i-ab23cd45ef67");
    CHECK(!ports_parse_terminal_host("i-ab23cd45ef67-6006.localhost", "localhost", id));
    CHECK(!ports_parse_terminal_host("i-ab23cd45ef67-terminal.evil.example", "localhost", id));
    /* the files host (server/files.h): its own label, never a terminal's */
    CHECK(ports_parse_files_host("i-ab23cd45ef67-files.localhost:8080", "localhost", id));
    CHECK_STR(id, "i-ab23cd45ef67");
    CHECK(!ports_parse_files_host("i-ab23cd45ef67-terminal.localhost", "localhost", id));
    CHECK(!ports_parse_terminal_host("i-ab23cd45ef67-files.localhost", "localhost", id));
    CHECK(!ports_parse_files_host("i-ab23cd45ef67files.localhost", "localhost", id));
    CHECK(!ports_parse_files_host("-files.localhost", "localhost", id));
    CHECK(!ports_parse_files_host("i-ab23cd45ef67-files.evil.example", "localhost", id));
    CHECK(!ports_parse_terminal_host("x.i-ab23cd45ef67-terminal.localhost", "localhost", id));
    CHECK(!ports_parse_terminal_host("-terminal.localhost", "localhost", id));
    CHECK(!ports_parse_terminal_host("i-ab23cd45ef67-terminalx.localhost", "localhost", id));
    CHECK(!ports_parse_terminal_host(NULL, "localhost", id));
    int64_t port;
    /* a service host never reads as a terminal, nor a terminal as a port */
    CHECK(!ports_parse_host("i-ab23cd45ef67-terminal.localhost", "localhost", id, &port));
}

/* The seeded variants of proxy_config: xorshift64*, so a failure replays
 * with SUANLI_TEST_SEED=N. */
static uint64_t rng;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
}

static size_t pick(size_t n)
{
    return (size_t)(rnd() % n);
}

/* Settings nginx must get, and settings that must make proxy_config refuse
 * (each holds "INJ", which must never reach a configuration). */
static const char *const good_listen[] = { "127.0.0.1:1", "8080", "[::1]:18080", "0.0.0.0:65535",
                                           "[::]:80" };
static const char *const bad_listen[] = {
    "",
    "0",
    "65536",
    "INJ:80",
    "1.2.3.4:80; include /INJ",
    "80 ssl INJ",
    "[::1]",
    "unix:/INJ",
    "1.2.3.4:80\n}INJ",
    "'80'INJ",
    "1.2.3.4:99999",
};
/* names are resolved when nginx starts: localhost only, the test has no DNS */
static const char *const good_auth[] = { "http://127.0.0.1:7070", "http://127.0.0.1:7070/",
                                         "https://localhost", "http://[::1]:7070/base/",
                                         "http://localhost:1" };
static const char *const bad_auth[] = { "ftp://INJ",     "http://x/;}INJ", "http://x\"INJ",
                                        "http://$INJ/",  "http://",        "http:///INJ",
                                        "http://a INJ",  "http://x#INJ",   "http://x\nINJ",
                                        "http://x'INJ{}" };
static const char *const good_node[] = { "n-ab23cd45ef67", "node_1", "N-X" };
static const char *const bad_node[] = { "",      "n-1;INJ",  "n\"INJ", "n INJ",
                                        "n$INJ", "n/../INJ", "n\nINJ" };
static const char *const good_token[] = { NODE_TOKEN, "sl_x" };
static const char *const bad_token[] = { "tok\"INJ", "tok;INJ", "",      "t\nINJ",
                                         "t$INJ",    "t{INJ}",  "t\\INJ" };
static const char *const bad_dir_suffix[] = { " INJ",  "\"INJ", "$INJ", ";INJ", "{INJ",
                                              "\nINJ", "}INJ",  "#INJ", "\\INJ" };
static const char *const bad_ip[] = { "10.0.0.1; INJ", "::1",           "999.1.1.1",    "",
                                      "10.0.0.1:80",   "10.0.0.1\nINJ", "10.0.0.1 INJ", "INJ" };

#define PICK(list) list[pick(ARRAY_SIZE(list))]

/* An id: mostly a real one, else random bytes (hostile ones included). */
static char *random_id(void)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789-"
                                   "ABC_;{}\"'$#\\ \n\t.:/~*INJ";
    if (pick(3) != 0) {
        char id[16] = "i-";
        for (size_t i = 2; i < 14; i++)
            id[i] = alphabet[pick(36)];
        return xstrdup(id);
    }
    size_t n = pick(80);
    char *id = xmalloc(n + 3);
    memcpy(id, pick(4) ? "i-" : "x-", 2);
    for (size_t i = 2; i < n + 2; i++)
        id[i] = alphabet[pick(sizeof(alphabet) - 1)];
    id[n + 2] = '\0';
    return id;
}

/* The oracle for a route, written apart from nginx.c's check. */
static bool route_expected(const struct proxy_route *r)
{
    struct in_addr a;
    size_t n = strlen(r->id);
    if (n < 3 || n > 63 || strncmp(r->id, "i-", 2) != 0 || !r->ip ||
        inet_pton(AF_INET, r->ip, &a) != 1 || r->port < 1 || r->port > 65535)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)r->id[i]) && !isdigit((unsigned char)r->id[i]) &&
            r->id[i] != '-')
            return false;
    return true;
}

static size_t count_lines_like_routes(const char *text)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, "\n        i-")); p++) {
        char id[80];
        unsigned port, a, b, c, d, port2;
        char end;
        if (sscanf(p + 9, "%79[a-z0-9-] %u.%u.%u.%u:%u%c", id, &a, &b, &c, &d, &port2, &end) == 7 &&
            end == ';') {
            char *dash = strrchr(id, '-');
            if (dash && sscanf(dash + 1, "%u", &port) == 1 && port == port2 && a < 256 && b < 256 &&
                c < 256 && d < 256)
                n++;
        }
    }
    return n;
}

static int nginx_test(const char *dir, const char *text, struct sl_error *err)
{
    cleanup_free char *conf = xasprintf("%s/nginx.conf", dir);
    cleanup_free char *prefix = xasprintf("%s/", dir);
    if (sl_file_write(conf, text, strlen(text), 0600, 0, err) < 0)
        return -1;
    const char *argv[] = { "nginx", "-t", "-q", "-p", prefix, "-c", conf, NULL };
    struct sl_buf out;
    sl_buf_init(&out);
    struct sl_subprocess sp = { .argv = argv, .err = &out };
    int rc = sl_subprocess_run(&sp, err);
    if (rc > 0)
        printf("  nginx -t: %.*s\n", (int)out.len, out.data ? out.data : "");
    sl_buf_release(&out);
    return rc;
}

TEST(proxy_config_variants)
{
    char dir[] = "/tmp/suanli-proxy-XXXXXX";
    struct sl_error err = SL_ERROR_INIT;
    const char *seed_env = getenv("SUANLI_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20261201;
    const int variants = 400;
    int nginx_runs = 0;
    bool have_nginx = true;

    if (!CHECK(mkdtemp(dir)))
        return;
    /* a directory of characters nginx takes inside quotes */
    cleanup_free char *odd = xasprintf("%s/odd+dir@x,(1)'", dir);
    cleanup_free char *odd_tmp = xasprintf("%s/tmp", odd);
    CHECK_EQ_INT(fs_mkdir_p(odd_tmp, 0700, &err), 0);
    rng = seed ? seed : 1;
    for (int v = 0; v < variants && test_ok(); v++) {
        bool valid = true;
        struct proxy_settings s = { .dir = odd,
                                    .listen = PICK(good_listen),
                                    .auth_url = PICK(good_auth),
                                    .node_id = PICK(good_node),
                                    .node_token = PICK(good_token),
                                    .drop_privileges = geteuid() == 0 && pick(2) };
        cleanup_free char *bad_dir = NULL;
        /* one setting in four variants is hostile */
        if (pick(4) == 0) {
            valid = false;
            switch (pick(5)) {
            case 0:
                s.listen = PICK(bad_listen);
                break;
            case 1:
                s.auth_url = PICK(bad_auth);
                break;
            case 2:
                s.node_id = PICK(bad_node);
                break;
            case 3:
                s.node_token = PICK(bad_token);
                break;
            default:
                s.dir = bad_dir = pick(5) ? xasprintf("%s%s", odd, PICK(bad_dir_suffix))
                                          : xstrdup("relative/INJ");
            }
        }
        size_t n = pick(8) == 0 ? pick(400) : pick(12), want = 0;
        struct proxy_route *routes = xcalloc(n + 1, sizeof(*routes));
        char(*ips)[32] = xcalloc(n + 1, sizeof(*ips));
        for (size_t i = 0; i < n; i++) {
            /* a few repeat an earlier route's key */
            if (i > 0 && pick(10) == 0) {
                routes[i] = routes[pick(i)];
                routes[i].id = xstrdup(routes[i].id);
            } else {
                routes[i].id = random_id();
                routes[i].port = pick(6) == 0
                                     ? (unsigned)PICK(((unsigned[]){ 0, 65536, 4294967295u }))
                                 : pick(2) == 0 ? 1 + (unsigned)pick(65535)
                                                : 6006 + (unsigned)pick(3);
            }
            if (pick(8) == 0) {
                routes[i].ip = PICK(bad_ip);
            } else {
                snprintf(ips[i], sizeof(ips[i]), "10.%zu.%zu.%zu", pick(256), pick(256),
                         1 + pick(254));
                routes[i].ip = ips[i];
            }
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++)
                seen = route_expected(&routes[j]) && routes[j].port == routes[i].port &&
                       strcmp(routes[j].id, routes[i].id) == 0;
            want += route_expected(&routes[i]) && !seen;
        }
        cleanup_free char *text = proxy_config(&s, routes, n);
        if (!valid) {
            if (!CHECK(!text))
                printf("  seed %llu variant %d: accepted hostile settings\n",
                       (unsigned long long)seed, v);
        } else if (CHECK(text)) {
            CHECK(!strstr(text, "INJ"));
            if (!CHECK_EQ_INT(count_lines_like_routes(text), want))
                printf("  seed %llu variant %d\n", (unsigned long long)seed, v);
            if (have_nginx) {
                int rc = nginx_test(odd, text, &err);
                if (rc < 0) {
                    printf("  (nginx is not installed: `nginx -t` skipped)\n");
                    have_nginx = false;
                } else if (!CHECK_EQ_INT(rc, 0)) {
                    printf("  seed %llu variant %d: nginx -t refused it\n",
                           (unsigned long long)seed, v);
                }
                nginx_runs++;
            }
        }
        for (size_t i = 0; i < n; i++)
            free((char *)routes[i].id);
        free(routes);
        free(ips);
    }
    printf("  %d variants (seed %llu), %d checked with nginx -t\n", variants,
           (unsigned long long)seed, nginx_runs);
    fs_remove_tree(dir, &err);
}
