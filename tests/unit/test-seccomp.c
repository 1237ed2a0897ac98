/* node/seccomp.c: the profile is an allow-list with Docker's semantics, and
 * its capability-gated groups follow the capabilities passed in. */
#include "harness.h"

#include "../../node/seccomp.h"
#include "../../lib/cleanup.h"
#include "../../lib/json.h"

#include <stdbool.h>
#include <string.h>

static const char *const suanli_caps[] = {
    "CAP_CHOWN",      "CAP_DAC_OVERRIDE", "CAP_FOWNER",      "CAP_FSETID",           "CAP_KILL",
    "CAP_SETGID",     "CAP_SETUID",       "CAP_SETPCAP",     "CAP_NET_BIND_SERVICE", "CAP_NET_RAW",
    "CAP_SYS_CHROOT", "CAP_MKNOD",        "CAP_AUDIT_WRITE", "CAP_SETFCAP",
};

/* How NAME appears: 0 absent, 1 allowed unconditionally, 2 allowed with an
 * argument check, -N: an errno rule returning N. */
static int lookup(json_t *profile, const char *name)
{
    json_t *rules = json_object_get(profile, "syscalls"), *r;
    size_t i;
    json_array_foreach(rules, i, r)
    {
        json_t *n;
        size_t j;
        json_array_foreach(json_object_get(r, "names"), j, n)
        {
            if (strcmp(json_string_value(n), name) != 0)
                continue;
            if (strcmp(json_string_value(json_object_get(r, "action")), "SCMP_ACT_ERRNO") == 0)
                return -(int)json_integer_value(json_object_get(r, "errnoRet"));
            return json_object_get(r, "args") ? 2 : 1;
        }
    }
    return 0;
}

TEST(seccomp_default_denies_with_eperm)
{
    cleanup_json json_t *p = seccomp_profile(suanli_caps, ARRAY_SIZE(suanli_caps));
    CHECK_STR(json_string_value(json_object_get(p, "defaultAction")), "SCMP_ACT_ERRNO");
    CHECK_EQ_INT(json_integer_value(json_object_get(p, "defaultErrnoRet")), 1);
#if defined(__x86_64__)
    json_t *arches = json_object_get(p, "architectures");
    CHECK_EQ_INT(json_array_size(arches), 3);
    CHECK_STR(json_string_value(json_array_get(arches, 0)), "SCMP_ARCH_X86_64");
    CHECK_EQ_INT(lookup(p, "arch_prctl"), 1);
    CHECK_EQ_INT(lookup(p, "set_tls"), 0);
#endif
}

TEST(seccomp_allows_ordinary_work_and_nothing_privileged)
{
    cleanup_json json_t *p = seccomp_profile(suanli_caps, ARRAY_SIZE(suanli_caps));
    const char *allowed[] = { "read",   "write",          "openat",    "execve",           "mmap",
                              "futex",  "setresuid",      "setgroups", "seccomp",          "prctl",
                              "chroot", "io_uring_setup", "ptrace",    "name_to_handle_at" };
    for (size_t i = 0; i < ARRAY_SIZE(allowed); i++)
        if (!CHECK_EQ_INT(lookup(p, allowed[i]), 1))
            test_fail(__FILE__, __LINE__, "%s", allowed[i]);
    const char *denied[] = { "mount",         "umount2",
                             "unshare",       "setns",
                             "bpf",           "perf_event_open",
                             "add_key",       "keyctl",
                             "request_key",   "kexec_load",
                             "init_module",   "delete_module",
                             "acct",          "swapon",
                             "reboot",        "settimeofday",
                             "clock_settime", "iopl",
                             "ioperm",        "lookup_dcookie",
                             "syslog",        "open_by_handle_at",
                             "userfaultfd",   "sethostname",
                             "quotactl",      "kcmp",
                             "pidfd_getfd",   "mbind",
                             "vhangup",       "fsopen",
                             "pivot_root" };
    for (size_t i = 0; i < ARRAY_SIZE(denied); i++)
        if (!CHECK_EQ_INT(lookup(p, denied[i]), 0))
            test_fail(__FILE__, __LINE__, "%s", denied[i]);
    /* conditional: clone without namespace flags, clone3 ENOSYS, sockets but
     * AF_VSOCK, five personalities */
    CHECK_EQ_INT(lookup(p, "clone"), 2);
    CHECK_EQ_INT(lookup(p, "clone3"), -38);
    CHECK_EQ_INT(lookup(p, "socket"), 2);
    CHECK_EQ_INT(lookup(p, "personality"), 2);
    size_t personalities = 0, i;
    json_t *r;
    json_array_foreach(json_object_get(p, "syscalls"), i, r)
    {
        const char *first = json_string_value(json_array_get(json_object_get(r, "names"), 0));
        json_t *arg = json_array_get(json_object_get(r, "args"), 0);
        if (strcmp(first, "personality") == 0)
            personalities++;
        if (strcmp(first, "clone") == 0) {
            CHECK_STR(json_string_value(json_object_get(arg, "op")), "SCMP_CMP_MASKED_EQ");
            CHECK_EQ_INT(json_integer_value(json_object_get(arg, "value")), 0x7e020000);
            CHECK_EQ_INT(json_integer_value(json_object_get(arg, "valueTwo")), 0);
        }
    }
    CHECK_EQ_INT(personalities, 5);
}

TEST(seccomp_capability_groups_follow_the_capabilities)
{
    const char *const admin[] = { "CAP_SYS_ADMIN", "CAP_SYS_TIME" };
    cleanup_json json_t *p = seccomp_profile(admin, ARRAY_SIZE(admin));
    CHECK_EQ_INT(lookup(p, "mount"), 1);
    CHECK_EQ_INT(lookup(p, "clone"), 1); /* unconditional: the flag check is dropped */
    CHECK_EQ_INT(lookup(p, "clone3"), 1);
    CHECK_EQ_INT(lookup(p, "settimeofday"), 1);
    CHECK_EQ_INT(lookup(p, "chroot"), 0); /* no CAP_SYS_CHROOT here */
    cleanup_json json_t *none = seccomp_profile(NULL, 0);
    CHECK_EQ_INT(lookup(none, "chroot"), 0);
    CHECK_EQ_INT(lookup(none, "read"), 1);
}
