/* lib/netaddr.c: trusted networks and the keys limits count addresses by;
 * lib/private.c: the sweep that narrows modes in a data directory. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/netaddr.h"
#include "../../lib/private.h"
#include "../../lib/xalloc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static struct sockaddr_in v4(const char *text)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    inet_pton(AF_INET, text, &sa.sin_addr);
    return sa;
}

static struct sockaddr_in6 v6(const char *text)
{
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6 };
    inet_pton(AF_INET6, text, &sa.sin6_addr);
    return sa;
}

TEST(net_list_parse_and_match)
{
    struct sl_error err = SL_ERROR_INIT;
    struct sl_net_list list;

    if (!CHECK(sl_net_list_parse(" 10.0.0.0/8, 192.0.2.7 2001:db8::/32,::1", &list, &err) == 0))
        return;
    CHECK_EQ_INT(list.n, 4);
    struct sockaddr_in a = v4("10.200.3.4"), b = v4("11.0.0.1"), c = v4("192.0.2.7"),
                       d = v4("192.0.2.8");
    CHECK(sl_net_list_has(&list, (struct sockaddr *)&a));
    CHECK(!sl_net_list_has(&list, (struct sockaddr *)&b));
    CHECK(sl_net_list_has(&list, (struct sockaddr *)&c));
    CHECK(!sl_net_list_has(&list, (struct sockaddr *)&d));
    struct sockaddr_in6 e = v6("2001:db8:ffff::1"), f = v6("2001:db9::1"), g = v6("::1"),
                        mapped = v6("::ffff:10.1.2.3");
    CHECK(sl_net_list_has(&list, (struct sockaddr *)&e));
    CHECK(!sl_net_list_has(&list, (struct sockaddr *)&f));
    CHECK(sl_net_list_has(&list, (struct sockaddr *)&g));
    /* an IPv4-mapped peer is the IPv4 address */
    CHECK(sl_net_list_has(&list, (struct sockaddr *)&mapped));
    CHECK(sl_net_list_has_text(&list, "10.9.9.9"));
    CHECK(!sl_net_list_has_text(&list, "not an address"));
    CHECK(!sl_net_list_has_text(&list, ""));
    sl_net_list_release(&list);

    CHECK(sl_net_list_parse("", &list, &err) == 0 && list.n == 0);
    sl_net_list_release(&list);
    CHECK(sl_net_list_parse("0.0.0.0/0", &list, &err) == 0 &&
          sl_net_list_has(&list, (struct sockaddr *)&b));
    sl_net_list_release(&list);
    static const char *const bad[] = { "10.0.0.0/33",   "::/129",      "10.0.0.0/", "10.0.0/8",
                                       "proxy.example", "10.0.0.1/-1", "1.2.3.4/8x" };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        sl_error_clear(&err);
        CHECK(sl_net_list_parse(bad[i], &list, &err) < 0);
        CHECK_STR(err.code, "invalid_network");
    }
}

TEST(limit_keys_group_ipv6_by_64)
{
    char key[SL_ADDR_TEXT_MAX];

    sl_addr_limit_key("192.0.2.1", key);
    CHECK_STR(key, "192.0.2.1");
    sl_addr_limit_key("2001:db8:1:2:aaaa:bbbb:cccc:dddd", key);
    CHECK_STR(key, "2001:db8:1:2::/64");
    sl_addr_limit_key("::ffff:192.0.2.9", key);
    CHECK_STR(key, "192.0.2.9");
    sl_addr_limit_key("unknown", key);
    CHECK_STR(key, "unknown");

    unsigned char k1[17], k2[17], k3[17];
    struct sockaddr_in6 a = v6("2001:db8:1:2::1"), b = v6("2001:db8:1:2:ffff::9"),
                        c = v6("2001:db8:1:3::1");
    CHECK(sl_addr_limit_key_bin((struct sockaddr *)&a, k1));
    CHECK(sl_addr_limit_key_bin((struct sockaddr *)&b, k2));
    CHECK(sl_addr_limit_key_bin((struct sockaddr *)&c, k3));
    CHECK(memcmp(k1, k2, sizeof(k1)) == 0);
    CHECK(memcmp(k1, k3, sizeof(k1)) != 0);
    struct sockaddr_in d = v4("192.0.2.9");
    struct sockaddr_in6 e = v6("::ffff:192.0.2.9");
    CHECK(sl_addr_limit_key_bin((struct sockaddr *)&d, k1));
    CHECK(sl_addr_limit_key_bin((struct sockaddr *)&e, k2));
    CHECK(memcmp(k1, k2, sizeof(k1)) == 0);

    char text[SL_ADDR_TEXT_MAX];
    sl_addr_format((struct sockaddr *)&e, text);
    CHECK_STR(text, "192.0.2.9");
    sl_addr_format(NULL, text);
    CHECK_STR(text, "unknown");
    CHECK(sl_addr_valid("2001:db8::1") && sl_addr_valid("127.0.0.1"));
    CHECK(!sl_addr_valid("127.0.0.1:80") && !sl_addr_valid(" 127.0.0.1") && !sl_addr_valid(""));
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? st.st_mode & 07777 : (mode_t)-1;
}

