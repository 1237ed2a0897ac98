/* The pure parts of notifications (server/notify.c, notify-deliver.c): which
 * addresses a webhook may not reach, the signature a receiver checks, the
 * digest's window, the retry backoff, the kinds, and what an email channel
 * accepts. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../server/notify.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static bool blocked(const char *text)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (strchr(text, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        if (inet_pton(AF_INET6, text, &a->sin6_addr) != 1)
            return false;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        if (inet_pton(AF_INET, text, &a->sin_addr) != 1)
            return false;
    }
    return notify_addr_blocked((struct sockaddr *)&ss);
}

TEST(non_public_addresses_are_blocked)
{
    static const char *const refused[] = {
        "127.0.0.1",
        "127.255.255.254",
        "10.0.0.1",
        "10.255.255.255",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.0.1",
        "169.254.169.254",
        "169.254.0.1",
        "0.0.0.0",
        "0.1.2.3",
        "100.64.0.1",
        "100.127.255.255",
        "224.0.0.1",
        "239.1.2.3",
        "255.255.255.255",
        "240.0.0.1",
        "192.0.2.10",
        "198.18.0.1",
        "::",
        "::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.1.2.3",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::1",
        "2002:a00:1::1",
        "2001:db8::1",
        "::127.0.0.1",
        "fec0::1",
        "2001::1",
    };
    static const char *const allowed[] = {
        "1.1.1.1",         "8.8.8.8",        "93.184.216.34",   "172.15.255.255",
        "172.32.0.1",      "100.63.255.255", "100.128.0.1",     "169.253.255.255",
        "2606:4700::1111", "::ffff:8.8.8.8", "2002:808:808::1", "64:ff9b::808:808",
    };

    for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
        if (!blocked(refused[i]))
            fprintf(stderr, "not blocked: %s\n", refused[i]);
        CHECK(blocked(refused[i]));
    }
    for (size_t i = 0; i < ARRAY_SIZE(allowed); i++) {
        if (blocked(allowed[i]))
            fprintf(stderr, "blocked: %s\n", allowed[i]);
        CHECK(!blocked(allowed[i]));
    }
    CHECK(notify_addr_blocked(NULL));
}

TEST(signature_is_hmac_sha256_over_timestamp_dot_body)
{
    char sig[NOTIFY_SIGNATURE_MAX];
    const char *body = "{\"a\":1}";

    /* python3: hmac.new(b"whsec_test", b'1700000000.{"a":1}', hashlib.sha256) */
    notify_sign("whsec_test", 1700000000, body, strlen(body), sig);
    CHECK_STR(sig, "v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789");
    /* a different time or body signs differently */
    char other[NOTIFY_SIGNATURE_MAX];
    notify_sign("whsec_test", 1700000001, body, strlen(body), other);
    CHECK(strcmp(sig, other) != 0);
    notify_sign("whsec_test", 1700000000, "{\"a\":2}", 7, other);
    CHECK(strcmp(sig, other) != 0);
}

TEST(digest_sends_one_per_window)
{
    const int64_t hour = 3600;

    /* the first of a kind goes out at once */
    CHECK(notify_digest_sends(false, 0, 1000, hour));
    /* within the hour, held back; at the hour, sent */
    CHECK(!notify_digest_sends(true, 1000, 1001, hour));
    CHECK(!notify_digest_sends(true, 1000, 1000 + hour - 1, hour));
    CHECK(notify_digest_sends(true, 1000, 1000 + hour, hour));
    /* what was held is summarised once the window ends, not before */
    CHECK(!notify_digest_flush_due(0, 1000, 1000 + 2 * hour, hour));
    CHECK(!notify_digest_flush_due(5, 1000, 1000 + hour - 1, hour));
    CHECK(notify_digest_flush_due(5, 1000, 1000 + hour, hour));
}

TEST(retry_backoff_doubles_up_to_an_hour)
{
    CHECK_EQ_INT(notify_retry_delay(30, 1), 30);
    CHECK_EQ_INT(notify_retry_delay(30, 2), 60);
    CHECK_EQ_INT(notify_retry_delay(30, 3), 120);
    CHECK_EQ_INT(notify_retry_delay(30, 6), 960);
    CHECK_EQ_INT(notify_retry_delay(30, 20), 3600);
    CHECK_EQ_INT(notify_retry_delay(0, 1), 1);
}

TEST(kinds)
{
    CHECK_STR(notify_kind_of("failed")->kind, "instance_failed");
    CHECK_STR(notify_kind_of("migrate_failed")->kind, "instance_failed");
    CHECK_STR(notify_kind_of("balance_low")->kind, "balance_low");
    CHECK_STR(notify_kind_of("hint")->kind, "hint");
    CHECK(notify_kind_of("running") == NULL);
    CHECK(notify_kind_of("create") == NULL);
    CHECK(notify_kind_known("instance_failed"));
    CHECK(!notify_kind_known("failed"));
    CHECK(!notify_kind_known("confirm"));
}

TEST(email_addresses)
{
    struct sl_error err = SL_ERROR_INIT;

    CHECK_EQ_INT(notify_email_check("you@example.com", &err), 0);
    CHECK_EQ_INT(notify_email_check("a.b+c@mail.example.cn", &err), 0);
    static const char *const bad[] = {
        "",
        "no-at",
        "@example.com",
        "you@",
        "you@localhost",
        "a@b@example.com",
        "you@example.com\r\nBcc: all@example.com",
        "you@example.com>",
        "<you@example.com",
        "you @example.com",
        "\"you\"@example.com",
        "you@example.com, them@example.com",
        "you@ex\xc3\xa4mple.com",
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        CHECK_EQ_INT(notify_email_check(bad[i], &err), -1);
    CHECK_STR(err.code, "invalid_email");
}

TEST(email_text_of_a_delivery)
{
    char *text = notify_text("{\"kind\":\"oom\",\"title\":\"an instance ran out of memory\","
                             "\"instance_id\":\"i-1\",\"held_back\":3,\"held_since\":"
                             "\"2026-12-01T00:00:00Z\",\"event\":{\"state\":\"running\","
                             "\"created_at\":\"2026-12-01T01:00:00Z\",\"message\":\"killed\"}}");
    CHECK_CONTAINS(text, "an instance ran out of memory");
    CHECK_CONTAINS(text, "Instance: i-1");
    CHECK_CONTAINS(text, "and 3 more since 2026-12-01T00:00:00Z");
    CHECK_CONTAINS(text, "suanli notify off oom");
    free(text);
}
