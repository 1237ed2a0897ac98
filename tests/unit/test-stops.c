/* The pure parts of the stops nobody clicks: the idle stop's decision and
 * warning lead (server/stops.c), typed stop times (lib/when.c), SSH sessions
 * counted from /proc/net/tcp (node/activity.c), and the metadata endpoint's
 * gateway and path-free helpers (node/metadata.c). */
#include "harness.h"

#include "../../lib/when.h"
#include "../../node/activity.h"
#include "../../node/metadata.h"
#include "../../server/stops.h"

#include <stdlib.h>
#include <time.h>

TEST(idle_warning_lead_is_five_minutes_or_half_the_period)
{
    CHECK_EQ_INT(idle_warning_lead(1800), 300);
    CHECK_EQ_INT(idle_warning_lead(600), 300);
    CHECK_EQ_INT(idle_warning_lead(300), 150);
    CHECK_EQ_INT(idle_warning_lead(20), 10);
    CHECK_EQ_INT(idle_warning_lead(15), 7);
}

TEST(idle_decide)
{
    /* off, or a clock that went back */
    CHECK_EQ_INT(idle_decide(0, 10000, false), IDLE_NONE);
    CHECK_EQ_INT(idle_decide(1800, -5, false), IDLE_NONE);
    /* 30 minutes: nothing until 25, a warning from 25, the stop at 30 */
    CHECK_EQ_INT(idle_decide(1800, 0, false), IDLE_NONE);
    CHECK_EQ_INT(idle_decide(1800, 1499, false), IDLE_NONE);
    CHECK_EQ_INT(idle_decide(1800, 1500, false), IDLE_WARN);
    CHECK_EQ_INT(idle_decide(1800, 1500, true), IDLE_NONE);
    CHECK_EQ_INT(idle_decide(1800, 1799, true), IDLE_NONE);
    CHECK_EQ_INT(idle_decide(1800, 1800, true), IDLE_STOP);
    /* a loop that missed the warning still stops on time */
    CHECK_EQ_INT(idle_decide(1800, 1900, false), IDLE_STOP);
    /* short periods warn half-way */
    CHECK_EQ_INT(idle_decide(20, 9, false), IDLE_NONE);
    CHECK_EQ_INT(idle_decide(20, 10, false), IDLE_WARN);
    CHECK_EQ_INT(idle_decide(20, 20, true), IDLE_STOP);
}

TEST(rfc3339_times)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t t = 0;

    CHECK_EQ_INT(sl_rfc3339_parse("2026-01-31T02:00:00Z", &t, &err), 0);
    CHECK_EQ_INT(t, 1769824800);
    CHECK_EQ_INT(sl_rfc3339_parse("2026-01-31T10:00:00+08:00", &t, &err), 0);
    CHECK_EQ_INT(t, 1769824800);
    CHECK_EQ_INT(sl_rfc3339_parse("2026-01-30T21:00:00.123-05:00", &t, &err), 0);
    CHECK_EQ_INT(t, 1769824800);
    CHECK_EQ_INT(sl_rfc3339_parse("2024-02-29t00:00:00z", &t, &err), 0);
    static const char *const bad[] = {
        "",
        "tomorrow",
        "2026-01-31",
        "2026-01-31T02:00",
        "2026-01-31T02:00:00",
        "2026-02-30T02:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-01-31T24:00:00Z",
        "2026-01-31T02:00:00+0800",
        "2026-01-31T02:00:00Zjunk",
        "2026-01-31T02:00:00.Z",
        "1969-12-31T23:59:59Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_error_clear(&err);
        if (!CHECK_EQ_INT(sl_rfc3339_parse(bad[i], &t, &err), -1))
            test_fail(__FILE__, __LINE__, "accepted '%s'", bad[i]);
        CHECK_STR(err.code, "invalid_time");
    }
}

