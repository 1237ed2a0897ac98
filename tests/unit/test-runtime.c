/* node/runtime.c and runtime-runc.c: the runtime chosen by name from the
 * table, and the real runc and crun binaries (scripts/deps.sh test installs
 * both) driven through the ops: a container's whole life with runc, and
 * with both what an absent or stopped container answers, which the two
 * runtimes word differently. As root only (runc needs it); elsewhere the
 * table's checks run alone. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/xalloc.h"
#include "../../node/runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

TEST(runtime_chosen_by_name)
{
    struct sl_error err = SL_ERROR_INIT;
    struct runtime rt;
    static const struct {
        const char *spec, *name, *binary;
    } good[] = {
        { "runc", "runc", "runc" },
        { "crun", "crun", "crun" },
        { "/usr/sbin/runc", "runc", "/usr/sbin/runc" },
        { "/tmp/x/runc-wrapper", "runc", "/tmp/x/runc-wrapper" },
        { "/usr/bin/crun", "crun", "/usr/bin/crun" },
        { "crun:/opt/bin/crun-1.19", "crun", "/opt/bin/crun-1.19" },
        { "runc:/tmp/injector", "runc", "/tmp/injector" },
        { "/opt/a:b/runc", "runc", "/opt/a:b/runc" },
    };

    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        if (!CHECK_EQ_INT(runtime_open(good[i].spec, "/run/x", &rt, &err), 0)) {
            test_fail(__FILE__, __LINE__, "%s: %s", good[i].spec, err.message);
            continue;
        }
        CHECK_STR(rt.ops->name, good[i].name);
        CHECK_STR(rt.binary, good[i].binary);
        CHECK_STR(rt.root, "/run/x");
    }
    static const char *const bad[] = {
        "kata", "runsc", "/usr/bin/runcx", "/usr/bin/docker-runc", "youki:/usr/bin/youki", "runc:",
        "",     "RUNC"
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        sl_error_clear(&err);
        CHECK_EQ_INT(runtime_open(bad[i], "/run/x", &rt, &err), -1);
        CHECK_EQ_INT(err.kind, SL_E_INVALID);
        CHECK_STR(err.code, "invalid_config");
        CHECK_CONTAINS(err.message, "use runc or crun");
    }
}

/* A bundle whose root file system is empty directories and the host's /usr
 * bound read-only: enough for sleep, nothing to build. */
static const char *make_bundle(void)
{
    static const char config[] =
        "{\"ociVersion\": \"1.0.2\","
        " \"process\": {\"terminal\": false, \"user\": {\"uid\": 0, \"gid\": 0},"
        "  \"args\": [\"sleep\", \"120\"], \"env\": [\"PATH=/usr/bin:/bin\"], \"cwd\": \"/\","
        "  \"noNewPrivileges\": true},"
        " \"root\": {\"path\": \"rootfs\", \"readonly\": true},"
        " \"mounts\": ["
        "  {\"destination\": \"/proc\", \"type\": \"proc\", \"source\": \"proc\"},"
        "  {\"destination\": \"/dev\", \"type\": \"tmpfs\", \"source\": \"tmpfs\","
        "   \"options\": [\"nosuid\", \"mode=755\", \"size=1024k\"]},"
        "  {\"destination\": \"/usr\", \"type\": \"bind\", \"source\": \"/usr\","
        "   \"options\": [\"rbind\", \"ro\"]}],"
        " \"linux\": {\"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"mount\"},"
        "  {\"type\": \"ipc\"}, {\"type\": \"uts\"}, {\"type\": \"network\"}]}}";
    const char *bundle = test_path("bundle");
    static const char *const dirs[] = { "", "/rootfs", "/rootfs/usr", "/rootfs/proc",
                                        "/rootfs/dev" };

    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
        cleanup_free char *d = xasprintf("%s%s", bundle, dirs[i]);
        if (mkdir(d, 0755) < 0)
            test_fail(__FILE__, __LINE__, "mkdir %s", d);
    }
    static const char *const links[][2] = { { "usr/bin", "bin" },
                                            { "usr/lib", "lib" },
                                            { "usr/lib64", "lib64" } };
    for (size_t i = 0; i < ARRAY_SIZE(links); i++) {
        cleanup_free char *l = xasprintf("%s/rootfs/%s", bundle, links[i][1]);
        if (symlink(links[i][0], l) < 0)
            test_fail(__FILE__, __LINE__, "symlink %s", l);
    }
    test_write_file("bundle/config.json", config);
    return bundle;
}

static enum runtime_status status_of(const struct runtime *rt, const char *id)
{
    struct sl_error err = SL_ERROR_INIT;
    struct runtime_state st = { .status = RUNTIME_CREATING };

    if (rt->ops->state(rt, id, &st, &err) < 0)
        test_fail(__FILE__, __LINE__, "%s state: %s", rt->ops->name, err.message);
    return st.status;
}