static bool skip_keep(const char *relative)
{
    return strcmp(relative, "keep") == 0;
}

static void count(void *ctx, const char *path, mode_t was, mode_t now)
{
    (void)path;
    (void)was;
    (void)now;
    ++*(int *)ctx;
}

TEST(private_dir_and_sweep)
{
    struct sl_error err = SL_ERROR_INIT;
    char tmpl[] = "/tmp/test-private-XXXXXX";
    if (!CHECK(mkdtemp(tmpl)))
        return;
    cleanup_free char *data = xasprintf("%s/a/data", tmpl);
    cleanup_free char *file = xasprintf("%s/secret", data);
    cleanup_free char *sub = xasprintf("%s/sub", data);
    cleanup_free char *subfile = xasprintf("%s/sub/f", data);
    cleanup_free char *keep = xasprintf("%s/keep", data);
    cleanup_free char *keepfile = xasprintf("%s/keep/f", data);
    cleanup_free char *link = xasprintf("%s/link", data);
    cleanup_free char *outside = xasprintf("%s/outside", tmpl);
    int changed = 0;

    /* new: 0700, parents too */
    CHECK(sl_private_dir(data, count, &changed, &err) == 0);
    CHECK_EQ_INT(mode_of(data), 0700);
    CHECK_EQ_INT(changed, 0);
    /* existing and open: narrowed, reported */
    chmod(data, 0755);
    CHECK(sl_private_dir(data, count, &changed, &err) == 0);
    CHECK_EQ_INT(mode_of(data), 0700);
    CHECK_EQ_INT(changed, 1);

    close(open(file, O_CREAT | O_WRONLY, 0600));
    chmod(file, 0644);
    mkdir(sub, 0755);
    close(open(subfile, O_CREAT | O_WRONLY, 0600));
    chmod(subfile, 0666);
    mkdir(keep, 0755);
    close(open(keepfile, O_CREAT | O_WRONLY, 0600));
    chmod(keepfile, 0644);
    close(open(outside, O_CREAT | O_WRONLY, 0600));
    chmod(outside, 0644);
    CHECK(symlink(outside, link) == 0);

    changed = 0;
    CHECK_EQ_INT(sl_private_sweep(data, skip_keep, count, &changed, &err), 3);
    CHECK_EQ_INT(changed, 3);
    CHECK_EQ_INT(mode_of(file), 0600);
    CHECK_EQ_INT(mode_of(sub), 0700);
    CHECK_EQ_INT(mode_of(subfile), 0600);
    CHECK_EQ_INT(mode_of(keep), 0755);     /* skipped subtree */
    CHECK_EQ_INT(mode_of(keepfile), 0644); /* ...and what is in it */
    CHECK_EQ_INT(mode_of(outside), 0644);  /* a symlink is not followed */
    CHECK_EQ_INT(sl_private_sweep(data, skip_keep, NULL, NULL, &err), 0);

    /* a file where the directory should be */
    cleanup_free char *notdir = xasprintf("%s/secret/x", data);
    CHECK(sl_private_dir(file, NULL, NULL, &err) < 0);
    CHECK_STR(err.code, "not_a_directory");
    sl_error_clear(&err);
    CHECK(sl_private_dir(notdir, NULL, NULL, &err) < 0);

    cleanup_free char *rm = xasprintf("rm -rf '%s'", tmpl);
    CHECK(system(rm) == 0);
}