TEST(clock_times_are_the_next_occurrence)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t t = 0;
    /* UTC here, so the arithmetic is plain; mktime does the zone work */
    setenv("TZ", "UTC", 1);
    tzset();
    int64_t now = 1769824800; /* 2026-01-31 02:00:00 */

    CHECK_EQ_INT(sl_when_parse("03:30", now, &t, &err), 0);
    CHECK_EQ_INT(t, now + 5400);
    CHECK_EQ_INT(sl_when_parse("02:00", now, &t, &err), 0); /* now is not later: tomorrow */
    CHECK_EQ_INT(t, now + 86400);
    CHECK_EQ_INT(sl_when_parse("01:59:59", now, &t, &err), 0);
    CHECK_EQ_INT(t, now + 86399);
    CHECK_EQ_INT(sl_when_parse("2026-02-01T00:00:00Z", now, &t, &err), 0);
    CHECK_EQ_INT(t, now + 22 * 3600);
    /* across a daylight saving change (Berlin, 2026-03-29 02:00 -> 03:00) */
    setenv("TZ", "Europe/Berlin", 1);
    tzset();
    int64_t before = 1774738800; /* 2026-03-28 23:00 CET = 22:00 UTC */
    CHECK_EQ_INT(sl_when_parse("12:00", before, &t, &err), 0);
    CHECK_EQ_INT(t, 1774778400); /* 2026-03-29 12:00 CEST = 10:00 UTC */
    static const char *const bad[] = { "25:00", "12:60", "1:00", "12-00", "12:00:61", "noon" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(sl_when_parse(bad[i], now, &t, &err), -1);
    unsetenv("TZ");
    tzset();
}

TEST(ssh_sessions_from_proc_net_tcp)
{
    const char *tcp =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
        "   1: 0500590A:0016 0100590A:C350 01 00000000:00000000 02:000A7D4A 00000000     0\n"
        "   2: 0500590A:0016 0100590A:C352 01 00000000:00000000 02:000A7D4A 00000000     0\n"
        "   3: 0500590A:0016 0100590A:C354 06 00000000:00000000 03:00001000 00000000     0\n"
        "   4: 0500590A:D431 0101A8C0:0016 01 00000000:00000000 00:00000000 00000000     0\n"
        "   5: 0500590A:1776 0100590A:C360 01 00000000:00000000 00:00000000 00000000     0\n";
    const char *tcp6 =
        "  sl  local_address                         remote_address                        st\n"
        "   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A\n"
        "   1: 0000000000000000FFFF00000500590A:0016 0000000000000000FFFF00000100590A:C400 01\n";

    /* listening (0A), TIME_WAIT (06) and our own outgoing SSH do not count */
    CHECK_EQ_INT(activity_count_established(tcp, 22), 2);
    CHECK_EQ_INT(activity_count_established(tcp6, 22), 1);
    CHECK_EQ_INT(activity_count_established(tcp, 6006), 1);
    CHECK_EQ_INT(activity_count_established("", 22), 0);
    CHECK_EQ_INT(activity_count_established(NULL, 22), 0);
    CHECK_EQ_INT(activity_count_established("header only\n", 22), 0);
    CHECK_EQ_INT(activity_count_established("h\n garbage\n 1: x:zz y 01\n", 22), 0);
}

/* a desktop session is one websocket to the desktop's port (6080 = 0x17C0):
 * without counting it, a renter working only in the desktop looks idle */
TEST(desktop_connections_are_sessions)
{
    const char *tcp =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: 00000000:17C0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
        "   1: 0500590A:17C0 0100590A:C350 01 00000000:00000000 02:000A7D4A 00000000     0\n"
        "   2: 0100007F:170D 0100007F:D000 01 00000000:00000000 02:000A7D4A 00000000     0\n"
        "   3: 0500590A:0016 0100590A:C352 01 00000000:00000000 02:000A7D4A 00000000     0\n";

    CHECK_EQ_INT(activity_count_sessions(tcp, 6080), 2);
    CHECK_EQ_INT(activity_count_sessions(tcp, 0), 1); /* no desktop: SSH only */
    CHECK_EQ_INT(activity_count_sessions(NULL, 6080), 0);
}

TEST(metadata_gateway_is_the_first_address)
{
    struct sl_error err = SL_ERROR_INIT;
    char gw[64];

    CHECK_EQ_INT(metadata_gateway("10.88.0.0/16", gw, &err), 0);
    CHECK_STR(gw, "10.88.0.1");
    CHECK_EQ_INT(metadata_gateway("192.168.7.0/24", gw, &err), 0);
    CHECK_STR(gw, "192.168.7.1");
    CHECK_EQ_INT(metadata_gateway("fd00::/64", gw, &err), -1);
    CHECK_EQ_INT(metadata_gateway("nonsense", gw, &err), -1);
}
