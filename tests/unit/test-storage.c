/* server/storage.c: which backends and specs an operator may set. */
#include "harness.h"

#include "../../server/storage.h"

#include <string.h>

static void check_ok(const char *kind, const char *spec, const char *file, int line)
{
    struct sl_error err = SL_ERROR_INIT;
    if (storage_backend_check(kind, spec, &err) < 0)
        test_fail(file, line, "%s \"%s\" refused: %s", kind, spec ? spec : "(null)", err.message);
}

static void check_bad(const char *kind, const char *spec, const char *needle, const char *file,
                      int line)
{
    struct sl_error err = SL_ERROR_INIT;
    if (storage_backend_check(kind, spec, &err) == 0)
        test_fail(file, line, "%s \"%s\" accepted", kind, spec ? spec : "(null)");
    else if (err.kind != SL_E_INVALID || strcmp(err.code, "invalid_field") != 0)
        test_fail(file, line, "kind %d code %s", err.kind, err.code);
    else if (!strstr(err.message, needle))
        test_fail(file, line, "message \"%s\" lacks \"%s\"", err.message, needle);
}

#define OK(k, s)          check_ok(k, s, __FILE__, __LINE__)
#define BAD(k, s, needle) check_bad(k, s, needle, __FILE__, __LINE__)

TEST(local_takes_no_spec)
{
    OK("local", "");
    OK("local", NULL);
    BAD("local", "/srv/storage", "takes no spec");
}

TEST(mount_takes_a_plain_absolute_path)
{
    OK("mount", "/mnt/cephfs/suanli");
    OK("mount", "/mnt/gv0");
    OK("mount", "/mnt/a.b/..c");
    BAD("mount", NULL, "absolute path");
    BAD("mount", "", "absolute path");
    BAD("mount", "/", "absolute path");
    BAD("mount", "mnt/x", "absolute path");
    BAD("mount", "/mnt/../etc", "'..'");
    BAD("mount", "/mnt/./x", "'..'");
    BAD("mount", "/mnt/..", "'..'");
    BAD("mount", "/mnt/x/", "trailing");
    BAD("mount", "/mnt//x", "doubled");
    BAD("mount", "/mnt/a b", "spaces");
    BAD("mount", "/mnt/a,b", "commas");
    BAD("mount", "/mnt/a\\b", "backslashes");
    BAD("mount", "/mnt/a\nb", "control");
}

TEST(other_kinds_are_refused_with_what_to_do)
{
    BAD("glusterfs", "srv:/vol", "use kind mount");
    BAD("nfs", "/mnt/x", "local or mount");
    BAD("", "", "local or mount");
}
