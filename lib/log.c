#include "log.h"
#include "timeconst.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum sl_log_level sl_log_threshold = SL_LOG_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void sl_log_write(enum sl_log_level level, const char *fmt, ...)
{
    char line[2048], stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    n = snprintf(line, sizeof(line), "%s.%03ldZ %-5s ", stamp, ts.tv_nsec / SL_NSEC_PER_MSEC,
                 level_names[level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* one write per line so concurrent threads do not interleave */
    fprintf(stderr, "%s\n", line);
}

int sl_log_level_parse(const char *s)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
        if (strcmp(s, level_names[i]) == 0)
            return (int)i;
    return -1;
}
