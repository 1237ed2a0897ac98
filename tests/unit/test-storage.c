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

TEST(glusterfs_takes_server_and_volume)
{
    OK("glusterfs", "srv:/vol");
    OK("glusterfs", "gluster1.example.com:/suanli_data-1");
    OK("glusterfs", "10.0.1.5:/gv0");
    BAD("glusterfs", NULL, "SERVER:/VOLUME");
    BAD("glusterfs", "", "SERVER:/VOLUME");
    BAD("glusterfs", "/mnt/gv0", "SERVER:/VOLUME");
    BAD("glusterfs", ":/vol", "SERVER:/VOLUME");
    BAD("glusterfs", "srv:/", "SERVER:/VOLUME");
    BAD("glusterfs", "srv:vol", "SERVER:/VOLUME");
    BAD("glusterfs", "srv:/vol/sub", "volume name");
    BAD("glusterfs", "srv:/vol,x", "volume name");
    BAD("glusterfs", "srv:/vol x", "volume name");
    BAD("glusterfs", "s rv:/vol", "host name");
    BAD("glusterfs", "-o:/vol", "host name");
    BAD("glusterfs", "srv;rm:/vol", "host name");
    BAD("glusterfs", "[::1]:/vol", "host name");
}

TEST(other_kinds_are_refused_with_what_to_do)
{
    BAD("nfs", "/mnt/x", "local, mount or glusterfs");
    BAD("", "", "local, mount or glusterfs");
}
