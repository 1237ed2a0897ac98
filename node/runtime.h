/* OCI runtimes behind one ops table (STYLE.md section 4): runc and crun,
 * chosen by name from a table (runtime.c) the way crun picks its cgroup
 * manager. A runtime keeps its own state under `root`; containers are named
 * by instance id. */
#ifndef SL_NODE_RUNTIME_H
#define SL_NODE_RUNTIME_H

#include <stdbool.h>
#include <sys/types.h>

#include "../lib/error.h"

enum runtime_status {
    RUNTIME_ABSENT = 0, /* no such container */
    RUNTIME_CREATING,
    RUNTIME_CREATED,
    RUNTIME_RUNNING,
    RUNTIME_PAUSED,
    RUNTIME_STOPPED,
};

struct runtime_state {
    enum runtime_status status;
    pid_t pid; /* the container's init on the host, 0 when none */
};

struct runtime;

struct runtime_ops {
    const char *name;
    /* Creates and starts the container from bundle_dir/config.json, detached.
     * Its stdout and stderr (sshd's log) are appended to log_path. On
     * failure no container of that id is left behind. */
    int (*run)(const struct runtime *rt, const char *id, const char *bundle_dir,
               const char *log_path, struct sl_error *err);
    /* run in two halves: create sets the container up (namespaces, mounts,
     * cgroups) with its init waiting, running nothing of the image; start
     * lets it run. create's failure leaves nothing behind, as run's. */
    int (*create)(const struct runtime *rt, const char *id, const char *bundle_dir,
                  const char *log_path, struct sl_error *err);
    int (*start)(const struct runtime *rt, const char *id, struct sl_error *err);
    /* Fills st; a missing container is RUNTIME_ABSENT, not an error. */
    int (*state)(const struct runtime *rt, const char *id, struct runtime_state *st,
                 struct sl_error *err);
    /* Sends sig to the container's init (all its processes when all is set).
     * A container that is not running is SL_E_CONFLICT ("not_running"). */
    int (*kill)(const struct runtime *rt, const char *id, int sig, bool all, struct sl_error *err);
    /* Deletes the container whatever its state, killing what runs. A missing
     * container is a no-op. */
    int (*delete)(const struct runtime *rt, const char *id, struct sl_error *err);
};

struct runtime {
    const struct runtime_ops *ops;
    const char *binary; /* e.g. "runc" or "/usr/sbin/runc" */
    const char *root;   /* state directory, e.g. DATA/runc */
};

extern const struct runtime_ops runtime_runc_ops;
extern const struct runtime_ops runtime_crun_ops;

/* Fills rt with the runtime spec names, from the table in runtime.c:
 *   "NAME"       runc or crun, its binary found in PATH;
 *   "NAME:PATH"  that runtime's command line, the binary at PATH (a wrapper
 *                or a runtime installed elsewhere);
 *   "PATH"       the runtime PATH's file name names: "runc", or "runc-"
 *                and more (a wrapper named after what it wraps).
 * Anything else fails with SL_E_INVALID, code "invalid_config", and a
 * message that lists the runtimes and the forms. rt keeps pointers into
 * spec and root: both must outlive it. */
int runtime_open(const char *spec, const char *root, struct runtime *rt, struct sl_error *err);

const char *runtime_status_name(enum runtime_status s);

/* Stops a container: SIGTERM, then SIGKILL to all its processes when it has
 * not stopped after grace_ms, then deletes it. Absent is a no-op. */
int runtime_stop(const struct runtime *rt, const char *id, int grace_ms, struct sl_error *err);

#endif
