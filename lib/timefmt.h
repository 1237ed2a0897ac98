/* Wall-clock time as int64 Unix seconds, and RFC 3339 UTC strings. */
#ifndef SL_TIMEFMT_H
#define SL_TIMEFMT_H

#include <stdint.h>

#include "error.h"

#define SL_TIME_FORMAT_MAX 32

/* Now, from the process's clock: the wall clock unless a test installed its
 * own with sl_time_set_clock() (NULL puts the wall clock back). Everything
 * that meters or settles money takes "now" from here. */
int64_t sl_time_now(void);
void sl_time_set_clock(int64_t (*now)(void));
/* Monotonic milliseconds and microseconds, for durations. */
int64_t sl_time_mono_ms(void);
int64_t sl_time_mono_us(void);

/* "2026-11-30T03:40:38Z"; buf holds SL_TIME_FORMAT_MAX bytes. */
char *sl_time_format(int64_t t, char *buf);
int sl_time_parse(const char *s, int64_t *out, struct sl_error *err);

/* Durations: "30s", "15m", "2h", "7d", or plain seconds. */
int sl_duration_parse(const char *s, int64_t *seconds, struct sl_error *err);

#define SL_DURATION_FORMAT_MAX 32

/* Its two largest units, for people: "3d 4h", "2h 5m", "1m 30s", "45s"
 * (a negative duration reads "0s"); buf holds SL_DURATION_FORMAT_MAX. */
char *sl_duration_format(int64_t seconds, char *buf);

#endif
