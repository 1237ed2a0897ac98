/* node/fsutil.c: files written whole, and what a killed writer leaves. */
#include "harness.h"
#include "../../lib/cleanup.h"
#include "../../lib/file.h"
#include "../../lib/xalloc.h"
#include "../../node/fsutil.h"

#include <stdio.h>
#include <unistd.h>

static void touch(const char *name)
{
    FILE *f = fopen(test_path(name), "w");
    if (f)
        fclose(f);
}

static bool exists(const char *name)
{
    return access(test_path(name), F_OK) == 0;
}

/* An agent killed between sl_file_write's open and rename leaves
 * PATH.tmp.PID.N; removing PATH takes those along and nothing else. */
TEST(unlink_with_temps)
{
    struct sl_error err = SL_ERROR_INIT;

    CHECK_EQ_INT(sl_file_write(test_path("i-a.json"), "{}", 2, 0600, 0, &err), 0);
    touch("i-a.json.tmp.123");
    touch("i-a.json.tmp.9");
    touch("i-ab.json.tmp.1"); /* another instance's */
    touch("i-a.json.bak");
    fs_unlink_with_temps(test_path("i-a.json"));
    CHECK(!exists("i-a.json"));
    CHECK(!exists("i-a.json.tmp.123"));
    CHECK(!exists("i-a.json.tmp.9"));
    CHECK(exists("i-ab.json.tmp.1"));
    CHECK(exists("i-a.json.bak"));
    /* only temporaries left, or nothing at all: no error either way */
    touch("i-c.json.tmp.5");
    fs_unlink_with_temps(test_path("i-c.json"));
    CHECK(!exists("i-c.json.tmp.5"));
    fs_unlink_with_temps(test_path("i-missing.json"));
    fs_unlink_with_temps("/nonexistent-dir/x.json");
}
