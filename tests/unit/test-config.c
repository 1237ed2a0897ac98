/* lib/config.c: one option table, defaults, INI files and their errors. */
#include "harness.h"

#include "../../lib/config.h"
#include "../../lib/timefmt.h"

#include <stddef.h>

struct conf {
    char *name;
    char *greeting;
    int64_t count;
    bool verbose;
    bool quiet;
    int64_t timeout;
    int64_t price;
    int64_t auth_max;
    char *auth_realm;
};

#define O(n, t, d, lo, hi, field)                                                                  \
    {                                                                                              \
        .name = n, .type = t, .def = d, .min = lo, .max = hi,                                      \
        .offset = offsetof(struct conf, field), .help = "help of " n                               \
    }

static const struct sl_option opts[] = {
    O("name", SL_OPT_STRING, "suanli", 0, 0, name),
    O("greeting", SL_OPT_STRING, NULL, 0, 0, greeting),
    O("count", SL_OPT_INT, "4", 1, 100, count),
    O("verbose", SL_OPT_BOOL, "true", 0, 0, verbose),
    O("quiet", SL_OPT_BOOL, NULL, 0, 0, quiet),
    O("timeout", SL_OPT_DURATION, "15m", 1, 86400, timeout),
    O("price", SL_OPT_MONEY, "1.5", 0, 1000000000, price),
    O("auth.max", SL_OPT_INT, "5", 1, 10, auth_max),
    O("auth.realm", SL_OPT_STRING, "users", 0, 0, auth_realm),
};
#define N_OPTS (sizeof(opts) / sizeof(opts[0]))

static void check_defaults(const struct conf *c)
{
    CHECK_STR(c->name, "suanli");
    CHECK(c->greeting == NULL);
    CHECK_EQ_INT(c->count, 4);
    CHECK(c->verbose);
    CHECK(!c->quiet);
    CHECK_EQ_INT(c->timeout, 900);
    CHECK_EQ_INT(c->price, 1500000);
    CHECK_EQ_INT(c->auth_max, 5);
    CHECK_STR(c->auth_realm, "users");
}

TEST(defaults)
{
    struct conf c = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    CHECK_EQ_INT(sl_config_defaults(opts, N_OPTS, &c, &err), 0);
    check_defaults(&c);
    /* defaults again do not leak the strings set before */
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "greeting", "hi", &err), 0);
    CHECK_EQ_INT(sl_config_defaults(opts, N_OPTS, &c, &err), 0);
    check_defaults(&c);
    sl_config_release(opts, N_OPTS, &c);
    CHECK(c.name == NULL && c.auth_realm == NULL);
}

TEST(bad_default_is_reported)
{
    static const struct sl_option bad[] = {
        O("count", SL_OPT_INT, "1000", 1, 100, count),
    };
    struct conf c = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    CHECK(sl_config_defaults(bad, 1, &c, &err) < 0);
    CHECK_PREFIX(err.message, "default: ");
    CHECK_CONTAINS(err.message, "'count'");
}

