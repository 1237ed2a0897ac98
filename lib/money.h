/* Money is int64 micros (1/1,000,000 of the currency unit), never a double.
 * Every operation is overflow-checked; this is the one module that does the
 * arithmetic and the formatting (DESIGN.md section 4). */
#ifndef SL_MONEY_H
#define SL_MONEY_H

#include <stdint.h>
#include <stddef.h>

#include "error.h"

#define SL_MICROS_PER_UNIT  1000000LL
#define SL_MONEY_FORMAT_MAX 32

/* *out = a + b; fails with code "amount_out_of_range" on overflow, leaving
 * *out unchanged. */
int sl_money_add(int64_t a, int64_t b, int64_t *out, struct sl_error *err);
int sl_money_sub(int64_t a, int64_t b, int64_t *out, struct sl_error *err);
/* *out = a * n (a count of units, e.g. GPUs). */
int sl_money_mul(int64_t a, int64_t n, int64_t *out, struct sl_error *err);

/* charged = floor(rate_per_hour * elapsed_s / 3600), the cost of an interval
 * from its start (DESIGN.md section 4). rate and elapsed must be >= 0. */
int sl_money_charged(int64_t rate_per_hour, int64_t elapsed_s, int64_t *out, struct sl_error *err);

/* floor(amount * elapsed_s / period_s): the share of amount (per period) an
 * interval of elapsed_s seconds costs, counted from the interval's start.
 * amount, elapsed >= 0, period > 0. */
int sl_money_prorate(int64_t amount, int64_t elapsed_s, int64_t period_s, int64_t *out,
                     struct sl_error *err);

/* floor(amount * 3600 / period_s): the hourly rate of an amount charged per
 * period_s (a meter's rate per hour). amount >= 0, period > 0. */
int sl_money_per_hour(int64_t amount, int64_t period_s, int64_t *out, struct sl_error *err);

/* floor(amount * percent / 100): a discounted price, rounded down so the
 * discount never costs. amount, percent >= 0. */
int sl_money_percent(int64_t amount, int64_t percent, int64_t *out, struct sl_error *err);

/* What is left of paid once used of it is spent, never below 0 (a refund of
 * the unused part). paid, used >= 0. */
int sl_money_unused(int64_t paid, int64_t used, int64_t *out, struct sl_error *err);

/* floor(rate_per_gib_day * gib * elapsed_s / 86400), for storage. */
int sl_money_charged_gib_day(int64_t rate_per_gib_day, int64_t gib, int64_t elapsed_s, int64_t *out,
                             struct sl_error *err);

/* Seconds a balance lasts at rate micros/hour; INT64_MAX when rate is 0, 0
 * when the balance is not positive. */
int64_t sl_money_covers_seconds(int64_t balance, int64_t rate_per_hour);

/* Parses a decimal amount in units, "12", "12.5", "-0.000001", into micros.
 * At most 6 fraction digits; an optional leading '-' or '+'. */
int sl_money_parse(const char *s, int64_t *out, struct sl_error *err);

/* Formats micros as units with 2 to 6 fraction digits ("12.50",
 * "0.000123", "-3.00"). buf must hold SL_MONEY_FORMAT_MAX bytes. */
char *sl_money_format(int64_t micros, char *buf);

#endif
