#include "money.h"
#include "timeconst.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int out_of_range(struct sl_error *err)
{
    return sl_fail(err, SL_E_INVALID, "amount_out_of_range",
                   "amount is out of range: money must fit in a signed 64-bit count of micros");
}

int sl_money_add(int64_t a, int64_t b, int64_t *out, struct sl_error *err)
{
    int64_t r;

    if (__builtin_add_overflow(a, b, &r))
        return out_of_range(err);
    *out = r;
    return 0;
}

int sl_money_sub(int64_t a, int64_t b, int64_t *out, struct sl_error *err)
{
    int64_t r;

    if (__builtin_sub_overflow(a, b, &r))
        return out_of_range(err);
    *out = r;
    return 0;
}

int sl_money_mul(int64_t a, int64_t n, int64_t *out, struct sl_error *err)
{
    int64_t r;

    if (__builtin_mul_overflow(a, n, &r))
        return out_of_range(err);
    *out = r;
    return 0;
}

static int floor_div(__int128 num, int64_t den, int64_t *out, struct sl_error *err)
{
    __int128 q = num / den;
    if (num % den != 0 && (num < 0) != (den < 0))
        q -= 1;
    if (q > INT64_MAX || q < INT64_MIN)
        return out_of_range(err);
    *out = (int64_t)q;
    return 0;
}

int sl_money_charged(int64_t rate_per_hour, int64_t elapsed_s, int64_t *out, struct sl_error *err)
{
    if (rate_per_hour < 0 || elapsed_s < 0)
        return sl_fail(err, SL_E_INVALID, "amount_out_of_range",
                       "rate and elapsed time must not be negative");
    return floor_div((__int128)rate_per_hour * elapsed_s, SL_SEC_PER_HOUR, out, err);
}

int sl_money_prorate(int64_t amount, int64_t elapsed_s, int64_t period_s, int64_t *out,
                     struct sl_error *err)
{
    if (amount < 0 || elapsed_s < 0 || period_s <= 0)
        return sl_fail(err, SL_E_INVALID, "amount_out_of_range",
                       "amount and elapsed time must not be negative, the period positive");
    return floor_div((__int128)amount * elapsed_s, period_s, out, err);
}

int sl_money_per_hour(int64_t amount, int64_t period_s, int64_t *out, struct sl_error *err)
{
    return sl_money_prorate(amount, SL_SEC_PER_HOUR, period_s, out, err);
}

int sl_money_percent(int64_t amount, int64_t percent, int64_t *out, struct sl_error *err)
{
    if (amount < 0 || percent < 0)
        return sl_fail(err, SL_E_INVALID, "amount_out_of_range",
                       "amount and percent must not be negative");
    return floor_div((__int128)amount * percent, 100, out, err);
}

int sl_money_unused(int64_t paid, int64_t used, int64_t *out, struct sl_error *err)
{
    if (paid < 0 || used < 0)
        return sl_fail(err, SL_E_INVALID, "amount_out_of_range",
                       "amounts paid and used must not be negative");
    *out = used >= paid ? 0 : paid - used;
    return 0;
}

int sl_money_charged_gib_day(int64_t rate_per_gib_day, int64_t gib, int64_t elapsed_s, int64_t *out,
                             struct sl_error *err)
{
    if (rate_per_gib_day < 0 || gib < 0 || elapsed_s < 0)
        return sl_fail(err, SL_E_INVALID, "amount_out_of_range",
                       "rate, size and elapsed time must not be negative");
    /* |rate| < 2^63, gib < 2^63, elapsed < 2^63: the product can pass 2^127;
     * refuse such inputs rather than wrap. */
    __int128 p = (__int128)rate_per_gib_day * gib;
    if (p != 0 && elapsed_s > ((((__int128)1) << 126) / p))
        return out_of_range(err);
    return floor_div(p * elapsed_s, SL_SEC_PER_DAY, out, err);
}

int64_t sl_money_covers_seconds(int64_t balance, int64_t rate_per_hour)
{
    if (balance <= 0)
        return 0;
    if (rate_per_hour <= 0)
        return INT64_MAX;
    __int128 s = (__int128)balance * SL_SEC_PER_HOUR / rate_per_hour;
    return s > INT64_MAX ? INT64_MAX : (int64_t)s;
}

int sl_money_parse(const char *s, int64_t *out, struct sl_error *err)
{
    const char *p = s;
    bool negative = false;
    __int128 units = 0, frac = 0;
    int frac_digits = 0, int_digits = 0;

    if (*p == '-' || *p == '+')
        negative = *p++ == '-';
    while (isdigit((unsigned char)*p)) {
        units = units * 10 + (*p++ - '0');
        if (++int_digits > 15)
            return out_of_range(err);
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            if (++frac_digits > 6)
                return sl_fail(err, SL_E_INVALID, "invalid_amount",
                               "'%s' has more than 6 decimal places; the smallest amount is "
                               "0.000001",
                               s);
            frac = frac * 10 + (*p++ - '0');
        }
    }
    if (*p != '\0' || (int_digits == 0 && frac_digits == 0))
        return sl_fail(err, SL_E_INVALID, "invalid_amount",
                       "'%s' is not an amount: write a decimal number such as 100 or 12.50", s);
    for (int i = frac_digits; i < 6; i++)
        frac *= 10;
    __int128 micros = units * SL_MICROS_PER_UNIT + frac;
    if (negative)
        micros = -micros;
    if (micros > INT64_MAX || micros < INT64_MIN)
        return out_of_range(err);
    *out = (int64_t)micros;
    return 0;
}

char *sl_money_format(int64_t micros, char *buf)
{
    /* work in unsigned so INT64_MIN has a magnitude */
    uint64_t mag = micros < 0 ? (uint64_t)0 - (uint64_t)micros : (uint64_t)micros;
    uint64_t units = mag / SL_MICROS_PER_UNIT, frac = mag % SL_MICROS_PER_UNIT;
    char digits[8];
    int keep = 6;

    snprintf(digits, sizeof(digits), "%06" PRIu64, frac);
    while (keep > 2 && digits[keep - 1] == '0')
        keep--;
    digits[keep] = '\0';
    snprintf(buf, SL_MONEY_FORMAT_MAX, "%s%" PRIu64 ".%s", micros < 0 ? "-" : "", units, digits);
    return buf;
}