TEST(set_each_type)
{
    struct conf c = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    CHECK_EQ_INT(sl_config_defaults(opts, N_OPTS, &c, &err), 0);
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "name", "other", &err), 0);
    CHECK_STR(c.name, "other");
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "count", "100", &err), 0);
    CHECK_EQ_INT(c.count, 100);
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "count", "1", &err), 0);
    CHECK_EQ_INT(c.count, 1);
    static const char *const yes[] = { "true", "yes", "on", "1", "TRUE", "Yes" };
    static const char *const no[] = { "false", "no", "off", "0", "OFF" };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        c.quiet = false;
        CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "quiet", yes[i], &err), 0);
        CHECK(c.quiet);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        c.verbose = true;
        CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "verbose", no[i], &err), 0);
        CHECK(!c.verbose);
    }
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "timeout", "2h", &err), 0);
    CHECK_EQ_INT(c.timeout, 7200);
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "timeout", "30", &err), 0);
    CHECK_EQ_INT(c.timeout, 30);
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "price", "0.000001", &err), 0);
    CHECK_EQ_INT(c.price, 1);
    CHECK_EQ_INT(sl_config_set(opts, N_OPTS, &c, "auth.max", "10", &err), 0);
    CHECK_EQ_INT(c.auth_max, 10);

    /* refusals leave the old value */
    CHECK(sl_config_set(opts, N_OPTS, &c, "count", "101", &err) < 0);
    CHECK_EQ_INT(c.count, 1);
    CHECK(sl_config_set(opts, N_OPTS, &c, "count", "0", &err) < 0);
    CHECK(sl_config_set(opts, N_OPTS, &c, "count", "4x", &err) < 0);
    CHECK_CONTAINS(err.message, "not an integer");
    CHECK(sl_config_set(opts, N_OPTS, &c, "count", "", &err) < 0);
    CHECK(sl_config_set(opts, N_OPTS, &c, "count", "99999999999999999999", &err) < 0);
    CHECK(sl_config_set(opts, N_OPTS, &c, "verbose", "maybe", &err) < 0);
    CHECK(!c.verbose);
    CHECK(sl_config_set(opts, N_OPTS, &c, "timeout", "2w", &err) < 0);
    CHECK_CONTAINS(err.message, "'timeout'");
    CHECK(sl_config_set(opts, N_OPTS, &c, "timeout", "2d", &err) < 0);
    CHECK_CONTAINS(err.message, "out of range");
    CHECK_EQ_INT(c.timeout, 30);
    CHECK(sl_config_set(opts, N_OPTS, &c, "price", "-1", &err) < 0);
    CHECK(sl_config_set(opts, N_OPTS, &c, "price", "1.2345678", &err) < 0);
    CHECK_CONTAINS(err.message, "'price'");
    CHECK_EQ_INT(c.price, 1);
    CHECK(sl_config_set(opts, N_OPTS, &c, "nope", "1", &err) < 0);
    CHECK_CONTAINS(err.message, "unknown option 'nope'");
    CHECK_EQ_INT(err.kind, SL_E_INVALID);
    CHECK_STR(err.code, "invalid_config");
    sl_config_release(opts, N_OPTS, &c);
}

TEST(load_file)
{
    struct conf c = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    const char *path = test_write_file("ok.conf", "# a comment\n"
                                                  "; another comment\n"
                                                  "\n"
                                                  "name = \"quoted value\"\n"
                                                  "  greeting=hello world  \n"
                                                  "count = 7\n"
                                                  "verbose = off\n"
                                                  "timeout = 1h\n"
                                                  "price = 12.50\n"
                                                  "\t# indented comment\n"
                                                  "[auth]\n"
                                                  "max = 3\n"
                                                  "realm = \"\"\n"
                                                  "[ auth ]\n"
                                                  "max = 4\n");

    CHECK_EQ_INT(sl_config_defaults(opts, N_OPTS, &c, &err), 0);
    if (!CHECK_EQ_INT(sl_config_load(opts, N_OPTS, &c, path, &err), 0))
        printf("    %s\n", err.message);
    CHECK_STR(c.name, "quoted value");
    CHECK_STR(c.greeting, "hello world");
    CHECK_EQ_INT(c.count, 7);
    CHECK(!c.verbose);
    CHECK_EQ_INT(c.timeout, 3600);
    CHECK_EQ_INT(c.price, 12500000);
    CHECK_EQ_INT(c.auth_max, 4);
    CHECK_STR(c.auth_realm, "");
    sl_config_release(opts, N_OPTS, &c);
}

