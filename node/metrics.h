/* Metrics per instance (docs/design/metrics.md): every metrics.interval_s
 * a thread of the agent reads, for each instance desired running whose
 * cgroup exists, its cgroup's counters (CPU, memory, pids; cgroup v1 or
 * v2), its two disks (use by statvfs, bytes read and written from the loop
 * device's /sys/dev/block/MAJ:MIN/stat), its network namespace's
 * /proc/PID/net/dev and, for real GPUs, NVML. Files only: no process is
 * spawned, and the agent's loop never waits for it. Samples wait in memory
 * (at most METRICS_PENDING_MAX per instance) until a heartbeat takes them
 * to suanlid (metrics_take / metrics_sent).
 *
 * A sample is positional: the instance's `names` (lib/series.h: the base
 * series, then four per real GPU: gpuK_utilization_percent,
 * gpuK_memory_used_bytes, gpuK_temperature_celsius, gpuK_power_watts) and
 * `samples`
 * [[t, v0, v1, ...], ...] where null is a value not known this time (a
 * rate's first sample). `absent` says why a series is missing: e.g. each
 * GPU series of a simulated GPU is "simulated GPU: no NVML". */
#ifndef SL_NODE_METRICS_H
#define SL_NODE_METRICS_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpu.h"
#include "../lib/error.h"
#include "../lib/series.h"

#define METRICS_PENDING_MAX      720 /* per instance: 2 h at 10 s while suanlid is away */
#define METRICS_SEND_MAX         60  /* per instance and heartbeat: a backlog drains over several */
#define METRICS_SEND_TOTAL       2000 /* per heartbeat, all instances: well under 1 MiB */
#define METRICS_ABSENT_SIMULATED "simulated GPU: no NVML"

/* Counters of one instance read at one moment; -1: not known. */
struct metrics_counters {
    int64_t mono_us;
    int64_t cpu_usage_us;
    int64_t cpu_quota_us, cpu_period_us; /* quota -1: no limit */
    int64_t memory_bytes, memory_limit_bytes;
    int64_t pids;
    int64_t pid; /* a process of the instance (its network namespace) */
    int64_t system_used, system_size, data_used, data_size;
    int64_t read_bytes, write_bytes;
    int64_t rx_bytes, tx_bytes;
};

/* Parsing, exported for the unit tests. */

/* The value of the line "KEY N" of a flat-keyed file (cpu.stat,
 * memory.stat), or -1. */
int64_t metrics_keyed_value(const char *text, const char *key);

/* cgroup v2's cpu.max ("max 100000" or "200000 100000"): quota -1 for none. */
int metrics_parse_cpu_max(const char *text, int64_t *quota_us, int64_t *period_us);

/* A limit file: a number, or "max" / a v1 "unlimited" (> 2^62), both -1. */
int64_t metrics_parse_limit(const char *text);

/* /proc/PID/net/dev: the bytes received and sent on every interface but lo. */
int metrics_parse_net_dev(const char *text, int64_t *rx, int64_t *tx);

/* A block device's stat file (Documentation/block/stat.rst): bytes read
 * and written (sectors of 512 bytes). */
int metrics_parse_block_stat(const char *text, int64_t *read_bytes, int64_t *write_bytes);

/* Reads the cgroup counters (CPU, limit, memory, pids, one pid) of the
 * cgroup at path ("/suanli/ID") under root ("/sys/fs/cgroup"): the v1
 * controllers' hierarchies (cpuacct or cpu,cpuacct, cpu, memory, pids) or a
 * v2 tree. -1 when the cgroup does not exist (the instance does not run). */
int metrics_read_cgroup(const char *root, const char *path, struct metrics_counters *c);

/* The values of a sample from two readings of the same instance (prev
 * NULL: the first, rates unknown), in the order of lib/series.h's base
 * series; NAN is unknown. */
void metrics_values(const struct metrics_counters *prev, const struct metrics_counters *now,
                    double out[SL_SERIES_BASE]);

/* The collector. */

struct metrics_config {
    const char *data_dir;    /* DATA: instances/<id>/sys, data */
    const char *cgroup_root; /* "/sys/fs/cgroup" */
    struct gpu_source *gpus; /* shared with the agent: NVML is thread-safe */
    int64_t interval_ms;
    const char *listen;         /* "HOST:PORT" of /metrics; "" or "off": none */
    const char *forbidden_host; /* an address instances reach (the bridge's gateway) */
    /* the instances desired now: a new reference to the desired state's
     * array ([{id, desired, gpus, user_id}]) */
    json_t *(*instances)(void *ctx);
    void *ctx;
};

struct metrics_collector;

/* Starts the sampling thread and, when cfg->listen says so, /metrics on
 * that address (refused on the metadata address and cfg->forbidden_host,
 * which instances reach; the bridge's firewall drops instances' other
 * connections to the host). A listener that cannot bind is logged and left
 * out, as the rest of the host works without it. cfg's strings must
 * outlive the collector. */
struct metrics_collector *metrics_start(const struct metrics_config *cfg, struct sl_error *err);
void metrics_stop(struct metrics_collector *m);

/* The samples waiting, for the heartbeat's "metrics": [{id, names,
 * samples, absent}], the oldest first, at most METRICS_SEND_MAX per
 * instance and METRICS_SEND_TOTAL in all (a backlog drains over several
 * heartbeats); a new reference, NULL when nothing waits. Hand it back with
 * metrics_sent (ok: suanlid took it; else the samples go back in front of
 * those that came since). */
json_t *metrics_take(struct metrics_collector *m);
void metrics_sent(struct metrics_collector *m, json_t *batch, bool ok);

/* CPU time the sampling thread has used, seconds. */
double metrics_cpu_seconds(struct metrics_collector *m);

/* The Prometheus text of the latest samples (what the agent's /metrics
 * answers): suanli_instance_* gauges with instance_id and renter labels. */
char *metrics_render(struct metrics_collector *m, size_t *len);

#endif
