/* server/ports.c (Host parsing, port lists, the access link's token) and
 * node/proxy.c (the nginx configuration, checked with `nginx -t` when nginx
 * is installed). */
#include "harness.h"

#include "../../node/fsutil.h"
#include "../../node/proxy.h"
#include "../../server/ports.h"
#include "../../lib/cleanup.h"
#include "../../lib/subprocess.h"
#include "../../lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
    CHECK(!ports_uri_token("/?xsuanli_token=abc", t, sizeof(t)));
    CHECK(!ports_uri_token("/suanli_token=abc", t, sizeof(t)));
    CHECK(!ports_uri_token("/?suanli_token=", t, sizeof(t)));
    CHECK(
        !ports_uri_token("/?suanli_token=0123456789012345678901234567890123456789", t, sizeof(t)));
    CHECK(!ports_uri_token(NULL, t, sizeof(t)));
}

TEST(proxy_listen_valid)
{
    CHECK(proxy_listen_valid("8080"));
    CHECK(proxy_listen_valid("0.0.0.0:8080"));
    CHECK(proxy_listen_valid("[::]:8080"));
    CHECK(!proxy_listen_valid(""));
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
                                .auth_url = "http://127.0.0.1:7070/" };
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
    CHECK(strstr(text, "proxy_pass http://127.0.0.1:7070/v1/proxy/auth;"));
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
    CHECK_EQ_INT(fs_write_file(conf, text, strlen(text), 0600, &err), 0);
    const char *argv[] = { "nginx", "-t", "-q", "-p", prefix, "-c", conf, NULL };
    struct sl_subprocess sp = { .argv = argv };
    int rc = sl_subprocess_run(&sp, &err);
    if (rc < 0)
        printf("  (nginx is not installed: `nginx -t` skipped)\n");
    else
        CHECK_EQ_INT(rc, 0);
    fs_remove_tree(dir, &err);
}
