/* node/boot.c: a running instance's SSH keys, rewritten on the host; what the
 * init is given. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../node/boot.h"
#include "../../node/fsutil.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *keys_now(void)
{
    return fs_read_file(test_path("boot/authorized_keys"), 1 << 16, NULL, NULL);
}

TEST(keys_are_rewritten_when_they_change_and_only_then)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *boot = test_path("boot");

    /* not started yet: nothing to update, nothing made */
    CHECK_EQ_INT(boot_update_keys(boot, "ssh-ed25519 AAAA a\n", &err), 0);
    CHECK(access(boot, F_OK) != 0);

    struct boot_params p = { .id = "i-1", .authorized_keys = "ssh-ed25519 AAAA a\n" };
    CHECK_EQ_INT(boot_write(boot, &p, &err), 0);
    CHECK_EQ_INT(boot_update_keys(boot, "ssh-ed25519 AAAA a\n", &err), 0);
    CHECK_EQ_INT(boot_update_keys(boot, "ssh-ed25519 AAAA a\nssh-ed25519 BBBB b\n", &err), 1);
    cleanup_free char *now = keys_now();
    CHECK_STR(now, "ssh-ed25519 AAAA a\nssh-ed25519 BBBB b\n");
    CHECK_EQ_INT(boot_update_keys(boot, NULL, &err), 1);
    cleanup_free char *none = keys_now();
    CHECK_STR(none, "");
    CHECK_EQ_INT(boot_update_keys(boot, "ssh-ed25519 AAAA a\x1b[2J\n", &err), -1);
    CHECK_STR(err.code, "invalid_ssh_key");
}

/* Whatever sits at the path (a symlink) is replaced, never followed. */
TEST(keys_replace_a_symlink_and_never_write_through_it)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *boot = test_path("boot");
    struct boot_params p = { .id = "i-1", .authorized_keys = "" };

    CHECK_EQ_INT(boot_write(boot, &p, &err), 0);
    FILE *f = fopen(test_path("victim"), "w");
    if (!CHECK(f != NULL))
        return;
    fputs("host file\n", f);
    fclose(f);
    unlink(test_path("boot/authorized_keys"));
    CHECK_EQ_INT(symlink(test_path("victim"), test_path("boot/authorized_keys")), 0);
    CHECK_EQ_INT(boot_update_keys(boot, "ssh-ed25519 AAAA a\n", &err), 1);
    struct stat st;
    CHECK_EQ_INT(lstat(test_path("boot/authorized_keys"), &st), 0);
    CHECK(S_ISREG(st.st_mode));
    cleanup_free char *victim = fs_read_file(test_path("victim"), 1024, NULL, NULL);
    CHECK_STR(victim, "host file\n");
}

/* instances.autodl_paths: a file the init reads (the links themselves are
 * the init's, tests/integration/test_t611_autodl_paths.py); off removes it. */
TEST(autodl_paths_flag_follows_the_setting)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *boot = test_path("boot-autodl");
    struct boot_params p = { .id = "i-1", .autodl_paths = true };

    CHECK_EQ_INT(boot_write(boot, &p, &err), 0);
    CHECK_EQ_INT(access(test_path("boot-autodl/autodl-paths"), F_OK), 0);
    cleanup_free char *init = fs_read_file(test_path("boot-autodl/init"), 1 << 20, NULL, NULL);
    CHECK_CONTAINS(init, "autodl-tmp:data autodl-pub:public autodl-fs:storage");
    p.autodl_paths = false;
    CHECK_EQ_INT(boot_write(boot, &p, &err), 0);
    CHECK(access(test_path("boot-autodl/autodl-paths"), F_OK) != 0);
}

/* The desktop recipe's port and token reach the init as "PORT TOKEN" in a
 * file only root reads; the init's Xvnc listens on loopback only, with the
 * token's first 8 digits as its VNC password. A token that is not 8 or
 * more hex digits never reaches the shell. */
TEST(desktop_port_and_token_for_the_init)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *boot = test_path("boot-desktop");
    struct boot_params p = { .id = "i-1",
                             .desktop_port = 6080,
                             .desktop_token = "0123456789abcdef0123456789abcdef" };

    CHECK_EQ_INT(boot_write(boot, &p, &err), 0);
    cleanup_free char *text = fs_read_file(test_path("boot-desktop/desktop"), 1024, NULL, NULL);
    CHECK_STR(text, "6080 0123456789abcdef0123456789abcdef\n");
    struct stat st;
    CHECK_EQ_INT(stat(test_path("boot-desktop/desktop"), &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0600);
    cleanup_free char *init = fs_read_file(test_path("boot-desktop/init"), 1 << 20, NULL, NULL);
    CHECK_CONTAINS(init, "Xvnc :1 -localhost -interface 127.0.0.1 -rfbport 5901 -nolisten tcp");
    CHECK_CONTAINS(init, "-SecurityTypes VncAuth");
    CHECK_CONTAINS(init, "websockify --web /usr/share/novnc 0.0.0.0:\"$dport\" 127.0.0.1:5901");

    /* no desktop: the file is there and empty, the init skips the step */
    p.desktop_port = 0;
    CHECK_EQ_INT(boot_write(boot, &p, &err), 0);
    cleanup_free char *none = fs_read_file(test_path("boot-desktop/desktop"), 1024, NULL, NULL);
    CHECK_STR(none, "");

    static const char *const bad[] = { "", "0123abc", "0123456789ABCDEF", "01234567; reboot",
                                       "01234567\n9999 x" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_error e = SL_ERROR_INIT;
        p.desktop_port = 6080;
        p.desktop_token = bad[i];
        CHECK_EQ_INT(boot_write(boot, &p, &e), -1);
        CHECK_STR(e.code, "invalid_token");
    }
    p.desktop_token = NULL;
    CHECK_EQ_INT(boot_write(boot, &p, &err), -1);
}
