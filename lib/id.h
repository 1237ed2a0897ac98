/* Short, URL-safe ids typed by prefix: "u-", "i-", "n-", "img-", "tok-", ...
 * (DESIGN.md section 8). */
#ifndef SL_ID_H
#define SL_ID_H

#include <stdbool.h>
#include <stddef.h>

#define SL_ID_MAX 32

/* Writes prefix + 12 random lowercase base32 characters (60 bits) into buf,
 * which holds SL_ID_MAX bytes. */
char *sl_id_new(char *buf, const char *prefix);

/* True if s looks like an id of this prefix: only [a-z0-9-], bounded length. */
bool sl_id_valid(const char *s, const char *prefix);

#endif
