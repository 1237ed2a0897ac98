#include "seccomp.h"
#include "../lib/cleanup.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* One declarative table: what Docker's default profile (moby's
 * profiles/seccomp/default.json) allows, written out for suanli's two host
 * architectures. Docker's semantics:
 *   - everything not listed fails with EPERM (the default action);
 *   - a rule with `cap` applies only when the container holds it, one with
 *     `unless_cap` only when it does not (suanli never grants SYS_ADMIN, so
 *     of Docker's capability groups only SYS_CHROOT's applies; the others
 *     are kept here so that granting a capability in oci.c brings its
 *     syscalls along, as `docker run --cap-add` does);
 *   - a rule with `arches` applies only on those host architectures;
 *   - a rule with an argument check allows the call only when it holds.
 * Names libseccomp does not know (newer syscalls) are skipped by runc; a
 * syscall newer than any it knows returns ENOSYS, so libcs fall back. */

enum {
    ARCH_AMD64 = 1 << 0,
    ARCH_X86 = 1 << 1,
    ARCH_ARM64 = 1 << 2,
    ARCH_ARM = 1 << 3,
};

#if defined(__x86_64__)
#define HOST_ARCH ARCH_AMD64
#elif defined(__i386__)
#define HOST_ARCH ARCH_X86
#elif defined(__aarch64__)
#define HOST_ARCH ARCH_ARM64
#elif defined(__arm__)
#define HOST_ARCH ARCH_ARM
#else
#error "suanli-node builds its seccomp profile for x86 and ARM hosts only"
#endif

#define ERRNO_EPERM  1
#define ERRNO_ENOSYS 38

/* Flags of clone() that create namespaces: NEWNS, NEWCGROUP, NEWUTS,
 * NEWIPC, NEWUSER, NEWPID, NEWNET (0x7e020000). */
#define CLONE_NAMESPACE_FLAGS 0x7e020000ULL
#define AF_VSOCK_FAMILY       40

struct sc_arg {
    unsigned index;
    uint64_t value;
    uint64_t value_two;
    const char *op; /* NULL: no argument check */
};

struct sc_rule {
    const char *const *names; /* NULL-terminated */
    int errno_ret;            /* 0: SCMP_ACT_ALLOW; else SCMP_ACT_ERRNO with it */
    unsigned arches;          /* 0: every architecture */
    const char *cap;          /* only when held */
    const char *unless_cap;   /* only when not held */
    struct sc_arg arg;
};

#define NAMES(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define ARG(i, cmp, v, v2)                                                                         \
    {                                                                                              \
        .index = (i), .value = (v), .value_two = (v2), .op = (cmp)                                 \
    }
#define PERSONALITY(v)                                                                             \
    {                                                                                              \
        .names = NAMES("personality"), .arg = ARG(0, "SCMP_CMP_EQ", (v), 0)                        \
    }

