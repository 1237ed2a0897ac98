/* Reading an instance's cgroup counters, on cgroup v1 (hybrid hosts, where
 * runc puts the memory controller under /sys/fs/cgroup/memory) and v2. */
#ifndef SL_NODE_CGROUP_H
#define SL_NODE_CGROUP_H

#include <stdint.h>

/* How many processes the OOM killer has ended in the cgroup at path (as in
 * the OCI config's cgroupsPath, e.g. "/suanli/<id>") since it was made:
 * `oom_kill` of memory.oom_control (v1) or memory.events (v2). -1 when the
 * cgroup or the counter does not exist (no error: the caller reports
 * nothing). */
int64_t cgroup_oom_kills(const char *cgroup_path);

#endif
