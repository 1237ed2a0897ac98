/* A small unit-test framework: TEST(name) { ... } registers itself before
 * main() runs; CHECK* report file:line and the values, mark the test failed
 * and let it go on. main() (harness.c) runs every test, or those named on the
 * command line, and ends with "N passed, N failed". */
#ifndef SL_TEST_HARNESS_H
#define SL_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct store;

struct test_case {
    const char *name;
    void (*run)(void);
    struct test_case *next;
};

void test_register(struct test_case *t);
/* Reports a failed check of the running test; always returns false. */
bool test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* True while the running test has no failed check. */
bool test_ok(void);

#define TEST(name)                                                                                 \
    static void test_##name(void);                                                                 \
    static struct test_case test_case_##name = { #name, test_##name, NULL };                       \
    __attribute__((constructor)) static void test_register_##name(void)                            \
    {                                                                                              \
        test_register(&test_case_##name);                                                          \
    }                                                                                              \
    static void test_##name(void)

/* Each evaluates to true when the check passed, so a test can stop early:
 * `if (!CHECK(p)) return;`. */
#define CHECK(cond)                                                                                \
    ({                                                                                             \
        bool check_ok_ = (cond);                                                                   \
        check_ok_ ? true : test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                      \
    })

#define CHECK_EQ_INT(a, b)                                                                         \
    ({                                                                                             \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        check_a_ == check_b_                                                                       \
            ? true                                                                                 \
            : test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, check_a_, check_b_); \
    })

#define CHECK_STR(a, b)                                                                            \
    ({                                                                                             \
        const char *check_a_ = (a), *check_b_ = (b);                                               \
        test_str_equal(check_a_, check_b_)                                                         \
            ? true                                                                                 \
            : test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,                  \
                        check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");           \
    })

/* a starts with prefix */
#define CHECK_PREFIX(a, prefix)                                                                    \
    ({                                                                                             \
        const char *check_a_ = (a), *check_p_ = (prefix);                                          \
        check_a_ &&strncmp(check_a_, check_p_, strlen(check_p_)) == 0                              \
            ? true                                                                                 \
            : test_fail(__FILE__, __LINE__, "%s starts with %s: \"%s\" vs \"%s\"", #a, #prefix,    \
                        check_a_ ? check_a_ : "(null)", check_p_);                                 \
    })

/* a contains needle */
#define CHECK_CONTAINS(a, needle)                                                                  \
    ({                                                                                             \
        const char *check_a_ = (a), *check_n_ = (needle);                                          \
        check_a_ &&strstr(check_a_, check_n_)                                                      \
            ? true                                                                                 \
            : test_fail(__FILE__, __LINE__, "%s contains %s: \"%s\" lacks \"%s\"", #a, #needle,    \
                        check_a_ ? check_a_ : "(null)", check_n_);                                 \
    })

bool test_str_equal(const char *a, const char *b);

/* A fresh temporary directory (removed with its contents when the test ends)
 * and the path of a file in it; the string lives until the test ends. */
const char *test_tmpdir(void);
const char *test_path(const char *name);

/* A migrated store, closed when the test ends (unless the test closes it
 * first with test_store_close): an SQLite file in the test's temporary
 * directory, or with SUANLI_UNIT_STORE=postgres a fresh schema in the
 * PostgreSQL database SUANLI_TEST_PG (scripts/pg-test.sh). test_store_uri:
 * the URI it opens (the same for the whole test). */
struct store *test_store(void);
void test_store_close(struct store *st);
const char *test_store_uri(void);
bool test_store_is_pg(void);

/* Writes text to a file in the temporary directory; returns its path. */
const char *test_write_file(const char *name, const char *text);

/* Deterministic pseudo-random numbers (xorshift), seeded per test. */
uint64_t test_rand(void);
int64_t test_rand_range(int64_t lo, int64_t hi); /* inclusive */

#endif