static const struct sc_rule rules[] = {
    /* Docker's unconditional allow-list. */
    { .names = NAMES(
          "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk", "cachestat", "capget",
          "capset", "chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64",
          "clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
          "clock_nanosleep", "clock_nanosleep_time64", "close", "close_range", "connect",
          "copy_file_range", "creat", "dup", "dup2", "dup3", "epoll_create", "epoll_create1",
          "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2", "epoll_wait",
          "epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat", "exit", "exit_group",
          "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate", "fanotify_mark",
          "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat", "fcntl",
          "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr",
          "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync",
          "ftruncate", "ftruncate64", "futex", "futex_requeue", "futex_time64", "futex_wait",
          "futex_waitv", "futex_wake", "futimesat", "getcpu", "getcwd", "getdents", "getdents64",
          "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups",
          "getgroups32", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
          "getpriority", "getrandom", "getresgid", "getresgid32", "getresuid", "getresuid32",
          "getrlimit", "get_robust_list", "getrusage", "getsid", "getsockname", "getsockopt",
          "get_thread_area", "gettid", "gettimeofday", "getuid", "getuid32", "getxattr",
          "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "io_cancel",
          "ioctl", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
          "ioprio_get", "ioprio_set", "io_setup", "io_submit", "io_uring_enter",
          "io_uring_register", "io_uring_setup", "ipc", "kill", "landlock_add_rule",
          "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32", "lgetxattr",
          "link", "linkat", "listen", "listxattr", "llistxattr", "_llseek", "lremovexattr", "lseek",
          "lsetxattr", "lstat", "lstat64", "madvise", "map_shadow_stack", "membarrier",
          "memfd_create", "memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat",
          "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mq_getsetattr", "mq_notify",
          "mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend",
          "mq_timedsend_time64", "mq_unlink", "mremap", "mseal", "msgctl", "msgget", "msgrcv",
          "msgsnd", "msync", "munlock", "munlockall", "munmap", "name_to_handle_at", "nanosleep",
          "newfstatat", "_newselect", "open", "openat", "openat2", "pause", "pidfd_open",
          "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll",
          "ppoll", "ppoll_time64", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
          "process_mrelease", "pselect6", "pselect6_time64", "pwrite64", "pwritev", "pwritev2",
          "read", "readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom", "recvmmsg",
          "recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr", "rename", "renameat",
          "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
          "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
          "rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr",
          "sched_getparam", "sched_get_priority_max", "sched_get_priority_min",
          "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
          "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
          "sched_yield", "seccomp", "select", "semctl", "semget", "semop", "semtimedop",
          "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto",
          "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
          "setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32",
          "setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32",
          "setrlimit", "set_robust_list", "setsid", "setsockopt", "set_thread_area",
          "set_tid_address", "setuid", "setuid32", "setxattr", "shmat", "shmctl", "shmdt", "shmget",
          "shutdown", "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn",
          "socketcall", "socketpair", "splice", "stat", "stat64", "statfs", "statfs64", "statx",
          "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill",
          "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
          "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create",
          "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
          "tkill", "truncate", "truncate64", "ugetrlimit", "umask", "uname", "unlink", "unlinkat",
          "utime", "utimensat", "utimensat_time64", "utimes", "vfork", "vmsplice", "wait4",
          "waitid", "waitpid", "write", "writev") },
    /* Docker allows these on kernels >= 4.8, where seccomp runs after the
     * ptrace hooks (so a tracer cannot skip the filter); suanli needs a newer
     * kernel anyway. Yama and the pid namespace limit whom they reach. */
    { .names = NAMES("ptrace", "process_vm_readv", "process_vm_writev") },

    /* Every socket family but AF_VSOCK (the host's hypervisor channel). */
    { .names = NAMES("socket"), .arg = ARG(0, "SCMP_CMP_NE", AF_VSOCK_FAMILY, 0) },
    /* personality: PER_LINUX, PER_LINUX32, UNAME26 (with either), and the
     * query 0xffffffff; not READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ... */
    PERSONALITY(0x0),
    PERSONALITY(0x8),
    PERSONALITY(0x20000),
    PERSONALITY(0x20008),
    PERSONALITY(0xffffffff),

    /* Architecture-specific calls. */
    { .names = NAMES("arch_prctl"), .arches = ARCH_AMD64 },
    { .names = NAMES("modify_ldt"), .arches = ARCH_AMD64 | ARCH_X86 },
    { .names = NAMES("arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint",
                     "cacheflush", "set_tls"),
      .arches = ARCH_ARM64 | ARCH_ARM },

    /* clone without namespace flags; clone3 hides its flags behind a pointer
     * the filter cannot read, so it returns ENOSYS and glibc uses clone. */
    { .names = NAMES("clone"),
      .unless_cap = "CAP_SYS_ADMIN",
      .arg = ARG(0, "SCMP_CMP_MASKED_EQ", CLONE_NAMESPACE_FLAGS, 0) },
    { .names = NAMES("clone3"), .errno_ret = ERRNO_ENOSYS, .unless_cap = "CAP_SYS_ADMIN" },

    /* Docker's capability-gated groups. */
    { .names = NAMES("bpf", "clone", "clone3", "fanotify_init", "fsconfig", "fsmount", "fsopen",
                     "fspick", "lookup_dcookie", "mount", "mount_setattr", "move_mount",
                     "open_tree", "perf_event_open", "quotactl", "quotactl_fd", "setdomainname",
                     "sethostname", "setns", "syslog", "umount", "umount2", "unshare"),
      .cap = "CAP_SYS_ADMIN" },
    { .names = NAMES("open_by_handle_at"), .cap = "CAP_DAC_READ_SEARCH" },
    { .names = NAMES("reboot"), .cap = "CAP_SYS_BOOT" },
    { .names = NAMES("chroot"), .cap = "CAP_SYS_CHROOT" },
    { .names = NAMES("delete_module", "init_module", "finit_module"), .cap = "CAP_SYS_MODULE" },
    { .names = NAMES("acct"), .cap = "CAP_SYS_PACCT" },
    { .names = NAMES("kcmp", "pidfd_getfd", "process_madvise", "process_vm_readv",
                     "process_vm_writev", "ptrace"),
      .cap = "CAP_SYS_PTRACE" },
    { .names = NAMES("iopl", "ioperm"), .cap = "CAP_SYS_RAWIO" },
    { .names = NAMES("settimeofday", "stime", "clock_settime", "clock_settime64"),
      .cap = "CAP_SYS_TIME" },
    { .names = NAMES("vhangup"), .cap = "CAP_SYS_TTY_CONFIG" },
    { .names = NAMES("get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"),
      .cap = "CAP_SYS_NICE" },
    { .names = NAMES("syslog"), .cap = "CAP_SYSLOG" },
    { .names = NAMES("bpf"), .cap = "CAP_BPF" },
    { .names = NAMES("perf_event_open"), .cap = "CAP_PERFMON" },
};

