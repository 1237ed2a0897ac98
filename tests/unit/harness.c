/* The test runner: see harness.h. */
#include "harness.h"

#include "../../lib/crypto.h"
#include "../../lib/log.h"
#include "../../lib/xalloc.h"
#include "../../server/store.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct test_case *first, **last = &first;

/* state of the running test */
static struct {
    const struct test_case *test;
    int failures;
    char *tmpdir;
    char *paths[64];
    size_t n_paths;
    struct store *store;
    char *store_uri;
    uint64_t rng;
} cur;

void test_register(struct test_case *t)
{
    *last = t;
    last = &t->next;
}

bool test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    if (++cur.failures > 20) {
        if (cur.failures == 21)
            fprintf(stdout, "  %s: more failed checks not shown\n", cur.test->name);
        return false;
    }
    fprintf(stdout, "  %s:%d: %s: ", file, line, cur.test ? cur.test->name : "?");
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
    return false;
}

bool test_ok(void)
{
    return cur.failures == 0;
}

bool test_str_equal(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

const char *test_tmpdir(void)
{
    if (!cur.tmpdir) {
        const char *base = getenv("TMPDIR");
        char *dir = xasprintf("%s/suanli-unit-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(2);
        }
        cur.tmpdir = dir;
    }
    return cur.tmpdir;
}

const char *test_path(const char *name)
{
    if (cur.n_paths == sizeof(cur.paths) / sizeof(cur.paths[0])) {
        fprintf(stderr, "harness: too many test_path() calls in one test\n");
        exit(2);
    }
    char *p = xasprintf("%s/%s", test_tmpdir(), name);
    cur.paths[cur.n_paths++] = p;
    return p;
}

const char *test_write_file(const char *name, const char *text)
{
    const char *path = test_path(name);
    FILE *f = fopen(path, "w");

    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
    return path;
}

/* SUANLI_UNIT_STORE=postgres: the test's store is a schema of its own in
 * the PostgreSQL database SUANLI_TEST_PG (scripts/pg-test.sh starts one),
 * made fresh for each test. */
static char *pg_test_uri(void)
{
    static unsigned schemas;
    const char *base = getenv("SUANLI_TEST_PG");
    struct sl_error err = SL_ERROR_INIT;
    struct store *admin;
    char schema[64];
    char *sql;
    int rc;

    if (!base || !*base) {
        fprintf(stdout, "  harness: SUANLI_UNIT_STORE=postgres needs SUANLI_TEST_PG (a libpq URI):"
                        " run the tests under scripts/pg-test.sh\n");
        exit(2);
    }
    snprintf(schema, sizeof(schema), "unit_%ld_%u", (long)getpid(), ++schemas);
    admin = store_open(base, &err);
    if (!admin) {
        fprintf(stdout, "  harness: %s\n", err.message);
        exit(2);
    }
    sql = xasprintf("CREATE SCHEMA %s", schema);
    rc = store_exec(admin, sql, DB_NO_ARGS, &err);
    free(sql);
    store_close(admin);
    if (rc < 0) {
        fprintf(stdout, "  harness: %s\n", err.message);
        exit(2);
    }
    return xasprintf("%s%coptions=-csearch_path%%3D%s", base, strchr(base, '?') ? '&' : '?',
                     schema);
}

bool test_store_is_pg(void)
{
    const char *which = getenv("SUANLI_UNIT_STORE");
    return which && strcmp(which, "postgres") == 0;
}

const char *test_store_uri(void)
{
    if (!cur.store_uri)
        cur.store_uri =
            test_store_is_pg() ? pg_test_uri() : xasprintf("sqlite:%s/t.db", test_tmpdir());
    return cur.store_uri;
}

struct store *test_store(void)
{
    struct sl_error err = SL_ERROR_INIT;

    if (cur.store)
        return cur.store;
    cur.store = store_open(test_store_uri(), &err);
    if (!cur.store || store_migrate(cur.store, &err) < 0) {
        fprintf(stdout, "  harness: unable to open a test store: %s\n", err.message);
        exit(2);
    }
    return cur.store;
}

void test_store_close(struct store *st)
{
    if (st && st == cur.store)
        cur.store = NULL;
    store_close(st);
}

uint64_t test_rand(void)
{
    uint64_t x = cur.rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return cur.rng = x;
}

int64_t test_rand_range(int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
    return span == 0 ? (int64_t)test_rand() : (int64_t)((uint64_t)lo + test_rand() % span);
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void end_test(void)
{
    if (cur.store)
        store_close(cur.store);
    free(cur.store_uri);
    if (cur.tmpdir) {
        nftw(cur.tmpdir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
        free(cur.tmpdir);
    }
    for (size_t i = 0; i < cur.n_paths; i++)
        free(cur.paths[i]);
    memset(&cur, 0, sizeof(cur));
}

static bool selected(const struct test_case *t, int argc, char **argv)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], t->name) == 0)
            return true;
    return false;
}

int main(int argc, char **argv)
{
    struct sl_error err = SL_ERROR_INIT;
    int passed = 0, failed = 0;

    if (sl_crypto_init(&err) < 0) {
        fprintf(stderr, "harness: %s\n", err.message);
        return 2;
    }
    sl_log_threshold = SL_LOG_WARN;
    for (int i = 1; i < argc; i++) {
        const struct test_case *t = first;
        while (t && strcmp(t->name, argv[i]) != 0)
            t = t->next;
        if (!t) {
            printf("no test named '%s'\n", argv[i]);
            failed++;
        }
    }
    for (const struct test_case *t = first; t; t = t->next) {
        if (!selected(t, argc, argv))
            continue;
        cur.test = t;
        cur.rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(passed + failed + 1);
        t->run();
        if (cur.failures) {
            printf("FAIL %s (%d failed checks)\n", t->name, cur.failures);
            failed++;
        } else {
            passed++;
        }
        fflush(stdout);
        end_test();
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
