/* lib/money.c: overflow at the int64 edges, charging without drift, and
 * parsing and formatting amounts. */
#include "harness.h"

#include "../../lib/money.h"

#include <inttypes.h>
#include <stdio.h>

static bool refused_out_of_range(int rc, const struct sl_error *err)
{
    return rc < 0 && err->kind == SL_E_INVALID && strcmp(err->code, "amount_out_of_range") == 0;
}

TEST(add_sub_mul_edges)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out = 0;

    CHECK_EQ_INT(sl_money_add(INT64_MAX - 1, 1, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK_EQ_INT(sl_money_add(INT64_MIN + 1, -1, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MIN);
    CHECK_EQ_INT(sl_money_add(INT64_MAX, INT64_MIN, &out, &err), 0);
    CHECK_EQ_INT(out, -1);
    CHECK(refused_out_of_range(sl_money_add(INT64_MAX, 1, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(sl_money_add(INT64_MIN, -1, &out, &err), &err));
    sl_error_clear(&err);

    CHECK_EQ_INT(sl_money_sub(INT64_MIN + 1, 1, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MIN);
    CHECK_EQ_INT(sl_money_sub(-1, INT64_MAX, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MIN);
    CHECK_EQ_INT(sl_money_sub(INT64_MAX - 1, -1, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK(refused_out_of_range(sl_money_sub(INT64_MIN, 1, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(sl_money_sub(0, INT64_MIN, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(sl_money_sub(INT64_MAX, -1, &out, &err), &err));
    sl_error_clear(&err);

    CHECK_EQ_INT(sl_money_mul(INT64_MAX, 1, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK_EQ_INT(sl_money_mul(INT64_MIN, 1, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MIN);
    CHECK_EQ_INT(sl_money_mul(INT64_MAX, -1, &out, &err), 0);
    CHECK_EQ_INT(out, -INT64_MAX);
    CHECK_EQ_INT(sl_money_mul(INT64_MIN / 2, 2, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MIN);
    CHECK_EQ_INT(sl_money_mul(INT64_MAX / 8, 8, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX / 8 * 8);
    CHECK(refused_out_of_range(sl_money_mul(INT64_MIN, -1, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(sl_money_mul(INT64_MAX / 2 + 1, 2, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(sl_money_mul(INT64_MAX, INT64_MAX, &out, &err), &err));
    sl_error_clear(&err);

    /* a refused operation leaves the output alone */
    out = 42;
    sl_money_add(INT64_MAX, INT64_MAX, &out, &err);
    CHECK_EQ_INT(out, 42);
}

/* floor(r * e / 3600) without the code under test */
static int64_t reference_charged(int64_t r, int64_t e)
{
    __int128 p = (__int128)r * e;
    return (int64_t)(p / 3600); /* non-negative, so truncation is floor */
}

static const int64_t interesting[] = {
    0,
    1,
    2,
    3599,
    3600,
    3601,
    7200,
    86400,
    1000000,
    12500000,
    999999999,
    INT64_MAX / 3600,
    INT64_MAX / 3600 + 1,
    INT64_MAX / 2,
    INT64_MAX - 1,
    INT64_MAX,
};

TEST(charged_matches_reference)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out;

    for (size_t i = 0; i < sizeof(interesting) / sizeof(interesting[0]); i++) {
        for (size_t j = 0; j < sizeof(interesting) / sizeof(interesting[0]); j++) {
            int64_t r = interesting[i], e = interesting[j];
            __int128 want = (__int128)r * e / 3600;
            int rc = sl_money_charged(r, e, &out, &err);
            if (want > INT64_MAX) {
                if (!CHECK(refused_out_of_range(rc, &err)))
                    printf("    r=%" PRId64 " e=%" PRId64 " should overflow\n", r, e);
            } else if (CHECK_EQ_INT(rc, 0)) {
                if (!CHECK_EQ_INT(out, (int64_t)want))
                    printf("    r=%" PRId64 " e=%" PRId64 "\n", r, e);
            }
            sl_error_clear(&err);
        }
    }
    for (int k = 0; k < 20000 && test_ok(); k++) {
        int64_t r = test_rand_range(0, k % 2 ? 100000000000LL : INT64_MAX);
        int64_t e = test_rand_range(0, k % 3 ? 100LL * 86400 : INT64_MAX);
        __int128 want = (__int128)r * e / 3600;
        int rc = sl_money_charged(r, e, &out, &err);
        if (want > INT64_MAX) {
            CHECK(refused_out_of_range(rc, &err));
        } else {
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_INT(out, reference_charged(r, e));
        }
        sl_error_clear(&err);
    }
    /* the largest elapsed time that fits at a given rate */
    int64_t r = 7200000000LL, e = (int64_t)(((__int128)INT64_MAX * 3600 + 3599) / r);
    CHECK_EQ_INT(sl_money_charged(r, e, &out, &err), 0);
    CHECK_EQ_INT(out, reference_charged(r, e));
    CHECK(refused_out_of_range(sl_money_charged(r, e + 1, &out, &err), &err));
    sl_error_clear(&err);

    CHECK(sl_money_charged(-1, 10, &out, &err) < 0);
    CHECK_STR(err.code, "amount_out_of_range");
    CHECK(sl_money_charged(10, -1, &out, &err) < 0);
}

TEST(charged_monotonic)
{
    struct sl_error err = SL_ERROR_INIT;
    static const int64_t rates[] = { 1, 7, 3599, 3600, 3601, 1234567, 12500000, 2000000000000LL };

    for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
        int64_t prev = 0, out;
        for (int64_t e = 0; e <= 20000; e++) {
            if (!CHECK_EQ_INT(sl_money_charged(rates[i], e, &out, &err), 0))
                return;
            if (!CHECK(out >= prev))
                return;
            prev = out;
        }
    }
    /* in the rate too */
    for (int k = 0; k < 5000; k++) {
        int64_t r = test_rand_range(0, 1000000000000LL), e = test_rand_range(0, 1000000000LL);
        int64_t a, b;
        CHECK_EQ_INT(sl_money_charged(r, e, &a, &err), 0);
        CHECK_EQ_INT(sl_money_charged(r + 1, e, &b, &err), 0);
        CHECK(b >= a);
    }
}

TEST(charged_gib_day)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out;

    CHECK_EQ_INT(sl_money_charged_gib_day(1000000, 10, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, 10000000);
    CHECK_EQ_INT(sl_money_charged_gib_day(1000000, 1, 1, &out, &err), 0);
    CHECK_EQ_INT(out, 11); /* floor(1e6 / 86400) */
    CHECK_EQ_INT(sl_money_charged_gib_day(0, 1000, 1000, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    CHECK_EQ_INT(sl_money_charged_gib_day(INT64_MAX, INT64_MAX, 0, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    for (int k = 0; k < 20000; k++) {
        int64_t r = test_rand_range(0, 100000000), g = test_rand_range(0, 100000),
                e = test_rand_range(0, 400LL * 86400);
        __int128 want = (__int128)r * g * e / 86400;
        CHECK_EQ_INT(sl_money_charged_gib_day(r, g, e, &out, &err), 0);
        CHECK(out == (int64_t)want);
    }
    /* the exact edge: INT64_MAX micros after 86400 s */
    CHECK_EQ_INT(sl_money_charged_gib_day(INT64_MAX, 1, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK(refused_out_of_range(sl_money_charged_gib_day(INT64_MAX, 1, 86401, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(
        sl_money_charged_gib_day(INT64_MAX, INT64_MAX, INT64_MAX, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(sl_money_charged_gib_day(-1, 1, 1, &out, &err) < 0);
    CHECK(sl_money_charged_gib_day(1, -1, 1, &out, &err) < 0);
    CHECK(sl_money_charged_gib_day(1, 1, -1, &out, &err) < 0);
}

/* sl_money_prorate: the meters' formula for any period, and the plans'
 * refund (price - prorate(price, used, period)) at its edges. */
TEST(prorate_edges_and_refunds)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out, a, b;

    CHECK_EQ_INT(sl_money_prorate(3600, 1, 3600, &out, &err), 0);
    CHECK_EQ_INT(out, 1);
    CHECK_EQ_INT(sl_money_prorate(3599, 1, 3600, &out, &err), 0);
    CHECK_EQ_INT(out, 0); /* floor: the renter keeps the fraction */
    CHECK_EQ_INT(sl_money_prorate(0, INT64_MAX, 1, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    /* the largest result: INT64_MAX after exactly one period ... */
    CHECK_EQ_INT(sl_money_prorate(INT64_MAX, 86400, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK_EQ_INT(sl_money_prorate(INT64_MAX, INT64_MAX, INT64_MAX, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    /* ... one second more does not fit: refused, never wrapped */
    CHECK(refused_out_of_range(sl_money_prorate(INT64_MAX, 86401, 86400, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(refused_out_of_range(sl_money_prorate(INT64_MAX, INT64_MAX, 1, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(sl_money_prorate(-1, 1, 3600, &out, &err) < 0);
    sl_error_clear(&err);
    CHECK(sl_money_prorate(1, -1, 3600, &out, &err) < 0);
    sl_error_clear(&err);
    CHECK(sl_money_prorate(1, 1, 0, &out, &err) < 0);
    sl_error_clear(&err);
    /* per hour it is sl_money_charged; per day, the GiB-day formula */
    for (int k = 0; k < 20000 && test_ok(); k++) {
        int64_t r = test_rand_range(0, 1000000000000LL), e = test_rand_range(0, 400LL * 86400);
        CHECK_EQ_INT(sl_money_prorate(r, e, 3600, &a, &err), 0);
        CHECK_EQ_INT(sl_money_charged(r, e, &b, &err), 0);
        CHECK_EQ_INT(a, b);
        int64_t g = test_rand_range(0, 4096), unit = test_rand_range(0, 100000);
        CHECK_EQ_INT(sl_money_prorate(unit * g, e, 86400, &a, &err), 0);
        CHECK_EQ_INT(sl_money_charged_gib_day(unit, g, e, &b, &err), 0);
        CHECK_EQ_INT(a, b);
    }
    /* a plan's refund: never negative, never more than the price, the whole
     * price before any use and nothing after the last second */
    for (int k = 0; k < 20000 && test_ok(); k++) {
        int64_t price = test_rand_range(0, 100000000000LL);
        int64_t period = k % 3 == 0 ? 86400 : k % 3 == 1 ? 7 * 86400 : 30 * 86400;
        int64_t used = test_rand_range(0, period), consumed, later;
        CHECK_EQ_INT(sl_money_prorate(price, used, period, &consumed, &err), 0);
        CHECK(consumed >= 0 && consumed <= price);
        if (used < period) {
            CHECK_EQ_INT(sl_money_prorate(price, used + 1, period, &later, &err), 0);
            CHECK(later >= consumed); /* a later refund is never larger */
        }
    }
    CHECK_EQ_INT(sl_money_prorate(45144000, 0, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    CHECK_EQ_INT(sl_money_prorate(45144000, 86400, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, 45144000);
}

TEST(covers_seconds)
{
    CHECK_EQ_INT(sl_money_covers_seconds(0, 1000), 0);
    CHECK_EQ_INT(sl_money_covers_seconds(-5, 1000), 0);
    CHECK_EQ_INT(sl_money_covers_seconds(100, 0), INT64_MAX);
    CHECK_EQ_INT(sl_money_covers_seconds(3600, 3600), 3600);
    CHECK_EQ_INT(sl_money_covers_seconds(1, 3600), 1);
    CHECK_EQ_INT(sl_money_covers_seconds(1, 3601), 0);
    CHECK_EQ_INT(sl_money_covers_seconds(INT64_MAX, 1), INT64_MAX);
    CHECK_EQ_INT(sl_money_covers_seconds(INT64_MAX, 3600), INT64_MAX);
    CHECK_EQ_INT(sl_money_covers_seconds(INT64_MAX, INT64_MAX), 3600);
    /* the balance pays for the seconds it covers, and not for one more */
    struct sl_error err = SL_ERROR_INIT;
    for (int k = 0; k < 20000; k++) {
        int64_t b = test_rand_range(1, 1000000000000LL), r = test_rand_range(1, 100000000000LL);
        int64_t s = sl_money_covers_seconds(b, r), cost;
        CHECK(s >= 0);
        CHECK_EQ_INT(sl_money_charged(r, s, &cost, &err), 0);
        CHECK(cost <= b);
        CHECK_EQ_INT(sl_money_charged(r, s + 1, &cost, &err), 0);
        CHECK(cost > b || (__int128)r * (s + 1) / 3600 <= b);
        if (!test_ok())
            return;
    }
}

static void check_parse(const char *s, int64_t want, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out = 0;

    if (sl_money_parse(s, &out, &err) < 0)
        test_fail(file, line, "sl_money_parse(\"%s\") failed: %s", s, err.message);
    else if (out != want)
        test_fail(file, line, "sl_money_parse(\"%s\") = %" PRId64 ", want %" PRId64, s, out, want);
}

static void check_parse_fails(const char *s, const char *code, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out = 12345;

    if (sl_money_parse(s, &out, &err) == 0)
        test_fail(file, line, "sl_money_parse(\"%s\") accepted: %" PRId64, s, out);
    else if (strcmp(err.code, code) != 0 || err.kind != SL_E_INVALID)
        test_fail(file, line, "sl_money_parse(\"%s\"): code %s, want %s", s, err.code, code);
    else if (out != 12345)
        test_fail(file, line, "sl_money_parse(\"%s\") wrote its output on failure", s);
}

#define PARSE(s, want)     check_parse(s, want, __FILE__, __LINE__)
#define PARSE_BAD(s, code) check_parse_fails(s, code, __FILE__, __LINE__)

TEST(parse)
{
    PARSE("12", 12000000);
    PARSE("12.5", 12500000);
    PARSE("12.50", 12500000);
    PARSE("0.000001", 1);
    PARSE("-0.000001", -1);
    PARSE("-3", -3000000);
    PARSE("+4.25", 4250000);
    PARSE("0", 0);
    PARSE("-0", 0);
    PARSE(".5", 500000);
    PARSE("5.", 5000000);
    PARSE("007.000100", 7000100);
    PARSE("9223372036854.775807", INT64_MAX);
    PARSE("-9223372036854.775808", INT64_MIN);

    PARSE_BAD("", "invalid_amount");
    PARSE_BAD(".", "invalid_amount");
    PARSE_BAD("-", "invalid_amount");
    PARSE_BAD("+", "invalid_amount");
    PARSE_BAD("1.0000001", "invalid_amount");
    PARSE_BAD("abc", "invalid_amount");
    PARSE_BAD("1e3", "invalid_amount");
    PARSE_BAD(" 1", "invalid_amount");
    PARSE_BAD("1 ", "invalid_amount");
    PARSE_BAD("1,5", "invalid_amount");
    PARSE_BAD("--1", "invalid_amount");
    PARSE_BAD("1.2.3", "invalid_amount");
    PARSE_BAD("9223372036854.775808", "amount_out_of_range");
    PARSE_BAD("-9223372036854.775809", "amount_out_of_range");
    PARSE_BAD("99999999999999", "amount_out_of_range");
    PARSE_BAD("100000000000000000000000000000000000000000", "amount_out_of_range");
}

static void check_format(int64_t micros, const char *want, const char *file, int line)
{
    char buf[SL_MONEY_FORMAT_MAX];

    if (strcmp(sl_money_format(micros, buf), want) != 0)
        test_fail(file, line, "sl_money_format(%" PRId64 ") = \"%s\", want \"%s\"", micros, buf,
                  want);
}

#define FORMAT(m, want) check_format(m, want, __FILE__, __LINE__)

TEST(format)
{
    FORMAT(0, "0.00");
    FORMAT(12500000, "12.50");
    FORMAT(12000000, "12.00");
    FORMAT(123, "0.000123");
    FORMAT(1, "0.000001");
    FORMAT(1230000, "1.23");
    FORMAT(1234000, "1.234");
    FORMAT(1234500, "1.2345");
    FORMAT(1234560, "1.23456");
    FORMAT(1234567, "1.234567");
    FORMAT(-3000000, "-3.00");
    FORMAT(-1, "-0.000001");
    FORMAT(-1500000, "-1.50");
    FORMAT(INT64_MAX, "9223372036854.775807");
    FORMAT(INT64_MIN, "-9223372036854.775808");
}

TEST(parse_format_round_trip)
{
    static const int64_t fixed[] = {
        0,       1,        -1,        10,        100,           999999,
        1000000, -1000000, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1
    };
    struct sl_error err = SL_ERROR_INIT;
    char buf[SL_MONEY_FORMAT_MAX];
    int64_t back;

    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        CHECK_EQ_INT(sl_money_parse(sl_money_format(fixed[i], buf), &back, &err), 0);
        CHECK_EQ_INT(back, fixed[i]);
    }
    for (int k = 0; k < 100000 && test_ok(); k++) {
        int64_t x = (int64_t)test_rand();
        if (k % 3 == 1)
            x %= 100000000000LL;
        else if (k % 3 == 2)
            x = x % 10000 * 100;
        sl_money_format(x, buf);
        if (!CHECK_EQ_INT(sl_money_parse(buf, &back, &err), 0) || !CHECK_EQ_INT(back, x))
            printf("    x=%" PRId64 " formatted \"%s\"\n", x, buf);
    }
}

/* sl_money_per_hour: a meter's rate per hour from its amount per period. */
TEST(per_hour)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out, a;

    CHECK_EQ_INT(sl_money_per_hour(2500000, 3600, &out, &err), 0);
    CHECK_EQ_INT(out, 2500000); /* an hourly meter: its amount */
    CHECK_EQ_INT(sl_money_per_hour(240000, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, 10000); /* a daily one: a 24th */
    CHECK_EQ_INT(sl_money_per_hour(239999, 86400, &out, &err), 0);
    CHECK_EQ_INT(out, 9999); /* rounded down */
    CHECK_EQ_INT(sl_money_per_hour(INT64_MAX, 3600, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK(refused_out_of_range(sl_money_per_hour(INT64_MAX, 3599, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(sl_money_per_hour(-1, 3600, &out, &err) < 0);
    sl_error_clear(&err);
    CHECK(sl_money_per_hour(1, 0, &out, &err) < 0);
    sl_error_clear(&err);
    for (int k = 0; k < 10000 && test_ok(); k++) {
        int64_t amount = test_rand_range(0, 1000000000000LL), period = test_rand_range(1, 86400);
        CHECK_EQ_INT(sl_money_per_hour(amount, period, &out, &err), 0);
        CHECK_EQ_INT(sl_money_prorate(amount, 3600, period, &a, &err), 0);
        CHECK_EQ_INT(out, a);
    }
}

/* sl_money_percent: a plan's discounted price, never rounded up. */
TEST(percent)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out;

    CHECK_EQ_INT(sl_money_percent(1000000, 85, &out, &err), 0);
    CHECK_EQ_INT(out, 850000);
    CHECK_EQ_INT(sl_money_percent(199, 50, &out, &err), 0);
    CHECK_EQ_INT(out, 99);
    CHECK_EQ_INT(sl_money_percent(12345, 100, &out, &err), 0);
    CHECK_EQ_INT(out, 12345);
    CHECK_EQ_INT(sl_money_percent(12345, 0, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    /* the product passes 2^63, the result does not */
    CHECK_EQ_INT(sl_money_percent(INT64_MAX, 100, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK(refused_out_of_range(sl_money_percent(INT64_MAX, 101, &out, &err), &err));
    sl_error_clear(&err);
    CHECK(sl_money_percent(-1, 50, &out, &err) < 0);
    sl_error_clear(&err);
    CHECK(sl_money_percent(1, -50, &out, &err) < 0);
}

/* sl_money_unused: a refund, never below 0 nor above what was paid. */
TEST(unused)
{
    struct sl_error err = SL_ERROR_INIT;
    int64_t out;

    CHECK_EQ_INT(sl_money_unused(1000, 300, &out, &err), 0);
    CHECK_EQ_INT(out, 700);
    CHECK_EQ_INT(sl_money_unused(1000, 0, &out, &err), 0);
    CHECK_EQ_INT(out, 1000);
    CHECK_EQ_INT(sl_money_unused(1000, 1000, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    CHECK_EQ_INT(sl_money_unused(1000, INT64_MAX, &out, &err), 0);
    CHECK_EQ_INT(out, 0);
    CHECK_EQ_INT(sl_money_unused(INT64_MAX, 0, &out, &err), 0);
    CHECK_EQ_INT(out, INT64_MAX);
    CHECK(sl_money_unused(-1, 0, &out, &err) < 0);
    sl_error_clear(&err);
    CHECK(sl_money_unused(0, -1, &out, &err) < 0);
}