static bool holds(const char *const *caps, size_t n_caps, const char *cap)
{
    for (size_t i = 0; i < n_caps; i++)
        if (strcmp(caps[i], cap) == 0)
            return true;
    return false;
}

static json_t *rule_json(const struct sc_rule *r)
{
    json_t *names = json_array();
    for (const char *const *n = r->names; *n; n++)
        json_array_append_new(names, json_string(*n));
    json_t *o = json_pack("{s:o, s:s}", "names", names, "action",
                          r->errno_ret ? "SCMP_ACT_ERRNO" : "SCMP_ACT_ALLOW");
    if (r->errno_ret)
        json_object_set_new(o, "errnoRet", json_integer(r->errno_ret));
    if (r->arg.op)
        json_object_set_new(o, "args",
                            json_pack("[{s:i, s:I, s:I, s:s}]", "index", (int)r->arg.index, "value",
                                      (json_int_t)r->arg.value, "valueTwo",
                                      (json_int_t)r->arg.value_two, "op", r->arg.op));
    return o;
}

json_t *seccomp_profile(const char *const *caps, size_t n_caps)
{
    json_t *syscalls = json_array();
    for (size_t i = 0; i < ARRAY_SIZE(rules); i++) {
        const struct sc_rule *r = &rules[i];
        if (r->arches && !(r->arches & HOST_ARCH))
            continue;
        if (r->cap && !holds(caps, n_caps, r->cap))
            continue;
        if (r->unless_cap && holds(caps, n_caps, r->unless_cap))
            continue;
        json_array_append_new(syscalls, rule_json(r));
    }
#if defined(__x86_64__) || defined(__i386__)
    json_t *arches = json_pack("[s,s,s]", "SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32");
#else
    json_t *arches = json_pack("[s,s]", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM");
#endif
    return json_pack("{s:s, s:i, s:o, s:o}", "defaultAction", "SCMP_ACT_ERRNO", "defaultErrnoRet",
                     ERRNO_EPERM, "architectures", arches, "syscalls", syscalls);
}
