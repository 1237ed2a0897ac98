/* bench/metrics.py's driver: the agent's metrics collector (node/metrics.h)
 * run for SECONDS on N instances that bench/metrics.py made of real kernel
 * objects (a cgroup in each v1 hierarchy or under the v2 root with a
 * process in its own network namespace, and two loop-mounted ext4 disks
 * under DATA/instances/ID), and the floor beside it: the same files read,
 * stat'ed and statvfs'ed in a plain loop, as many passes, nothing parsed.
 * Prints one JSON line: {instances, passes, wall_s, collector_cpu_s,
 * floor_cpu_s}.
 *
 *   metrics-collect DATA_DIR CGROUP_ROOT N SECONDS INTERVAL_MS
 */
#include "../node/metrics.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static int n_instances;

static json_t *instances(void *ctx)
{
    (void)ctx;
    json_t *a = json_array();
    for (int i = 0; i < n_instances; i++) {
        char id[32];
        snprintf(id, sizeof(id), "bench-%d", i);
        json_array_append_new(a, json_pack("{s:s, s:s, s:[], s:s}", "id", id, "desired", "running",
                                           "gpus", "user_id", "u-bench"));
    }
    return a;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void slurp(const char *path)
{
    char buf[8192];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        while (read(fd, buf, sizeof(buf)) > 0)
            ;
        close(fd);
    }
}

/* One pass of the floor: what the collector reads of each instance. */
static void floor_pass(const char *data, const char *root, bool v2)
{
    static const char *const v1[] = { "cpuacct/%s/cpuacct.usage", "cpu/%s/cpu.cfs_quota_us",
                                      "cpu/%s/cpu.cfs_period_us", "memory/%s/memory.usage_in_bytes",
                                      "memory/%s/memory.stat",    "memory/%s/memory.limit_in_bytes",
                                      "pids/%s/pids.current",     "pids/%s/cgroup.procs" };
    static const char *const two[] = { "%s/cpu.stat",    "%s/cpu.max",    "%s/memory.current",
                                       "%s/memory.stat", "%s/memory.max", "%s/pids.current",
                                       "%s/cgroup.procs" };
    char path[600], rel[128], cg[64];

    for (int i = 0; i < n_instances; i++) {
        snprintf(cg, sizeof(cg), "suanli/bench-%d", i);
        const char *const *files = v2 ? two : v1;
        size_t n = v2 ? sizeof(two) / sizeof(*two) : sizeof(v1) / sizeof(*v1);
        for (size_t k = 0; k < n; k++) {
            snprintf(rel, sizeof(rel), files[k], cg);
            snprintf(path, sizeof(path), "%s/%s", root, rel);
            slurp(path);
        }
        /* the network namespace of the instance's first process */
        char pids[64] = "";
        snprintf(path, sizeof(path), v2 ? "%s/%s/cgroup.procs" : "%s/pids/%s/cgroup.procs", root,
                 cg);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t got = read(fd, pids, sizeof(pids) - 1);
            pids[got > 0 ? got : 0] = '\0';
            close(fd);
        }
        snprintf(path, sizeof(path), "/proc/%d/net/dev", atoi(pids));
        slurp(path);
        for (int d = 0; d < 2; d++) {
            struct stat st, parent;
            struct statvfs vfs;
            snprintf(path, sizeof(path), "%s/instances/bench-%d/%s", data, i, d ? "data" : "sys");
            stat(path, &st);
            statvfs(path, &vfs);
            strcat(path, "/..");
            stat(path, &parent);
            snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat", major(st.st_dev),
                     minor(st.st_dev));
            slurp(path);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: metrics-collect DATA_DIR CGROUP_ROOT N SECONDS INTERVAL_MS\n");
        return 2;
    }
    n_instances = atoi(argv[3]);
    int seconds = atoi(argv[4]);
    int64_t interval_ms = atoll(argv[5]);
    struct gpu_source none = { 0 };
    struct metrics_config cfg = { .data_dir = argv[1],
                                  .cgroup_root = argv[2],
                                  .gpus = &none,
                                  .interval_ms = interval_ms,
                                  .listen = "off",
                                  .instances = instances };
    struct sl_error err = SL_ERROR_INIT;
    char probe[512];

    snprintf(probe, sizeof(probe), "%s/cgroup.controllers", argv[2]);
    bool v2 = access(probe, F_OK) == 0;
    struct metrics_collector *m = metrics_start(&cfg, &err);
    if (!m) {
        fprintf(stderr, "metrics-collect: %s\n", err.message);
        return 1;
    }
    sleep((unsigned)seconds);
    double collector = metrics_cpu_seconds(m);
    json_t *batch = metrics_take(m);
    size_t sampled = json_array_size(batch);
    size_t passes = json_array_size(json_object_get(json_array_get(batch, 0), "samples"));
    metrics_sent(m, batch, true);
    metrics_stop(m);

    double before = cpu_now();
    for (size_t p = 0; p < passes; p++)
        floor_pass(argv[1], argv[2], v2);
    double floor = cpu_now() - before;
    printf("{\"instances\": %d, \"sampled\": %zu, \"passes\": %zu, \"wall_s\": %d, "
           "\"collector_cpu_s\": %.6f, \"floor_cpu_s\": %.6f}\n",
           n_instances, sampled, passes, seconds, collector, floor);
    return sampled == (size_t)n_instances ? 0 : 1;
}
