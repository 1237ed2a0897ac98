/* runc and crun: both speak the command line runc set (`--root DIR run
 * --detach --bundle`, `state`, `kill [--all]`, `delete --force`) and print
 * the same state JSON, so one implementation serves both; only their
 * messages differ, and nothing here depends on a message alone: a container
 * whose state directory (ROOT/ID, which both keep) is gone is absent, and a
 * kill that fails on a container the runtime reports stopped is
 * "not_running". */
#include "runtime.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *word;
    enum runtime_status status;
} oci_statuses[] = {
    { "creating", RUNTIME_CREATING }, { "created", RUNTIME_CREATED },
    { "running", RUNTIME_RUNNING },   { "paused", RUNTIME_PAUSED },
    { "stopped", RUNTIME_STOPPED },
};

static int oci_delete(const struct runtime *rt, const char *id, struct sl_error *err)
{
    struct runtime_state st;
    if (rt->ops->state(rt, id, &st, err) < 0)
        return -1;
    if (st.status == RUNTIME_ABSENT)
        return 0;
    const char *argv[] = { rt->binary, "--root", rt->root, "delete", "--force", id, NULL };
    if (sl_run(argv, NULL, err) < 0) {
        sl_error_prefix(err, "delete container '%s'", id);
        return -1;
    }
    return 0;
}

static int oci_run(const struct runtime *rt, const char *id, const char *bundle_dir,
                   const char *log_path, struct sl_error *err)
{
    cleanup_free char *pid_file = xasprintf("%s/init.pid", bundle_dir);
    const char *argv[] = { rt->binary, "--root",     rt->root, "run", "--detach", "--bundle",
                           bundle_dir, "--pid-file", pid_file, id,    NULL };
    /* Detached without a terminal, the container inherits runc's stdio: a
     * pipe would never reach end-of-file while sshd lives, hence a file. */
    struct sl_subprocess sp = { .argv = argv, .log_path = log_path };
    int rc = sl_subprocess_check(&sp, err);
    if (rc == 0)
        return 0;
    sl_error_prefix(err, "run container '%s'", id);
    struct sl_error e = SL_ERROR_INIT;
    sl_error_gather(err, &rc, oci_delete(rt, id, &e), &e);
    return -1;
}

static int oci_create(const struct runtime *rt, const char *id, const char *bundle_dir,
                      const char *log_path, struct sl_error *err)
{
    cleanup_free char *pid_file = xasprintf("%s/init.pid", bundle_dir);
    const char *argv[] = { rt->binary, "--root",     rt->root, "create", "--bundle",
                           bundle_dir, "--pid-file", pid_file, id,       NULL };
    /* the container keeps runc's stdio, as with run --detach: the log */
    struct sl_subprocess sp = { .argv = argv, .log_path = log_path };
    int rc = sl_subprocess_check(&sp, err);
    if (rc == 0)
        return 0;
    sl_error_prefix(err, "create container '%s'", id);
    struct sl_error e = SL_ERROR_INIT;
    sl_error_gather(err, &rc, oci_delete(rt, id, &e), &e);
    return -1;
}

static int oci_start(const struct runtime *rt, const char *id, struct sl_error *err)
{
    const char *argv[] = { rt->binary, "--root", rt->root, "start", id, NULL };
    if (sl_run(argv, NULL, err) < 0) {
        sl_error_prefix(err, "start container '%s'", id);
        return -1;
    }
    return 0;
}

/* Both runtimes keep a directory per container under their root. */
static bool state_dir_exists(const struct runtime *rt, const char *id)
{
    cleanup_free char *dir = xasprintf("%s/%s", rt->root, id);
    struct stat st;

    return lstat(dir, &st) == 0 || errno != ENOENT;
}

static int oci_state(const struct runtime *rt, const char *id, struct runtime_state *st,
                     struct sl_error *err)
{
    *st = (struct runtime_state){ .status = RUNTIME_ABSENT };
    cleanup_buf struct sl_buf out = SL_BUF_INIT;
    cleanup_buf struct sl_buf errout = SL_BUF_INIT;
    const char *argv[] = { rt->binary, "--root", rt->root, "state", id, NULL };
    struct sl_subprocess sp = { .argv = argv, .out = &out, .err = &errout };
    int rc = sl_subprocess_run(&sp, err);
    if (rc != 0) {
        bool absent =
            rc > 0 && (strstr(errout.data, "does not exist") || !state_dir_exists(rt, id));
        if (rc > 0 && !absent)
            sl_fail(err, SL_E_INTERNAL, "runtime_failed", "%s state '%s': %.300s", rt->ops->name,
                    id, errout.data);
        return absent ? 0 : -1;
    }
    json_error_t jerr;
    cleanup_json json_t *obj = json_loadb(out.data, out.len, 0, &jerr);
    if (!obj)
        return sl_fail(err, SL_E_INTERNAL, "runtime_failed", "%s state '%s': bad JSON: %s",
                       rt->ops->name, id, jerr.text);
    const char *status = json_string_value(json_object_get(obj, "status"));
    for (size_t i = 0; status && i < ARRAY_SIZE(oci_statuses); i++) {
        if (strcmp(status, oci_statuses[i].word) == 0)
            st->status = oci_statuses[i].status;
    }
    if (st->status == RUNTIME_ABSENT)
        return sl_fail(err, SL_E_INTERNAL, "runtime_failed", "%s state '%s': status '%s'",
                       rt->ops->name, id, status ? status : "(none)");
    st->pid = (pid_t)json_integer_value(json_object_get(obj, "pid"));
    return 0;
}

