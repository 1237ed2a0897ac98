/* Points in time a person types: "02:00" (the next time the local clock
 * shows it), or an RFC 3339 time with its offset. Used by `suanli stop
 * --at` and by the API's scheduled stop. */
#ifndef SL_WHEN_H
#define SL_WHEN_H

#include <stdint.h>

#include "error.h"

/* An RFC 3339 time, "2026-01-31T02:00:00Z", "2026-01-31T02:00:00+08:00",
 * fractions of a second ignored (a lowercase t, z or a space for T are
 * accepted too); fills Unix seconds. SL_E_INVALID "invalid_time" with a
 * message that shows the form otherwise. */
int sl_rfc3339_parse(const char *text, int64_t *out, struct sl_error *err);

/* "HH:MM" or "HH:MM:SS" of the local clock: the first such moment after
 * now (tomorrow when today's has passed, also across a daylight saving
 * change); or anything sl_rfc3339_parse takes. */
int sl_when_parse(const char *text, int64_t now, int64_t *out, struct sl_error *err);

#endif
