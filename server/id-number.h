/* Identity document numbers for real-name verification. */
#ifndef SL_ID_NUMBER_H
#define SL_ID_NUMBER_H

#include <stddef.h>

#include "../lib/error.h"

#define ID_NUMBER_MAX 33

/* Normalises (trims, uppercases) into out and checks it against format "cn"
 * (GB 11643: 17 digits and a check digit 0-9 or X) or "any". */
int id_number_check(const char *format, const char *in, char *out, struct sl_error *err);

/* "110***********123X": the first 3 and last 4 characters. */
void id_number_mask(const char *number, char *out, size_t out_size);

#endif