/* Polls until the container's status is want, for up to 5 s. */
static bool wait_status(const struct runtime *rt, const char *id, enum runtime_status want)
{
    for (int i = 0; i < 250; i++) {
        if (status_of(rt, id) == want)
            return true;
        nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000000L }, NULL);
    }
    return test_fail(__FILE__, __LINE__, "%s: not %s after 5 s", id, runtime_status_name(want));
}

/* What every runtime must answer about a container it does not have. */
static void check_absent(const struct runtime *rt, const char *id)
{
    struct sl_error err = SL_ERROR_INIT;
    struct runtime_state st = { .status = RUNTIME_RUNNING, .pid = 42 };

    if (!CHECK_EQ_INT(rt->ops->state(rt, id, &st, &err), 0))
        test_fail(__FILE__, __LINE__, "%s state: %s", rt->ops->name, err.message);
    CHECK_EQ_INT(st.status, RUNTIME_ABSENT);
    CHECK_EQ_INT(st.pid, 0);
    sl_error_clear(&err);
    CHECK_EQ_INT(rt->ops->kill(rt, id, SIGTERM, false, &err), -1);
    CHECK_EQ_INT(err.kind, SL_E_CONFLICT);
    CHECK_STR(err.code, "not_running");
    sl_error_clear(&err);
    CHECK_EQ_INT(rt->ops->kill(rt, id, SIGKILL, true, &err), -1);
    CHECK_STR(err.code, "not_running");
    sl_error_clear(&err);
    CHECK_EQ_INT(rt->ops->delete (rt, id, &err), 0);
    CHECK_EQ_INT(runtime_stop(rt, id, 100, &err), 0);
}

TEST(absent_containers_in_both_dialects)
{
    static const char *const names[] = { "runc", "crun" };

    if (geteuid() != 0) {
        fprintf(stderr, "absent_containers_in_both_dialects: not root, runtimes not tried\n");
        return;
    }
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        struct sl_error err = SL_ERROR_INIT;
        struct runtime rt;
        cleanup_free char *root = xasprintf("%s/%s-state", test_tmpdir(), names[i]);
        if (!CHECK_EQ_INT(runtime_open(names[i], root, &rt, &err), 0))
            continue;
        /* before the runtime made its root (runc makes it on first use), and after */
        check_absent(&rt, "sl-unit-none");
        if (!CHECK(mkdir(root, 0700) == 0 || errno == EEXIST))
            continue;
        check_absent(&rt, "sl-unit-none");
    }
}

TEST(runc_runs_kills_and_deletes)
{
    struct sl_error err = SL_ERROR_INIT;
    struct runtime rt;
    char id[64];

    if (geteuid() != 0) {
        fprintf(stderr, "runc_runs_kills_and_deletes: not root, runc not tried\n");
        return;
    }
    snprintf(id, sizeof(id), "sl-unit-%d", (int)getpid());
    const char *bundle = make_bundle();
    const char *root = test_path("runc-state");
    const char *log = test_path("runc.log");
    if (!CHECK_EQ_INT(runtime_open("runc", root, &rt, &err), 0))
        return;

    if (!CHECK_EQ_INT(rt.ops->run(&rt, id, bundle, log, &err), 0)) {
        test_fail(__FILE__, __LINE__, "run: %s", err.message);
        return;
    }
    struct runtime_state st;
    CHECK_EQ_INT(rt.ops->state(&rt, id, &st, &err), 0);
    CHECK_EQ_INT(st.status, RUNTIME_RUNNING);
    CHECK(st.pid > 1 && kill(st.pid, 0) == 0);

    /* killed, it is stopped, not absent; a kill then is "not_running" */
    CHECK_EQ_INT(rt.ops->kill(&rt, id, SIGKILL, false, &err), 0);
    wait_status(&rt, id, RUNTIME_STOPPED);
    CHECK_EQ_INT(rt.ops->kill(&rt, id, SIGTERM, false, &err), -1);
    CHECK_STR(err.code, "not_running");
    sl_error_clear(&err);
    CHECK_EQ_INT(rt.ops->delete (&rt, id, &err), 0);
    CHECK_EQ_INT(status_of(&rt, id), RUNTIME_ABSENT);

    /* sleep as the pid namespace's init ignores SIGTERM: runtime_stop
     * escalates to SIGKILL after the grace period and deletes it */
    if (!CHECK_EQ_INT(rt.ops->run(&rt, id, bundle, log, &err), 0)) {
        test_fail(__FILE__, __LINE__, "run again: %s", err.message);
        return;
    }
    CHECK_EQ_INT(runtime_stop(&rt, id, 200, &err), 0);
    CHECK_EQ_INT(status_of(&rt, id), RUNTIME_ABSENT);
    cleanup_free char *dir = xasprintf("%s/%s", root, id);
    CHECK(access(dir, F_OK) < 0);
}
