/* The metrics collector: a thread that samples each running instance
 * (metrics-read.c), the samples waiting for the heartbeat, and the agent's
 * /metrics. */
#include "metrics.h"
#include "firewall.h"

#include "../lib/cleanup.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* What the last sample of an instance read: its counters (for rates), the
 * values and the renter (for /metrics). */
struct tracked {
    char id[SL_ID_MAX];
    char renter[SL_ID_MAX];
    struct metrics_counters last;
    double values[SL_SERIES_MAX];
    size_t n_values;
    bool seen; /* in this pass */
};

struct metrics_collector {
    struct metrics_config cfg;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t wake;
    bool stopping;
    struct tracked *inst;
    size_t n_inst, cap;
    json_t *pending; /* {id: {names, samples, absent}} */
    double cpu_seconds;
    struct MHD_Daemon *daemon;
};

/* Use of a mounted disk: statvfs of its mount point, and its loop device's
 * bytes read and written. Nothing when the directory is not a mount (its
 * device is its parent's): the host's file system is not the instance's. */
static void read_disk(const char *dir, int64_t *used, int64_t *size, int64_t *rd, int64_t *wr)
{
    struct stat st, parent;
    struct statvfs vfs;
    char path[600], buf[512];

    snprintf(path, sizeof(path), "%s/..", dir);
    if (stat(dir, &st) < 0 || stat(path, &parent) < 0 || st.st_dev == parent.st_dev ||
        statvfs(dir, &vfs) < 0)
        return;
    *size = (int64_t)(vfs.f_blocks * vfs.f_frsize);
    *used = (int64_t)((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize);
    snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat", major(st.st_dev), minor(st.st_dev));
    int64_t r, w;
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (metrics_parse_block_stat(buf, &r, &w) == 0) {
        *rd = (*rd < 0 ? 0 : *rd) + r;
        *wr = (*wr < 0 ? 0 : *wr) + w;
    }
}

static void read_net(int64_t pid, int64_t *rx, int64_t *tx)
{
    char path[64], buf[8192];

    if (pid <= 0)
        return;
    snprintf(path, sizeof(path), "/proc/%lld/net/dev", (long long)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    int64_t r, t;
    if (metrics_parse_net_dev(buf, &r, &t) == 0) {
        *rx = r;
        *tx = t;
    }
}

static struct tracked *tracked_get(struct metrics_collector *m, const char *id)
{
    for (size_t i = 0; i < m->n_inst; i++)
        if (strcmp(m->inst[i].id, id) == 0)
            return &m->inst[i];
    if (m->n_inst == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 16;
        m->inst = xrealloc(m->inst, m->cap * sizeof(*m->inst));
    }
    struct tracked *t = &m->inst[m->n_inst++];
    memset(t, 0, sizeof(*t));
    snprintf(t->id, sizeof(t->id), "%s", id);
    return t;
}

static json_t *value_json(double v)
{
    if (isnan(v) || isinf(v))
        return json_null();
    if (v > -9e15 && v < 9e15 && v == (double)(int64_t)v)
        return json_integer((json_int_t)v);
    /* four decimals: cores, watts, fractions need no more */
    return json_real((double)(int64_t)(v * 10000 + (v < 0 ? -0.5 : 0.5)) / 10000);
}

/* Appends one sample to the instance's pending entry; a change of names
 * (its GPUs changed) starts the entry again. Called with m->lock held. */
static void pending_add(struct metrics_collector *m, const char *id, json_t *names, json_t *row,
                        json_t *absent)
{
    json_t *e = json_object_get(m->pending, id);

    if (e && !json_equal(json_object_get(e, "names"), names)) {
        json_object_del(m->pending, id);
        e = NULL;
    }
    if (!e) {
        e = json_pack("{s:O, s:[], s:O}", "names", names, "samples", "absent", absent);
        json_object_set_new(m->pending, id, e);
    }
    json_object_set(e, "absent", absent);
    json_t *samples = json_object_get(e, "samples");
    json_array_append(samples, row);
    while (json_array_size(samples) > METRICS_PENDING_MAX)
        json_array_remove(samples, 0);
}

static void sample_one(struct metrics_collector *m, json_t *d, const struct gpu_usage *usage,
                       size_t n_usage, bool real, const char *gpu_failed, int64_t now)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    struct metrics_counters c;
    char cg[128], dir[512];
    double values[SL_SERIES_MAX];

    snprintf(cg, sizeof(cg), "/suanli/%s", id);
    if (metrics_read_cgroup(m->cfg.cgroup_root, cg, &c) < 0)
        return; /* no cgroup: not running (yet) */
    c.system_used = c.system_size = c.data_used = c.data_size = -1;
    c.read_bytes = c.write_bytes = c.rx_bytes = c.tx_bytes = -1;
    snprintf(dir, sizeof(dir), "%s/instances/%s/sys", m->cfg.data_dir, id);
    read_disk(dir, &c.system_used, &c.system_size, &c.read_bytes, &c.write_bytes);
    snprintf(dir, sizeof(dir), "%s/instances/%s/data", m->cfg.data_dir, id);
    read_disk(dir, &c.data_used, &c.data_size, &c.read_bytes, &c.write_bytes);
    read_net(c.pid, &c.rx_bytes, &c.tx_bytes);

    pthread_mutex_lock(&m->lock);
    struct tracked *t = tracked_get(m, id);
    bool first = t->last.mono_us == 0;
    metrics_values(first ? NULL : &t->last, &c, values);
    for (size_t i = SL_SERIES_BASE; i < SL_SERIES_MAX; i++)
        values[i] = NAN;
    t->last = c;
    t->seen = true;
    snprintf(t->renter, sizeof(t->renter), "%s",
             json_string_value(json_object_get(d, "user_id")) ?: "");
    pthread_mutex_unlock(&m->lock);

    cleanup_json json_t *names = json_array();
    cleanup_json json_t *row = json_array();
    cleanup_json json_t *absent = json_object();
    size_t n = SL_SERIES_BASE;
    char name[SL_SERIES_NAME_MAX];

    json_array_append_new(row, json_integer(now));
    for (int i = 0; i < SL_SERIES_BASE; i++) {
        json_array_append_new(names, json_string(sl_series_base[i].name));
        json_array_append_new(row, value_json(values[i]));
    }
    if (c.cpu_quota_us <= 0)
        json_object_set_new(absent, "cpu_share", json_string("no CPU limit"));
    if (c.memory_limit_bytes < 0)
        json_object_set_new(absent, "memory_limit_bytes", json_string("no memory limit"));
    if (c.data_size < 0) {
        json_object_set_new(absent, "data_disk_used_bytes", json_string("no data disk mounted"));
        json_object_set_new(absent, "data_disk_size_bytes", json_string("no data disk mounted"));
    }
    size_t k;
    json_t *g;
    json_array_foreach(json_object_get(d, "gpus"), k, g)
    {
        if (k >= SL_SERIES_GPU_MAX)
            break;
        const struct gpu_usage *u = NULL;
        for (size_t i = 0; real && i < n_usage; i++)
            if (usage[i].index == (unsigned)json_integer_value(g))
                u = &usage[i];
        for (int j = 0; j < SL_SERIES_PER_GPU; j++) {
            int pos = SL_SERIES_BASE + (int)k * SL_SERIES_PER_GPU + j;
            sl_series_name(pos, name);
            if (!u) {
                /* nothing invented: the series is absent, and says why */
                json_object_set_new(absent, name,
                                    json_string(!real && !gpu_failed ? METRICS_ABSENT_SIMULATED
                                                : gpu_failed         ? gpu_failed
                                                                     : "GPU not found by NVML"));
                continue;
            }
            double v = j == 0   ? (double)u->gpu_percent
                       : j == 1 ? (double)u->used_mib * 1024 * 1024
                       : j == 2 ? (u->temperature_c < 0 ? NAN : (double)u->temperature_c)
                                : (u->power_mw < 0 ? NAN : (double)u->power_mw / 1000);
            values[pos] = v;
            n = (size_t)pos + 1;
            json_array_append_new(names, json_string(name));
            json_array_append_new(row, value_json(v));
        }
    }
    pthread_mutex_lock(&m->lock);
    t = tracked_get(m, id);
    memcpy(t->values, values, n * sizeof(double));
    t->n_values = n;
    pending_add(m, id, names, row, absent);
    pthread_mutex_unlock(&m->lock);
}

static void sample_all(struct metrics_collector *m)
{
    cleanup_json json_t *instances = m->cfg.instances(m->cfg.ctx);
    cleanup_free struct gpu_usage *usage = NULL;
    size_t n_usage = 0, i;
    /* NVML's figures only: a simulated GPU has none to give */
    bool real = m->cfg.gpus->ops && strcmp(gpu_source_name(m->cfg.gpus), "nvml") == 0 &&
                m->cfg.gpus->ops->usage;
    const char *gpu_failed = NULL;
    char failed[sizeof(((struct sl_error *)0)->message) + 8];
    json_t *d;
    int64_t now = sl_time_now();

    if (real) {
        struct sl_error e = SL_ERROR_INIT;
        usage = xcalloc(GPU_MAX, sizeof(*usage));
        if (m->cfg.gpus->ops->usage(m->cfg.gpus->state, usage, &n_usage, &e) < 0) {
            snprintf(failed, sizeof(failed), "NVML: %s", e.message);
            gpu_failed = failed;
            real = false;
        }
    }
    pthread_mutex_lock(&m->lock);
    for (size_t t = 0; t < m->n_inst; t++)
        m->inst[t].seen = false;
    pthread_mutex_unlock(&m->lock);
    json_array_foreach(instances, i, d)
    {
        const char *desired = json_string_value(json_object_get(d, "desired"));
        if (json_string_value(json_object_get(d, "id")) && desired &&
            strcmp(desired, "running") == 0)
            sample_one(m, d, usage, n_usage, real, gpu_failed, now);
    }
    /* forget what no longer runs: its rates start again */
    pthread_mutex_lock(&m->lock);
    for (size_t t = 0; t < m->n_inst;) {
        if (!m->inst[t].seen)
            m->inst[t] = m->inst[--m->n_inst];
        else
            t++;
    }
    pthread_mutex_unlock(&m->lock);
}

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *collector(void *p)
{
    struct metrics_collector *m = p;

    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        pthread_mutex_unlock(&m->lock);
        double before = thread_cpu_seconds();
        sample_all(m);
        double used = thread_cpu_seconds() - before;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + (m->cfg.interval_ms % 1000) * 1000000;
        until.tv_sec += m->cfg.interval_ms / 1000 + ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        pthread_mutex_lock(&m->lock);
        m->cpu_seconds += used;
        while (!m->stopping && pthread_cond_timedwait(&m->wake, &m->lock, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

json_t *metrics_take(struct metrics_collector *m)
{
    const char *id;
    void *tmp;
    json_t *e, *batch = NULL;
    size_t total = 0;

    if (!m)
        return NULL;
    pthread_mutex_lock(&m->lock);
    json_object_foreach_safe(m->pending, tmp, id, e)
    {
        if (total >= METRICS_SEND_TOTAL)
            break;
        json_t *samples = json_object_get(e, "samples");
        json_t *out =
            json_pack("{s:s, s:O, s:O, s:[]}", "id", id, "names", json_object_get(e, "names"),
                      "absent", json_object_get(e, "absent"), "samples");
        json_t *taken = json_object_get(out, "samples");
        /* the oldest first, a bounded share: a backlog drains over a few
         * heartbeats, each under suanlid's http.max_body_bytes */
        while (json_array_size(samples) > 0 && json_array_size(taken) < METRICS_SEND_MAX &&
               total < METRICS_SEND_TOTAL) {
            json_array_append(taken, json_array_get(samples, 0));
            json_array_remove(samples, 0);
            total++;
        }
        if (json_array_size(samples) == 0)
            json_object_del(m->pending, id);
        if (!batch)
            batch = json_array();
        json_array_append_new(batch, out);
    }
    pthread_mutex_unlock(&m->lock);
    return batch;
}

void metrics_sent(struct metrics_collector *m, json_t *batch, bool ok)
{
    size_t i;
    json_t *e;

    if (!m || !batch)
        return;
    pthread_mutex_lock(&m->lock);
    /* not taken: before what came since, unless the names changed since */
    json_array_foreach(ok ? NULL : batch, i, e)
    {
        char id[SL_ID_MAX];
        snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(e, "id")) ?: "");
        json_t *now = json_object_get(m->pending, id);
        if (now && !json_equal(json_object_get(now, "names"), json_object_get(e, "names")))
            continue;
        if (now) {
            json_array_extend(json_object_get(e, "samples"), json_object_get(now, "samples"));
            json_object_set(e, "absent", json_object_get(now, "absent"));
        }
        json_t *samples = json_object_get(e, "samples");
        while (json_array_size(samples) > METRICS_PENDING_MAX)
            json_array_remove(samples, 0);
        json_object_del(e, "id");
        json_object_set(m->pending, id, e);
    }
    pthread_mutex_unlock(&m->lock);
    json_decref(batch);
}

double metrics_cpu_seconds(struct metrics_collector *m)
{
    pthread_mutex_lock(&m->lock);
    double s = m->cpu_seconds;
    pthread_mutex_unlock(&m->lock);
    return s;
}

char *metrics_render(struct metrics_collector *m, size_t *len)
{
    cleanup_buf struct sl_buf out = SL_BUF_INIT;

    pthread_mutex_lock(&m->lock);
    struct sl_series_latest *items = xcalloc(m->n_inst + 1, sizeof(*items));
    for (size_t i = 0; i < m->n_inst; i++)
        items[i] = (struct sl_series_latest){ .instance_id = m->inst[i].id,
                                              .renter = m->inst[i].renter,
                                              .values = m->inst[i].values,
                                              .n = m->inst[i].n_values };
    sl_series_render_prom(&out, items, m->n_inst);
    sl_buf_addf(&out,
                "# HELP suanli_node_instances_sampled Instances the agent samples.\n"
                "# TYPE suanli_node_instances_sampled gauge\nsuanli_node_instances_sampled %zu\n"
                "# HELP suanli_node_metrics_cpu_seconds_total CPU time the agent spent sampling.\n"
                "# TYPE suanli_node_metrics_cpu_seconds_total counter\n"
                "suanli_node_metrics_cpu_seconds_total %.6f\n",
                m->n_inst, m->cpu_seconds);
    pthread_mutex_unlock(&m->lock);
    free(items);
    return sl_buf_detach(&out, len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **con_cls)
{
    struct metrics_collector *m = cls;
    (void)version, (void)upload, (void)con_cls;

    if (*upload_len)
        return MHD_NO;
    bool found = strcmp(url, "/metrics") == 0;
    size_t len;
    char *body = !found                       ? xstrdup("not found: GET /metrics\n")
                 : strcmp(method, "GET") != 0 ? xstrdup("GET only\n")
                                              : metrics_render(m, &len);
    len = strlen(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn,
                                             !found                       ? MHD_HTTP_NOT_FOUND
                                             : strcmp(method, "GET") != 0 ? 405
                                                                          : MHD_HTTP_OK,
                                             r);
    MHD_destroy_response(r);
    return ret;
}

/* "HOST:PORT" (IPv4) or "PORT" (loopback). */
static int listen_fd(const struct metrics_config *cfg, struct sl_error *err)
{
    char host[64] = "127.0.0.1";
    const char *colon = strrchr(cfg->listen, ':');
    const char *port_text = colon ? colon + 1 : cfg->listen;
    char *end;
    long port = strtol(port_text, &end, 10);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    int one = 1;

    if (colon)
        snprintf(host, sizeof(host), "%.*s", (int)(colon - cfg->listen), cfg->listen);
    if (!*port_text || *end || port < 1 || port > 65535 ||
        inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'metrics.listen': '%s' is not IPV4:PORT or PORT (or off)",
                       cfg->listen);
    /* where instances reach the host: their neighbours' series are not theirs */
    if (strcmp(host, FIREWALL_METADATA_ADDRESS) == 0 ||
        (cfg->forbidden_host && strcmp(host, cfg->forbidden_host) == 0))
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'metrics.listen': instances reach %s: listen on the host's own "
                       "address (or 127.0.0.1) so that renters cannot read each other's metrics",
                       host);
    sa.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return sl_fail_errno(err, "unable to make a socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
        sl_fail_errno(err, "unable to listen on %s (metrics.listen)", cfg->listen);
        close(fd);
        return -1;
    }
    return fd;
}

struct metrics_collector *metrics_start(const struct metrics_config *cfg, struct sl_error *err)
{
    struct metrics_collector *m = xzalloc(sizeof(*m));
    int fd = -1;

    m->cfg = *cfg;
    if (cfg->listen && *cfg->listen && strcmp(cfg->listen, "off") != 0) {
        struct sl_error e = SL_ERROR_INIT;
        fd = listen_fd(cfg, &e);
        if (fd < 0 && strcmp(e.code, "invalid_option") == 0) {
            *err = e;
            free(m);
            return NULL;
        }
        if (fd < 0)
            log_warn("agent: no /metrics on this host: %s", e.message);
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&m->wake, &attr);
    pthread_condattr_destroy(&attr);
    m->pending = json_object();
    if (fd >= 0) {
        m->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
                                     NULL, on_request, m, MHD_OPTION_LISTEN_SOCKET, fd,
                                     MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                     MHD_OPTION_CONNECTION_LIMIT, 32u, MHD_OPTION_END);
        if (!m->daemon) {
            close(fd);
            log_warn("agent: no /metrics on this host: unable to serve on %s", cfg->listen);
        } else {
            log_info("agent: Prometheus metrics at http://%s/metrics", cfg->listen);
        }
    }
    if (pthread_create(&m->thread, NULL, collector, m) != 0) {
        metrics_stop(m);
        sl_fail(err, SL_E_INTERNAL, "thread", "unable to start the metrics collector");
        return NULL;
    }
    m->started = true;
    return m;
}

void metrics_stop(struct metrics_collector *m)
{
    if (!m)
        return;
    if (m->started) {
        pthread_mutex_lock(&m->lock);
        m->stopping = true;
        pthread_cond_broadcast(&m->wake);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->thread, NULL);
    }
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    json_decref(m->pending);
    free(m->inst);
    pthread_cond_destroy(&m->wake);
    pthread_mutex_destroy(&m->lock);
    free(m);
}
