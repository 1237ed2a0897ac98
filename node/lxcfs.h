/* LXCFS (docs/design/node-runtime.md, "What an instance sees"): a FUSE file
 * system whose /proc/meminfo, /proc/cpuinfo, /proc/stat and the rest answer
 * each reader with its own cgroup's limits. Bound over an instance's /proc
 * files (oci.h), it makes `free`, `top` and /proc/meminfo inside show the
 * instance's memory and CPUs, not the host's. */
#ifndef SL_NODE_LXCFS_H
#define SL_NODE_LXCFS_H

#include <stdbool.h>
#include <stddef.h>

#include "../lib/error.h"

/* The files of an lxcfs mount bound over the same paths inside (runc
 * allows exactly these over /proc), relative to the mount. */
extern const char *const lxcfs_files[];
extern const size_t lxcfs_files_count;

/* Whether dir is a live lxcfs mount: mounted (fuse.lxcfs in
 * /proc/self/mountinfo) and answering. */
bool lxcfs_live(const char *dir);

/* The lxcfs mount instances get, after the node option `lxcfs` (mode):
 * "off": none (NULL, no error); a path: that mount, which must be live
 * (an lxcfs started by its own service, such as Debian's lxcfs.service at
 * /var/lib/lxcfs); "auto": DATA/lxcfs, the agent's own (*own set), which
 * lxcfs_revive starts when the first instance does, or none with a warning
 * when lxcfs is not installed. Fills *dir with a new absolute path, or NULL
 * for none. */
int lxcfs_ensure(const char *mode, const char *data_dir, char **dir, bool *own,
                 struct sl_error *err);

/* Before an instance starts: 0 when the lxcfs at dir is live, or, when it
 * is the agent's own (own), once it was started there (again): a daemon of
 * its own, pid in dir.pid, output in dir.log, that outlives the agent, since
 * running instances read it across an agent restart. Else SL_E_UNAVAILABLE
 * "lxcfs_down". */
int lxcfs_revive(const char *dir, bool own, struct sl_error *err);

#endif