/* Loads text and expects "PATH:LINE: ..." naming what. */
static void check_bad_file(const char *text, int line, const char *what, const char *file,
                           int src_line)
{
    struct conf c = { 0 };
    struct sl_error err = SL_ERROR_INIT;
    const char *path = test_write_file("bad.conf", text);
    char prefix[512];

    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
    if (sl_config_defaults(opts, N_OPTS, &c, &err) < 0) {
        test_fail(file, src_line, "defaults failed: %s", err.message);
        return;
    }
    if (sl_config_load(opts, N_OPTS, &c, path, &err) == 0)
        test_fail(file, src_line, "config accepted:\n%s", text);
    else if (strncmp(err.message, prefix, strlen(prefix)) != 0)
        test_fail(file, src_line, "message \"%s\" does not start with \"%s\"", err.message, prefix);
    else if (!strstr(err.message, what))
        test_fail(file, src_line, "message \"%s\" does not name \"%s\"", err.message, what);
    else if (err.kind != SL_E_INVALID)
        test_fail(file, src_line, "kind %d, want SL_E_INVALID", err.kind);
    sl_config_release(opts, N_OPTS, &c);
}

#define BAD_FILE(text, line, what) check_bad_file(text, line, what, __FILE__, __LINE__)

TEST(load_errors)
{
    BAD_FILE("count = 3\nbogus = 1\n", 2, "'bogus'");
    BAD_FILE("# c\n[auth]\nbogus = 1\n", 3, "'auth.bogus'");
    BAD_FILE("[auth]\n[other]\nmax = 3\n", 3, "'other.max'");
    BAD_FILE("[auth\nmax = 1\n", 1, "bad section header '[auth'");
    BAD_FILE("\n[]\n", 2, "bad section header");
    BAD_FILE("[auth] x\n", 1, "bad section header");
    BAD_FILE("name = x\ncount 3\n", 2, "'count 3'");
    BAD_FILE("count = 1000\n", 1, "'count'");
    BAD_FILE("[auth]\nmax = 11\n", 2, "'auth.max'");
    BAD_FILE("[auth]\nmax = 0\n", 2, "out of range");
    BAD_FILE("\n\n\nverbose = maybe\n", 4, "'verbose'");
    BAD_FILE("verbose = \"\"\n", 1, "'verbose'");
    BAD_FILE("timeout = 15x\n", 1, "'timeout'");
    BAD_FILE("timeout = 15x\n", 1, "not a duration");
    BAD_FILE("timeout = 0\n", 1, "'timeout'");
    BAD_FILE("price = 1,5\n", 1, "'price'");
    BAD_FILE("count = 3\r\ncount = x\r\n", 2, "'count'");
}

TEST(load_missing_file)
{
    struct conf c = { 0 };
    struct sl_error err = SL_ERROR_INIT;

    CHECK(sl_config_load(opts, N_OPTS, &c, test_path("absent.conf"), &err) < 0);
    CHECK_CONTAINS(err.message, "absent.conf");
    CHECK(err.sys_errno != 0);
}

TEST(duration_parse)
{
    static const struct {
        const char *text;
        int64_t seconds;
    } good[] = {
        { "0", 0 },
        { "30", 30 },
        { "30s", 30 },
        { "15m", 900 },
        { "2h", 7200 },
        { "7d", 604800 },
        { "365d", 31536000 },
        { "1000000000000", 1000000000000LL },
        { "10000000000000d", 864000000000000000LL },
    };
    static const char *const bad[] = { "",
                                       "s",
                                       "-1",
                                       "+5",
                                       "1.5h",
                                       "5 m",
                                       " 5",
                                       "5m ",
                                       "5ms",
                                       "5w",
                                       "m5",
                                       "99999999999999999999",
                                       "100000000000000d" };
    struct sl_error err = SL_ERROR_INIT;
    int64_t s;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        s = -1;
        if (CHECK_EQ_INT(sl_duration_parse(good[i].text, &s, &err), 0))
            CHECK_EQ_INT(s, good[i].seconds);
        else
            printf("    \"%s\": %s\n", good[i].text, err.message);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        s = -1;
        if (!CHECK(sl_duration_parse(bad[i], &s, &err) < 0))
            printf("    \"%s\" accepted as %lld\n", bad[i], (long long)s);
        CHECK_STR(err.code, "invalid_duration");
        CHECK_EQ_INT(s, -1);
    }
}
