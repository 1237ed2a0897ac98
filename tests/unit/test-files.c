/* The path rules of the renter's files through the browser and the API,
 * at both ends: suanlid's (server/files.c, files_path_valid) and the
 * agent's (node/files.c, files_path_ok), which must agree. */
#include "harness.h"

#include "../../node/files.h"
#include "../../server/files.h"

#include <string.h>

static void both(const char *path, bool empty_ok, bool want)
{
    CHECK(files_path_valid(path, empty_ok) == want);
    CHECK(files_path_ok(path, empty_ok) == want);
}

TEST(files_paths)
{
    char long_name[300], long_path[4200];

    both("a.txt", false, true);
    both("my dir/big é.bin", false, true);
    both("a/b/c", false, true);
    both(".hidden", false, true);
    both("..x", false, true);
    both("", true, true);
    both("", false, false);
    both("..", false, false);
    both(".", false, false);
    both("../etc/shadow", false, false);
    both("a/../../b", false, false);
    both("a/./b", false, false);
    both("/etc/shadow", false, false);
    both("a//b", false, false);
    both("a/", false, false);
    both("a\tb", false, false);
    both("a\nb", false, false);
    both("a\x7f", false, false);
    memset(long_name, 'n', 255);
    long_name[255] = '\0';
    both(long_name, false, true);
    long_name[255] = 'n';
    long_name[256] = '\0';
    both(long_name, false, false);
    for (size_t i = 0; i < 4100; i += 2)
        memcpy(long_path + i, "d/", 2);
    long_path[4099] = '\0'; /* ends in "d" */
    both(long_path, false, false);
    long_path[4095] = '\0'; /* 4095 bytes: the most */
    long_path[4094] = 'd';
    both(long_path, false, true);
}
