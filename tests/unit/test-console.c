/* server/console.c: which paths are the console's, what each gets, and
 * that nothing outside the directory is ever opened. */
#include "harness.h"
#include "../../lib/cleanup.h"
#include "../../lib/xalloc.h"
#include "../../server/console.h"
#include "../../server/event-stream.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void put(const char *dir, const char *name, const char *text)
{
    cleanup_free char *path = xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A console in the test's directory, a secret beside it. */
static char *make_console(void)
{
    char *dir = xasprintf("%s/console", test_tmpdir());
    cleanup_free char *assets = xasprintf("%s/assets", dir);
    cleanup_free char *link = xasprintf("%s/link.js", assets);
    cleanup_free char *secret = xasprintf("%s/secret.txt", test_tmpdir());

    mkdir(dir, 0755);
    mkdir(assets, 0755);
    put(dir, "index.html", "<!doctype html>");
    put(dir, "assets/app-1.js", "export {};");
    put(dir, "assets/app-1.js.gz", "GZ");
    put(dir, "assets/.hidden", "hidden");
    put(test_tmpdir(), "secret.txt", "secret");
    symlink(secret, link);
    return dir;
}

static void release(struct console_reply *r)
{
    if (r->fd >= 0)
        close(r->fd);
}

TEST(api_paths_are_never_the_consoles)
{
    CHECK(!console_owns_path("/v1"));
    CHECK(!console_owns_path("/v1/"));
    CHECK(!console_owns_path("/v1/nope"));
    CHECK(!console_owns_path("/healthz"));
    CHECK(!console_owns_path("/metrics"));
    CHECK(console_owns_path("/"));
    CHECK(console_owns_path("/v1x"));
    CHECK(console_owns_path("/instances/i-1"));
    CHECK(console_owns_path("/assets/app-1.js"));
}

TEST(assets_index_and_refusals)
{
    cleanup_free char *dir = make_console();
    struct console_reply r;

    console_resolve(dir, "GET", "/assets/app-1.js", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.content_type, "text/javascript; charset=utf-8");
    CHECK_STR(r.cache_control, "public, max-age=31536000, immutable");
    CHECK(r.fd >= 0 && r.size == strlen("export {};") && !r.content_encoding);
    release(&r);

    console_resolve(dir, "GET", "/assets/app-1.js", "deflate, gzip;q=0.8", NULL, &r);
    CHECK(r.status == 200 && r.content_encoding && r.size == 2);
    char etag[64];
    snprintf(etag, sizeof(etag), "%s", r.etag);
    release(&r);
    console_resolve(dir, "GET", "/assets/app-1.js", "gzip", etag, &r);
    CHECK_EQ_INT(r.status, 304);
    CHECK(r.fd < 0);
    console_resolve(dir, "GET", "/assets/app-1.js", "gzip;q=0", NULL, &r);
    CHECK(r.status == 200 && !r.content_encoding);
    release(&r);

    console_resolve(dir, "HEAD", "/anything/at/all", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 200);
    CHECK_STR(r.cache_control, "no-cache");
    release(&r);

    const char *refused[] = { "/assets/../index.html",
                              "/assets/.hidden",
                              "/assets/link.js",
                              "/assets/",
                              "/assets",
                              "/assets//app-1.js",
                              "/assets/a%00.js",
                              "/assets/app-1.js/",
                              "/assets/x\\y.js",
                              "/assets/nope.js" };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        console_resolve(dir, "GET", refused[i], NULL, NULL, &r);
        if (!CHECK_EQ_INT(r.status, 404))
            fprintf(stderr, "  path %s\n", refused[i]);
        CHECK(r.fd < 0);
    }
    console_resolve(dir, "POST", "/", NULL, NULL, &r);
    CHECK(r.status == 405 && r.allow && strcmp(r.allow, "GET, HEAD") == 0);
    cleanup_free char *huge = xcalloc(CONSOLE_PATH_MAX + 10, 1);
    memset(huge, 'a', CONSOLE_PATH_MAX + 5);
    huge[0] = '/';
    console_resolve(dir, "GET", huge, NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 414);
}

TEST(a_missing_console_says_how_to_build_it)
{
    struct console_reply r;
    cleanup_free char *missing = xasprintf("%s/none", test_tmpdir());

    console_resolve(missing, "GET", "/", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 503);
    CHECK_CONTAINS(r.body, "make console");
    console_resolve(missing, "GET", "/assets/app-1.js", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 404);
    console_resolve(NULL, "GET", "/", NULL, NULL, &r);
    CHECK_EQ_INT(r.status, 503);
}

TEST(event_stream_ids)
{
    struct sl_error err = SL_ERROR_INIT;
    struct event_cursor c;

    CHECK_EQ_INT(event_cursor_parse("12.3.40", &c, &err), 0);
    CHECK(c.event_seq == 12 && c.instance_rev == 3 && c.ledger_seq == 40);
    const char *bad[] = { "",       "1",    "1.2",    "1.2.3.4", "a.b.c",
                          "-1.2.3", "1..3", " 1.2.3", "1.2.3 ",  "1234567890123456789.0.0" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_error_clear(&err);
        CHECK_EQ_INT(event_cursor_parse(bad[i], &c, &err), -1);
        CHECK_STR(err.code, "invalid_last_event_id");
    }
}
