/* lib/file.c: a whole file written safely, or not at all. */
#include "harness.h"
#include "../../lib/cleanup.h"
#include "../../lib/file.h"
#include "../../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char *slurp(const char *path)
{
    cleanup_fclose FILE *f = fopen(path, "r");
    char buf[256];
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    return xstrdup(buf);
}

/* Entries of the test directory, "." and ".." aside. */
static int count_entries(void)
{
    cleanup_dir DIR *d = opendir(test_tmpdir());
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    return n;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_mode & 07777 : (mode_t)-1;
}

TEST(writes_and_replaces)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *path = test_path("conf");

    CHECK_EQ_INT(sl_file_write(path, "first\n", 6, 0600, 0, &err), 0);
    cleanup_free char *first = slurp(path);
    CHECK_STR(first, "first\n");
    CHECK_EQ_INT(sl_file_write(path, "2nd", 3, 0600, 0, &err), 0);
    cleanup_free char *second = slurp(path);
    CHECK_STR(second, "2nd");
    CHECK_EQ_INT(sl_file_write(path, "", 0, 0600, 0, &err), 0);
    cleanup_free char *empty = slurp(path);
    CHECK_STR(empty, "");
    CHECK_EQ_INT(count_entries(), 1); /* no temporary left */
}

/* The mode asked for, exactly: not narrowed by the agent's 077 umask, not
 * kept from the file it replaces. */
TEST(mode_is_exact)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *script = test_path("init.sh"), *secret = test_path("token");
    mode_t old = umask(077);

    CHECK_EQ_INT(sl_file_write(script, "#!/bin/sh\n", 10, 0755, 0, &err), 0);
    CHECK_EQ_INT(mode_of(script), 0755);
    CHECK_EQ_INT(sl_file_write(secret, "s", 1, 0644, 0, &err), 0);
    CHECK_EQ_INT(mode_of(secret), 0644);
    CHECK_EQ_INT(sl_file_write(secret, "s", 1, 0600, 0, &err), 0);
    CHECK_EQ_INT(mode_of(secret), 0600);
    umask(old);
}

TEST(exclusive_refuses_an_existing_file)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *path = test_path("secret.key");

    CHECK_EQ_INT(sl_file_write(path, "key-1", 5, 0600, SL_FILE_EXCLUSIVE, &err), 0);
    CHECK_EQ_INT(mode_of(path), 0600);
    CHECK_EQ_INT(sl_file_write(path, "key-2", 5, 0600, SL_FILE_EXCLUSIVE, &err), -1);
    CHECK_EQ_INT(err.sys_errno, EEXIST);
    CHECK_CONTAINS(err.message, "secret.key");
    cleanup_free char *kept = slurp(path);
    CHECK_STR(kept, "key-1");
    CHECK_EQ_INT(count_entries(), 1);
}

TEST(failures_leave_no_temporary)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *missing = xasprintf("%s/no-such-dir/file", test_tmpdir());

    CHECK_EQ_INT(sl_file_write(missing, "x", 1, 0600, 0, &err), -1);
    CHECK_EQ_INT(err.sys_errno, ENOENT);
    CHECK_EQ_INT(count_entries(), 0);

    /* the rename fails after the temporary was written: a non-empty
     * directory holds the name */
    const char *dir = test_path("taken");
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    cleanup_free char *inside = xasprintf("%s/x", dir);
    CHECK_EQ_INT(sl_file_write(inside, "x", 1, 0600, 0, &err), 0);
    sl_error_clear(&err);
    CHECK_EQ_INT(sl_file_write(dir, "x", 1, 0600, 0, &err), -1);
    CHECK(err.sys_errno != 0);
    CHECK_EQ_INT(count_entries(), 1);

    /* the write itself fails part way: a file size limit */
    struct rlimit saved, small;
    CHECK_EQ_INT(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small = saved;
    small.rlim_cur = 4;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
    sl_error_clear(&err);
    int rc = sl_file_write(test_path("big"), "0123456789", 10, 0600, 0, &err);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(err.sys_errno, EFBIG);
    CHECK_EQ_INT(count_entries(), 1);
}
