#include "timefmt.h"
#include "timeconst.h"

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
    return (int64_t)ts.tv_sec * SL_USEC_PER_SEC + ts.tv_nsec / SL_NSEC_PER_USEC;
}

int64_t sl_time_mono_ms(void)
{
    return sl_time_mono_us() / SL_USEC_PER_MSEC;
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
        mult = SL_SEC_PER_MIN;
        p++;
        break;
    case 'h':
        mult = SL_SEC_PER_HOUR;
        p++;
        break;
    case 'd':
        mult = SL_SEC_PER_DAY;
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
    if (s >= SL_SEC_PER_DAY)
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "d %" PRId64 "h", s / SL_SEC_PER_DAY,
                 s % SL_SEC_PER_DAY / SL_SEC_PER_HOUR);
    else if (s >= SL_SEC_PER_HOUR)
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "h %" PRId64 "m", s / SL_SEC_PER_HOUR,
                 s % SL_SEC_PER_HOUR / SL_SEC_PER_MIN);
    else if (s >= SL_SEC_PER_MIN)
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "m %" PRId64 "s", s / SL_SEC_PER_MIN,
                 s % SL_SEC_PER_MIN);
    else
        snprintf(buf, SL_DURATION_FORMAT_MAX, "%" PRId64 "s", s);
    return buf;
}
