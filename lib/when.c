#include "when.h"

#include <ctype.h>
#include <string.h>
#include <time.h>

/* n decimal digits at p into *v. */
static bool digits(const char *p, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return false;
        *v = *v * 10 + (p[i] - '0');
    }
    return true;
}

static int bad_time(const char *text, struct sl_error *err)
{
    return sl_fail(err, SL_E_INVALID, "invalid_time",
                   "'%s' is not a time: give HH:MM (the next time the clock shows it) or an RFC "
                   "3339 time such as 2026-01-31T02:00:00Z or 2026-01-31T02:00:00+08:00",
                   text);
}

static bool leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int sl_rfc3339_parse(const char *text, int64_t *out, struct sl_error *err)
{
    static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    int y, mo, d, h, mi, s, oh = 0, om = 0;
    const char *p = text;

    if (strlen(text) < 20 || !digits(p, 4, &y) || p[4] != '-' || !digits(p + 5, 2, &mo) ||
        p[7] != '-' || !digits(p + 8, 2, &d) || (p[10] != 'T' && p[10] != 't' && p[10] != ' ') ||
        !digits(p + 11, 2, &h) || p[13] != ':' || !digits(p + 14, 2, &mi) || p[16] != ':' ||
        !digits(p + 17, 2, &s))
        return bad_time(text, err);
    p += 19;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return bad_time(text, err);
        while (isdigit((unsigned char)*p))
            p++;
    }
    int sign = 0;
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0')
        sign = 0;
    else if ((*p == '+' || *p == '-') && strlen(p) == 6 && digits(p + 1, 2, &oh) && p[3] == ':' &&
             digits(p + 4, 2, &om) && oh < 24 && om < 60)
        sign = *p == '+' ? 1 : -1;
    else
        return bad_time(text, err);
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 ||
        d > mdays[mo - 1] + (mo == 2 && leap(y) ? 1 : 0) || h > 23 || mi > 59 || s > 60)
        return bad_time(text, err);
    struct tm tm = { .tm_year = y - 1900,
                     .tm_mon = mo - 1,
                     .tm_mday = d,
                     .tm_hour = h,
                     .tm_min = mi,
                     .tm_sec = s > 59 ? 59 : s };
    *out = (int64_t)timegm(&tm) - sign * (oh * 3600 + om * 60);
    return 0;
}

int sl_when_parse(const char *text, int64_t now, int64_t *out, struct sl_error *err)
{
    int h, mi, s = 0;
    size_t len = strlen(text);

    if (len != 5 && len != 8)
        return sl_rfc3339_parse(text, out, err);
    if (!digits(text, 2, &h) || text[2] != ':' || !digits(text + 3, 2, &mi) ||
        (len == 8 && (text[5] != ':' || !digits(text + 6, 2, &s))) || h > 23 || mi > 59 || s > 59)
        return bad_time(text, err);
    time_t t = (time_t)now;
    struct tm tm;
    localtime_r(&t, &tm);
    /* today at that time, else tomorrow; mktime finds the offset of the
     * day itself (tm_isdst -1), so a daylight saving change is no matter */
    for (int day = 0; day < 3; day++) {
        struct tm want = tm;
        want.tm_mday += day;
        want.tm_hour = h;
        want.tm_min = mi;
        want.tm_sec = s;
        want.tm_isdst = -1;
        time_t at = mktime(&want);
        if (at != (time_t)-1 && (int64_t)at > now) {
            *out = (int64_t)at;
            return 0;
        }
    }
    return bad_time(text, err);
}
