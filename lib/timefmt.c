#include "timefmt.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int64_t wall_clock(void)
{
    return (int64_t)time(NULL);
}

static int64_t (*clock_now)(void) = wall_clock;

int64_t sl_time_now(void)
{
    return clock_now();
}

void sl_time_set_clock(int64_t (*now)(void))
{
    clock_now = now ? now : wall_clock;
}

int64_t sl_time_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t sl_time_mono_ms(void)
{
    return sl_time_mono_us() / 1000;
}

char *sl_time_format(int64_t t, char *buf)
{
    time_t tt = (time_t)t;
    struct tm tm;

    if (!gmtime_r(&tt, &tm))
        snprintf(buf, SL_TIME_FORMAT_MAX, "invalid");
    else
        strftime(buf, SL_TIME_FORMAT_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

int sl_time_parse(const char *s, int64_t *out, struct sl_error *err)
{
    struct tm tm = { 0 };
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);

    if (!end || (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0))
        return sl_fail(err, SL_E_INVALID, "invalid_time",
                       "'%s' is not an RFC 3339 UTC time such as 2026-01-31T12:00:00Z", s);
    *out = (int64_t)timegm(&tm);
    return 0;
}

int sl_duration_parse(const char *s, int64_t *seconds, struct sl_error *err)
{
    const char *p = s;
    int64_t n = 0, mult = 1;

    if (!isdigit((unsigned char)*p))
        goto bad;
    while (isdigit((unsigned char)*p)) {
        if (n > 1000000000000LL)
            goto bad;
        n = n * 10 + (*p++ - '0');
    }
    switch (*p) {
    case '\0':
        break;
    case 's':
        p++;
        break;
    case 'm':
        mult = 60;
        p++;
        break;
    case 'h':
        mult = 3600;
        p++;
        break;
    case 'd':
        mult = 86400;
        p++;
        break;
    default:
        goto bad;
    }
    if (*p != '\0')
        goto bad;
    *seconds = n * mult;
    return 0;
bad:
    return sl_fail(err, SL_E_INVALID, "invalid_duration",
                   "'%s' is not a duration: write a number with s, m, h or d, such as 15m or 7d",
                   s);
}

char *sl_duration_format(int64_t s, char *buf)
{
    if (s < 0)
        s = 0;
    if (s >= 86400)
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "d %" PRId64 "h", s / 86400,
                 s % 86400 / 3600);
    else if (s >= 3600)
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "h %" PRId64 "m", s / 3600, s % 3600 / 60);
    else if (s >= 60)
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "m %" PRId64 "s", s / 60, s % 60);
    else
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "s", s);
    return buf;
}
