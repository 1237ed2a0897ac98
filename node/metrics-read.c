/* Reading an instance's counters from files: its cgroup (v1 or v2), and
 * the parsing of the kernel's text formats the collector reads. */
#include "metrics.h"

#include "../lib/cleanup.h"
#include "../lib/timefmt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int64_t metrics_keyed_value(const char *text, const char *key)
{
    size_t klen = strlen(key);

    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            char *end;
            long long v = strtoll(line + klen + 1, &end, 10);
            return end == line + klen + 1 ? -1 : v;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -1;
}

int64_t metrics_parse_limit(const char *text)
{
    char *end;

    if (!text || strncmp(text, "max", 3) == 0)
        return -1;
    long long v = strtoll(text, &end, 10);
    if (end == text || v < 0 || v > (1LL << 62))
        return -1;
    return v;
}

int metrics_parse_cpu_max(const char *text, int64_t *quota_us, int64_t *period_us)
{
    char quota[32];
    long long period;

    if (!text || sscanf(text, "%31s %lld", quota, &period) != 2 || period <= 0)
        return -1;
    *period_us = period;
    *quota_us = strcmp(quota, "max") == 0 ? -1 : strtoll(quota, NULL, 10);
    return 0;
}

int metrics_parse_net_dev(const char *text, int64_t *rx, int64_t *tx)
{
    int found = -1;

    *rx = *tx = 0;
    /* two header lines, then "  NAME: rx_bytes packets errs drop fifo
     * frame compressed multicast tx_bytes ..." */
    for (const char *line = text; line && *line;) {
        const char *colon = strchr(line, ':'), *nl = strchr(line, '\n');
        if (colon && (!nl || colon < nl)) {
            const char *name = line;
            while (*name == ' ')
                name++;
            unsigned long long r, t;
            if (!(colon - name == 2 && strncmp(name, "lo", 2) == 0) &&
                sscanf(colon + 1, "%llu %*u %*u %*u %*u %*u %*u %*u %llu", &r, &t) == 2) {
                *rx += (int64_t)r;
                *tx += (int64_t)t;
                found = 0;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return found;
}

int metrics_parse_block_stat(const char *text, int64_t *read_bytes, int64_t *write_bytes)
{
    unsigned long long rs, ws;

    if (!text || sscanf(text, "%*u %*u %llu %*u %*u %*u %llu", &rs, &ws) != 2)
        return -1;
    *read_bytes = (int64_t)rs * 512;
    *write_bytes = (int64_t)ws * 512;
    return 0;
}

/* A small file into buf (NUL-terminated); its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

/* The first existing file of root/DIR/path/name for each DIR (v1) or of
 * root/path/name (dirs NULL: v2), read into buf. */
static ssize_t read_cgroup_file(const char *root, const char *const *dirs, const char *path,
                                const char *name, char *buf, size_t size)
{
    char p[512];

    for (size_t i = 0; dirs && dirs[i]; i++) {
        snprintf(p, sizeof(p), "%s/%s%s/%s", root, dirs[i], path, name);
        ssize_t n = read_small(p, buf, size);
        if (n >= 0)
            return n;
    }
    if (dirs)
        return -1;
    snprintf(p, sizeof(p), "%s%s/%s", root, path, name);
    return read_small(p, buf, size);
}

static const char *const v1_cpuacct[] = { "cpuacct", "cpu,cpuacct", "cpuacct,cpu", NULL };
static const char *const v1_cpu[] = { "cpu", "cpu,cpuacct", "cpuacct,cpu", NULL };
static const char *const v1_memory[] = { "memory", NULL };
static const char *const v1_pids[] = { "pids", NULL };

static int read_v1(const char *root, const char *path, struct metrics_counters *c)
{
    char buf[4096];

    if (read_cgroup_file(root, v1_memory, path, "memory.usage_in_bytes", buf, sizeof(buf)) < 0)
        return -1;
    int64_t usage = strtoll(buf, NULL, 10);
    if (read_cgroup_file(root, v1_memory, path, "memory.stat", buf, sizeof(buf)) >= 0) {
        /* as free(1) inside and docker stats: the page cache that can go
         * back at once is not used */
        int64_t inactive = metrics_keyed_value(buf, "total_inactive_file");
        if (inactive > 0 && inactive < usage)
            usage -= inactive;
    }
    c->memory_bytes = usage;
    if (read_cgroup_file(root, v1_memory, path, "memory.limit_in_bytes", buf, sizeof(buf)) >= 0)
        c->memory_limit_bytes = metrics_parse_limit(buf);
    if (read_cgroup_file(root, v1_cpuacct, path, "cpuacct.usage", buf, sizeof(buf)) >= 0)
        c->cpu_usage_us = strtoll(buf, NULL, 10) / 1000;
    if (read_cgroup_file(root, v1_cpu, path, "cpu.cfs_quota_us", buf, sizeof(buf)) >= 0) {
        long long quota = strtoll(buf, NULL, 10);
        c->cpu_quota_us = quota > 0 ? quota : -1;
        if (read_cgroup_file(root, v1_cpu, path, "cpu.cfs_period_us", buf, sizeof(buf)) >= 0)
            c->cpu_period_us = strtoll(buf, NULL, 10);
    }
    if (read_cgroup_file(root, v1_pids, path, "pids.current", buf, sizeof(buf)) >= 0)
        c->pids = strtoll(buf, NULL, 10);
    if (read_cgroup_file(root, v1_pids, path, "cgroup.procs", buf, 64) >= 0 ||
        read_cgroup_file(root, v1_memory, path, "cgroup.procs", buf, 64) >= 0)
        c->pid = strtoll(buf, NULL, 10);
    return 0;
}

static int read_v2(const char *root, const char *path, struct metrics_counters *c)
{
    char buf[4096];

    if (read_cgroup_file(root, NULL, path, "memory.current", buf, sizeof(buf)) < 0)
        return -1;
    int64_t usage = strtoll(buf, NULL, 10);
    if (read_cgroup_file(root, NULL, path, "memory.stat", buf, sizeof(buf)) >= 0) {
        int64_t inactive = metrics_keyed_value(buf, "inactive_file");
        if (inactive > 0 && inactive < usage)
            usage -= inactive;
    }
    c->memory_bytes = usage;
    if (read_cgroup_file(root, NULL, path, "memory.max", buf, sizeof(buf)) >= 0)
        c->memory_limit_bytes = metrics_parse_limit(buf);
    if (read_cgroup_file(root, NULL, path, "cpu.stat", buf, sizeof(buf)) >= 0)
        c->cpu_usage_us = metrics_keyed_value(buf, "usage_usec");
    if (read_cgroup_file(root, NULL, path, "cpu.max", buf, sizeof(buf)) >= 0)
        metrics_parse_cpu_max(buf, &c->cpu_quota_us, &c->cpu_period_us);
    if (read_cgroup_file(root, NULL, path, "pids.current", buf, sizeof(buf)) >= 0)
        c->pids = strtoll(buf, NULL, 10);
    if (read_cgroup_file(root, NULL, path, "cgroup.procs", buf, 64) >= 0)
        c->pid = strtoll(buf, NULL, 10);
    return 0;
}

int metrics_read_cgroup(const char *root, const char *path, struct metrics_counters *c)
{
    char probe[512];

    c->cpu_usage_us = c->cpu_quota_us = c->cpu_period_us = -1;
    c->memory_bytes = c->memory_limit_bytes = c->pids = c->pid = -1;
    c->mono_us = sl_time_mono_us();
    /* v2 alone when the root is a v2 tree; v1 first on a hybrid host,
     * where the v2 mount holds no controller (as cgroup.c) */
    snprintf(probe, sizeof(probe), "%s/cgroup.controllers", root);
    if (access(probe, F_OK) == 0)
        return read_v2(root, path, c);
    return read_v1(root, path, c);
}

void metrics_values(const struct metrics_counters *prev, const struct metrics_counters *now,
                    double out[SL_SERIES_BASE])
{
    double dt = prev ? (double)(now->mono_us - prev->mono_us) / 1e6 : 0;
    bool rates = prev && dt > 0.05;

    for (size_t i = 0; i < SL_SERIES_BASE; i++)
        out[i] = NAN;
#define KNOWN(v) ((v) >= 0)
#define RATE(field)                                                                                \
    (rates && KNOWN(now->field) && KNOWN(prev->field) && now->field >= prev->field                 \
         ? (double)(now->field - prev->field) / dt                                                 \
         : NAN)
    out[0] = rates && KNOWN(now->cpu_usage_us) && KNOWN(prev->cpu_usage_us) &&
                     now->cpu_usage_us >= prev->cpu_usage_us
                 ? (double)(now->cpu_usage_us - prev->cpu_usage_us) / 1e6 / dt
                 : NAN;
    if (!isnan(out[0]) && now->cpu_quota_us > 0 && now->cpu_period_us > 0)
        out[1] = out[0] / ((double)now->cpu_quota_us / (double)now->cpu_period_us);
    if (KNOWN(now->memory_bytes))
        out[2] = (double)now->memory_bytes;
    if (KNOWN(now->memory_limit_bytes))
        out[3] = (double)now->memory_limit_bytes;
    if (KNOWN(now->pids))
        out[4] = (double)now->pids;
    if (KNOWN(now->system_used))
        out[5] = (double)now->system_used;
    if (KNOWN(now->system_size))
        out[6] = (double)now->system_size;
    if (KNOWN(now->data_used))
        out[7] = (double)now->data_used;
    if (KNOWN(now->data_size))
        out[8] = (double)now->data_size;
    out[9] = RATE(read_bytes);
    out[10] = RATE(write_bytes);
    out[11] = RATE(rx_bytes);
    out[12] = RATE(tx_bytes);
#undef RATE
#undef KNOWN
}
