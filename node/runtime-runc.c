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
    .state = oci_state,
    .kill = oci_kill,
    .delete = oci_delete,
};

const struct runtime_ops runtime_crun_ops = {
    .name = "crun",
    .run = oci_run,
    .state = oci_state,
    .kill = oci_kill,
    .delete = oci_delete,
};