/* runc's own state, read as `runc state` reads it (libcontainer's
 * runType): ROOT/ID/state.json names the init process and its start time;
 * that process alive with that start time (not a zombie) is a container
 * created (exec.fifo still there) or running, and paused when its freezer
 * cgroup says FROZEN; otherwise it stopped. No run of runc (a Go program:
 * ~10 ms of CPU, and the agent asks for every instance at every pass).
 * 1: st filled; 0: not readable so (no state.json yet, another format):
 * the caller asks runc. */
static int runc_state_file(const struct runtime *rt, const char *id, struct runtime_state *st)
{
    cleanup_free char *path = xasprintf("%s/%s/state.json", rt->root, id);
    json_error_t jerr;
    cleanup_json json_t *obj = json_load_file(path, 0, &jerr);
    json_t *pid_j = json_object_get(obj, "init_process_pid");
    json_t *start_j = json_object_get(obj, "init_process_start");
    if (!json_is_integer(pid_j) || !json_is_integer(start_j) || json_integer_value(pid_j) <= 0)
        return 0;
    pid_t pid = (pid_t)json_integer_value(pid_j);
    unsigned long long want = (unsigned long long)json_integer_value(start_j);

    *st = (struct runtime_state){ .status = RUNTIME_STOPPED };
    char stat_path[64];
    snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", (int)pid);
    cleanup_fclose FILE *f = fopen(stat_path, "re");
    char line[1024];
    if (!f || !fgets(line, sizeof(line), f))
        return 1;                 /* gone */
    char *p = strrchr(line, ')'); /* after the command name, which may hold anything */
    char state = 0;
    unsigned long long start = 0;
    if (!p || sscanf(p + 1,
                     " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                     "%*d %*d %llu",
                     &state, &start) != 2)
        return 0;
    if (start != want || state == 'Z' || state == 'X' || state == 'x')
        return 1;
    st->pid = pid;
    cleanup_free char *fifo = xasprintf("%s/%s/exec.fifo", rt->root, id);
    st->status = access(fifo, F_OK) == 0 ? RUNTIME_CREATED : RUNTIME_RUNNING;
    /* cgroup v1's freezer, or v2's cgroup.freeze */
    json_t *paths = json_object_get(obj, "cgroup_paths");
    const char *v1 = json_string_value(json_object_get(paths, "freezer"));
    const char *v2 = json_string_value(json_object_get(paths, ""));
    cleanup_free char *freeze = v1   ? xasprintf("%s/freezer.state", v1)
                                : v2 ? xasprintf("%s/cgroup.freeze", v2)
                                     : NULL;
    cleanup_fclose FILE *fz = freeze ? fopen(freeze, "re") : NULL;
    char buf[32] = "";
    if (fz && fgets(buf, sizeof(buf), fz) &&
        (strncmp(buf, "FROZEN", 6) == 0 || (!v1 && buf[0] == '1')))
        st->status = RUNTIME_PAUSED;
    return 1;
}

static int runc_state(const struct runtime *rt, const char *id, struct runtime_state *st,
                      struct sl_error *err)
{
    *st = (struct runtime_state){ .status = RUNTIME_ABSENT };
    if (!state_dir_exists(rt, id))
        return 0;
    if (runc_state_file(rt, id, st) == 1)
        return 0;
    return oci_state(rt, id, st, err);
}

static int oci_kill(const struct runtime *rt, const char *id, int sig, bool all,
                    struct sl_error *err)
{
    char signame[16];
    snprintf(signame, sizeof(signame), "%d", sig);
    const char *argv[] = {
        rt->binary,           "--root", rt->root, "kill", all ? "--all" : id, all ? id : signame,
        all ? signame : NULL, NULL
    };
    cleanup_buf struct sl_buf errout = SL_BUF_INIT;
    struct sl_subprocess sp = { .argv = argv, .err = &errout };
    int rc = sl_subprocess_run(&sp, err);
    if (rc > 0) {
        struct runtime_state st;
        struct sl_error state_err = SL_ERROR_INIT;
        bool gone = strstr(errout.data, "not running") || strstr(errout.data, "does not exist") ||
                    (oci_state(rt, id, &st, &state_err) == 0 &&
                     (st.status == RUNTIME_ABSENT || st.status == RUNTIME_STOPPED));
        if (gone)
            sl_fail(err, SL_E_CONFLICT, "not_running", "container '%s' is not running", id);
        else
            sl_fail(err, SL_E_INTERNAL, "runtime_failed", "%s kill '%s': %.300s", rt->ops->name, id,
                    errout.data);
    }
    return rc == 0 ? 0 : -1;
}

const struct runtime_ops runtime_runc_ops = {
    .name = "runc",
    .run = oci_run,
    .create = oci_create,
    .start = oci_start,
    .state = runc_state,
    .kill = oci_kill,
    .delete = oci_delete,
};

const struct runtime_ops runtime_crun_ops = {
    .name = "crun",
    .run = oci_run,
    .create = oci_create,
    .start = oci_start,
    .state = oci_state,
    .kill = oci_kill,
    .delete = oci_delete,
};
