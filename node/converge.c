/* Convergence of one instance: compare what suanlid wants (running at a
 * generation, stopped, released) with what the host has (runc's state, the
 * instance directory, the generation written next to the disks) and act.
 * Level-triggered: any pass may start from any state the host is in. */
#include "agent-internal.h"
#include "boot.h"
#include "cgroup.h"
#include "fsutil.h"
#include "steps.h"
#include "storage.h"
#include "transfer.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Waits until sshd inside answers with its banner. */
static bool ssh_ready(const char *ip, int64_t wait_ms)
{
    int64_t deadline = sl_time_mono_ms() + wait_ms;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(22) };

    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return false;
    while (sl_time_mono_ms() < deadline) {
        cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            char buf[8];
            if (poll(&p, 1, 2 * SL_MSEC_PER_SEC) == 1 && read(fd, buf, sizeof(buf)) >= 4 &&
                memcmp(buf, "SSH-", 4) == 0)
                return true;
        }
        usleep(10 * SL_USEC_PER_MSEC);
    }
    return false;
}

static char *generation_path(struct agent *a, const char *id)
{
    return xasprintf("%s/instances/%s/generation", a->cfg->data_dir, id);
}

static int64_t local_generation(struct agent *a, const char *id)
{
    cleanup_free char *path = generation_path(a, id);
    cleanup_free char *text = fs_read_file(path, 64, NULL, NULL);
    return text ? strtoll(text, NULL, 10) : 0;
}

static bool instance_exists(struct agent *a, const char *id)
{
    cleanup_free char *dir = instance_dir(&a->host, id);
    return access(dir, F_OK) == 0;
}

static bool instance_running(struct agent *a, const char *id, pid_t *pid)
{
    struct runtime_state rs;
    bool running = a->rt.ops->state(&a->rt, id, &rs, NULL) == 0 && rs.status == RUNTIME_RUNNING;
    if (pid)
        *pid = running ? rs.pid : 0;
    return running;
}

static void record_failure(struct agent *a, const char *id, int64_t generation, const char *msg)
{
    pthread_mutex_lock(&a->lock);
    json_object_set_new(
        a->failures, id,
        json_pack("{s:I, s:s}", "generation", (json_int_t)generation, "message", msg));
    pthread_mutex_unlock(&a->lock);
    log_warn("agent: instance %s failed: %s", id, msg);
}

/* The generation a start failed at, or -1. */
static int64_t failed_generation(struct agent *a, const char *id)
{
    pthread_mutex_lock(&a->lock);
    json_t *failure = json_object_get(a->failures, id);
    int64_t g = failure ? json_integer_value(json_object_get(failure, "generation")) : -1;
    pthread_mutex_unlock(&a->lock);
    return g;
}

static void forget_failure(struct agent *a, const char *id)
{
    pthread_mutex_lock(&a->lock);
    json_object_del(a->failures, id);
    pthread_mutex_unlock(&a->lock);
}

#define RETRY_FIRST_MS 1000
#define RETRY_MAX_MS   60000

/* A stop or release that failed: tried again after a delay that doubles
 * up to RETRY_MAX_MS, its message logged when it is new (not at every
 * try), and reported with the instance (agent_instance_report). */
static void step_failed(struct agent *a, const char *id, const char *step, const char *msg)
{
    cleanup_free char *text = xasprintf("%s failed: %s", step, msg);
    pthread_mutex_lock(&a->lock);
    json_t *r = json_object_get(a->retries, id);
    const char *before = json_string_value(json_object_get(r, "message"));
    bool same = before && strcmp(before, text) == 0;
    int64_t delay = 2 * json_integer_value(json_object_get(r, "delay_ms"));
    if (delay < RETRY_FIRST_MS)
        delay = RETRY_FIRST_MS;
    if (delay > RETRY_MAX_MS)
        delay = RETRY_MAX_MS;
    json_object_set_new(a->retries, id,
                        json_pack("{s:s, s:I, s:I}", "message", text, "delay_ms", (json_int_t)delay,
                                  "next_ms", (json_int_t)(sl_time_mono_ms() + delay)));
    pthread_mutex_unlock(&a->lock);
    if (!same)
        log_warn("agent: %s %s: %s (tried again with a growing delay, up to %ds)", step, id, msg,
                 RETRY_MAX_MS / 1000);
}

/* Whether a step of the instance is failing and backing off. */
static bool retrying(struct agent *a, const char *id)
{
    pthread_mutex_lock(&a->lock);
    bool failing = json_object_get(json_object_get(a->retries, id), "message") != NULL;
    pthread_mutex_unlock(&a->lock);
    return failing;
}

/* The step worked: the next report clears the state message it left. */
static void step_done(struct agent *a, const char *id, const char *step)
{
    pthread_mutex_lock(&a->lock);
    bool was = json_object_get(json_object_get(a->retries, id), "message") != NULL;
    if (was)
        json_object_set_new(a->retries, id, json_pack("{s:b}", "cleared", 1));
    pthread_mutex_unlock(&a->lock);
    if (was)
        log_info("agent: %s %s: done after earlier failures", step, id);
}

/* A running instance's SSH keys, as its owner has them now. */
static bool sync_keys(struct agent *a, const char *id, json_t *d)
{
    struct sl_error err = SL_ERROR_INIT;
    cleanup_free char *boot = xasprintf("%s/instances/%s/boot", a->cfg->data_dir, id);
    int rc = boot_update_keys(boot, json_string_value(json_object_get(d, "authorized_keys")), &err);
    if (rc < 0)
        log_warn("agent: SSH keys of %s: %s", id, err.message);
    else if (rc > 0)
        log_info("agent: SSH keys of %s updated", id);
    return rc > 0;
}

#define GROW_RETRY_MS 60000

/* Online grows that failed, by instance id: {next_ms, message} (tried
 * again at next_ms, the message in the instance's report), or {cleared}
 * once one worked (the next report says "" once). */
static pthread_mutex_t grow_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *grows;

/* A running instance's data disk, grown online when suanlid raised its size
 * (instance_grow_data_disk): the renter sees it in df without a restart. A
 * grow that fails is logged, said in the instance's state message (it
 * grows at the next start, before the disk is mounted) and tried again
 * after GROW_RETRY_MS, not at every pass. True when it grew. */
static bool grow_data_disk(struct agent *a, const char *id, json_t *d)
{
    unsigned gib = (unsigned)json_integer_value(json_object_get(d, "data_disk_gib"));
    int64_t now = sl_time_mono_ms();

    pthread_mutex_lock(&grow_lock);
    int64_t next = json_integer_value(json_object_get(json_object_get(grows, id), "next_ms"));
    pthread_mutex_unlock(&grow_lock);
    if (next > now)
        return false;
    struct sl_error err = SL_ERROR_INIT;
    int rc = instance_grow_data_disk(&a->host, id, gib, &err);
    /* the report's message has at most 500 bytes (suanlid checks) */
    char msg[400] = "";
    if (rc < 0)
        snprintf(msg, sizeof(msg),
                 "the data disk could not grow to %u GiB while running (%.200s): it grows at the "
                 "next start (suanli restart %.64s)",
                 gib,
                 strcmp(err.code, "online_resize_unavailable") == 0
                     ? "this host cannot grow a mounted disk"
                     : err.message,
                 id);
    pthread_mutex_lock(&grow_lock);
    if (!grows)
        grows = json_object();
    json_t *was = json_object_get(grows, id);
    bool same =
        rc < 0 && was && strcmp(json_string_value(json_object_get(was, "message")) ?: "", msg) == 0;
    if (rc < 0)
        json_object_set_new(
            grows, id,
            json_pack("{s:I, s:s}", "next_ms", (json_int_t)(now + GROW_RETRY_MS), "message", msg));
    else if (was && json_object_get(was, "message"))
        json_object_set_new(grows, id, json_pack("{s:b}", "cleared", 1));
    pthread_mutex_unlock(&grow_lock);
    if (rc < 0 && !same)
        log_warn("agent: %s: %s (tried again every %ds)", id, err.message, GROW_RETRY_MS / 1000);
    else if (rc > 0)
        log_info("agent: data disk of %s grown to %u GiB online", id, gib);
    return rc > 0;
}

/* What grow_data_disk has to say in the instance's report: its message,
 * "" once after it worked, or NULL. */
static json_t *grow_report(const char *id)
{
    json_t *out = NULL;
    pthread_mutex_lock(&grow_lock);
    json_t *g = json_object_get(grows, id);
    if (g && json_object_get(g, "cleared")) {
        out = json_string("");
        json_object_del(grows, id);
    } else if (g) {
        out = json_incref(json_object_get(g, "message"));
    }
    pthread_mutex_unlock(&grow_lock);
    return out;
}

/* Where the start went (steps.h): DATA/instances/<id>/timing.json, and
 * a line in the log (one per start, as "starting"). */
static void start_timing(struct agent *a, const char *id, int64_t generation)
{
    struct steps *s = steps_current();
    if (!s)
        return;
    char text[1024];
    steps_format(s, text, sizeof(text));
    log_info("agent: started %s in %.1f ms: %s", id, (double)(s->last_us - s->start_us) / 1000.0,
             text);
    cleanup_free char *path = xasprintf("%s/instances/%s/timing.json", a->cfg->data_dir, id);
    cleanup_free char *extra = xasprintf("\"generation\": %lld", (long long)generation);
    struct sl_error e = SL_ERROR_INIT;
    if (steps_write(s, path, extra, &e) < 0)
        log_debug("agent: %s", e.message);
}

static int start_one(struct agent *a, json_t *d, struct sl_error *err)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    int64_t generation = json_integer_value(json_object_get(d, "generation"));
    unsigned gpus[GPU_MAX];
    size_t n_gpus = 0, i;
    json_t *g;
    char ip[64] = "";

    json_array_foreach(json_object_get(d, "gpus"), i, g)
    {
        if (n_gpus < GPU_MAX)
            gpus[n_gpus++] = (unsigned)json_integer_value(g);
    }
    /* the ports whose app is Jupyter or the desktop, with the app's own token */
    json_t *jupyter = NULL, *desktop = NULL;
    json_array_foreach(json_object_get(d, "ports"), i, g)
    {
        const char *app = json_string_value(json_object_get(g, "app"));
        if (app && strcmp(app, "jupyter") == 0)
            jupyter = g;
        else if (app && strcmp(app, "desktop") == 0)
            desktop = g;
    }
    struct instance_spec spec = {
        .jupyter_port = (unsigned)json_integer_value(json_object_get(jupyter, "port")),
        .jupyter_token = json_string_value(json_object_get(jupyter, "app_token")),
        .desktop_port = (unsigned)json_integer_value(json_object_get(desktop, "port")),
        .desktop_token = json_string_value(json_object_get(desktop, "app_token")),
        .id = id,
        .image = json_string_value(json_object_get(d, "image")),
        .system_disk_gib = (unsigned)json_integer_value(json_object_get(d, "system_disk_gib")),
        .data_disk_gib = (unsigned)json_integer_value(json_object_get(d, "data_disk_gib")),
        .host_port = (unsigned)json_integer_value(json_object_get(d, "ssh_port")),
        .root_password_crypt = json_string_value(json_object_get(d, "root_password_crypt")),
        .authorized_keys = json_string_value(json_object_get(d, "authorized_keys")),
        .cpu_millicores = (unsigned)json_integer_value(json_object_get(d, "cpu_millicores")),
        .memory_mib = (uint64_t)json_integer_value(json_object_get(d, "memory_mib")),
        .pids_max = 4096,
        .autodl_paths = json_is_true(json_object_get(d, "autodl_paths")),
        .gpus = gpus,
        .n_gpus = n_gpus,
    };
    /* the renter's file storage of the region, ready before the container
     * binds it (storage.h); a start without it would let the renter write
     * to what looks shared and is not */
    cleanup_free char *storage_dir = NULL;
    json_t *number = json_object_get(d, "storage");
    if (json_is_integer(number)) {
        pthread_mutex_lock(&a->lock);
        cleanup_json json_t *backend = json_deep_copy(json_object_get(a->desired, "storage"));
        pthread_mutex_unlock(&a->lock);
        storage_dir = storage_prepare(a->cfg->data_dir, backend, json_integer_value(number), err);
        if (!storage_dir)
            return -1;
        spec.storage_dir = storage_dir;
        steps_mark("file storage");
    }
    if (instance_create_disks(&a->host, &spec, err) < 0 ||
        instance_start(&a->host, &spec, ip, err) < 0)
        return -1;
    bool ready = ssh_ready(ip, a->cfg->ssh_wait_ms);
    steps_mark("sshd");
    if (!ready) {
        instance_stop(&a->host, id, spec.host_port, 0, NULL);
        return sl_fail(err, SL_E_UNAVAILABLE, "ssh_not_ready",
                       "sshd did not answer within %lld ms; see the instance's console.log",
                       (long long)a->cfg->ssh_wait_ms);
    }
    cleanup_free char *path = generation_path(a, id);
    char text[32];
    int n = snprintf(text, sizeof(text), "%lld\n", (long long)generation);
    if (sl_file_write(path, text, (size_t)n, 0600, 0, err) < 0)
        return -1;
    steps_mark("generation");
    start_timing(a, id, generation);
    return 0;
}

/* From here on the instance's state moves: the heartbeat leaves it out
 * until the worker is done. */
static void acting(struct agent *a, const char *id)
{
    pthread_mutex_lock(&a->lock);
    if (json_object_get(a->inflight, id))
        json_object_set_new(a->inflight, id, json_true());
    pthread_mutex_unlock(&a->lock);
}

/* Brings one instance to what is desired; true when it did something. */
bool agent_converge_instance(struct agent *a, json_t *d, bool first_pass)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *id = json_string_value(json_object_get(d, "id"));
    const char *desired = json_string_value(json_object_get(d, "desired"));
    int64_t generation = json_integer_value(json_object_get(d, "generation"));
    unsigned port = (unsigned)json_integer_value(json_object_get(d, "ssh_port"));

    if (!id || !desired)
        return false;
    if (strcmp(desired, "running") == 0) {
        pid_t pid;
        bool running = instance_running(a, id, &pid);
        steps_mark("check");
        int64_t have = running ? local_generation(a, id) : 0;
        if (running && have >= generation) {
            /* its namespace pinned where this agent keeps pins: moved from
             * where an older agent kept them, or found from its process
             * when another tool's mount hid the pin */
            int adopted = net_adopt(&a->net, id, pid, &err);
            if (adopted < 0)
                log_warn("agent: %s: %s", id, err.message);
            else if (adopted)
                log_info("agent: %s: network namespace pinned again (%s)", id,
                         adopted == NET_ADOPTED_LEGACY ? "from /run/netns" : "from its process");
            if (first_pass)
                log_info("agent: adopted %s (running, generation %lld)", id, (long long)have);
            bool grown = grow_data_disk(a, id, d);
            return sync_keys(a, id, d) || grown;
        }
        if (failed_generation(a, id) >= generation)
            return false; /* failed at this generation: wait for a new start */
        /* a clone: its disks are copied from its source first (transfer.h) */
        if (json_object_get(d, "copy_from") &&
            !transfer_ready(a->cfg->data_dir, d, a->cfg->transfer_retry_s))
            return false;
        acting(a, id);
        if (running) {
            log_info("agent: restarting %s (generation %lld)", id, (long long)generation);
            instance_stop(&a->host, id, port, (int)a->cfg->stop_grace_ms, NULL);
            steps_mark("stop before");
        }
        log_info("agent: starting %s", id);
        if (start_one(a, d, &err) < 0) {
            record_failure(a, id, generation, err.message);
        } else {
            forget_failure(a, id);
            /* the start grew the data disk unmounted (instance_start) */
            pthread_mutex_lock(&grow_lock);
            json_object_del(grows, id);
            pthread_mutex_unlock(&grow_lock);
        }
        return true;
    }
    if (strcmp(desired, "stopped") == 0) {
        struct runtime_state rs;
        /* a moved instance: its disks are copied here, and it stays
         * stopped (transfer.h) */
        if (json_object_get(d, "copy_from") &&
            !transfer_ready(a->cfg->data_dir, d, a->cfg->transfer_retry_s))
            return false;
        forget_failure(a, id);
        if (a->rt.ops->state(&a->rt, id, &rs, NULL) < 0)
            return false;
        bool failing = retrying(a, id);
        if (rs.status == RUNTIME_RUNNING)
            log_info("agent: stopping %s", id);
        else if (rs.status != RUNTIME_ABSENT || instance_has_leftovers(&a->host, id)) {
            if (!failing)
                log_info("agent: cleaning up %s (container %s: it ended without a stop)", id,
                         runtime_status_name(rs.status));
        } else {
            step_done(a, id, "stop");
            return false;
        }
        acting(a, id);
        if (instance_stop(&a->host, id, port, (int)a->cfg->stop_grace_ms, &err) < 0)
            step_failed(a, id, "stop", err.message);
        else
            step_done(a, id, "stop");
        return true;
    }
    if (strcmp(desired, "released") == 0) {
        forget_failure(a, id);
        pthread_mutex_lock(&grow_lock);
        json_object_del(grows, id);
        pthread_mutex_unlock(&grow_lock);
        if (!instance_exists(a, id)) {
            step_done(a, id, "release");
            return false;
        }
        bool failing = retrying(a, id);
        acting(a, id);
        if (!failing)
            log_info("agent: releasing %s", id);
        if (instance_release(&a->host, id, port, &err) < 0)
            step_failed(a, id, "release", err.message);
        else
            step_done(a, id, "release");
        return true;
    }
    return false;
}

struct converge_job {
    struct agent *a;
    json_t *d;
    bool first_pass;
    int64_t revision;        /* of the desired state d came from */
    int64_t desired_wall_us; /* when the agent read it (steps.h) */
};

static void *converge_worker(void *p)
{
    struct converge_job *job = p;
    struct agent *a = job->a;
    const char *id = json_string_value(json_object_get(job->d, "id"));
    struct steps trace;
    steps_begin(&trace, job->desired_wall_us);
    bool acted = agent_converge_instance(a, job->d, job->first_pass);
    steps_end();
    const char *desired = json_string_value(json_object_get(job->d, "desired"));
    if (acted && desired && strcmp(desired, "running") != 0 && !retrying(a, id)) {
        char text[1024];
        steps_format(&trace, text, sizeof(text));
        log_info("agent: %s %s in %.1f ms: %s", desired, id,
                 (double)(trace.last_us - trace.start_us) / 1000.0, text);
    }

    pthread_mutex_lock(&a->lock);
    json_object_del(a->inflight, id);
    if (acted)
        a->acted = a->kicked = true;
    /* a pass that came while it ran left its instance alone */
    if (a->revision != job->revision)
        a->kicked = true;
    pthread_cond_broadcast(&a->wake);
    pthread_mutex_unlock(&a->lock);
    json_decref(job->d);
    free(job);
    return NULL;
}

/* At most this many workers at once; the rest wait for the next pass. */
#define CONVERGE_WORKERS_MAX 256

void agent_converge_start(struct agent *a, json_t *instances, int64_t revision)
{
    size_t i;
    json_t *d;
    int64_t now = sl_time_mono_ms();
    pthread_mutex_lock(&a->lock);
    int64_t desired_wall_us = a->revision == revision ? a->desired_us : 0;
    pthread_mutex_unlock(&a->lock);

    json_array_foreach(instances, i, d)
    {
        const char *id = json_string_value(json_object_get(d, "id"));
        if (!id)
            continue;
        pthread_mutex_lock(&a->lock);
        json_t *r = json_object_get(a->retries, id);
        bool skip = json_object_get(a->inflight, id) ||
                    json_object_size(a->inflight) >= CONVERGE_WORKERS_MAX ||
                    (r && json_integer_value(json_object_get(r, "next_ms")) > now);
        if (!skip)
            json_object_set_new(a->inflight, id, json_false()); /* checking; acting() */
        pthread_mutex_unlock(&a->lock);
        if (skip)
            continue;
        struct converge_job *job = xzalloc(sizeof(*job));
        *job = (struct converge_job){
            .a = a,
            .d = json_deep_copy(d),
            .first_pass = a->first_pass,
            .revision = revision,
            .desired_wall_us = desired_wall_us,
        };
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, converge_worker, job) != 0) {
            log_warn("agent: unable to start a worker for %s; trying again at the next pass", id);
            pthread_mutex_lock(&a->lock);
            json_object_del(a->inflight, id);
            pthread_mutex_unlock(&a->lock);
            json_decref(job->d);
            free(job);
        }
        pthread_attr_destroy(&attr);
    }
}

void agent_converge_drain(struct agent *a)
{
    pthread_mutex_lock(&a->lock);
    while (json_object_size(a->inflight) > 0)
        pthread_cond_wait(&a->wake, &a->lock);
    pthread_mutex_unlock(&a->lock);
}

json_t *agent_instance_report(struct agent *a, json_t *d)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    int64_t generation = json_integer_value(json_object_get(d, "generation"));
    cleanup_json json_t *failure = NULL, *retry = NULL;

    pthread_mutex_lock(&a->lock);
    bool busy = json_is_true(json_object_get(a->inflight, id));
    failure = json_incref(json_object_get(a->failures, id));
    retry = json_incref(json_object_get(a->retries, id));
    if (retry && !busy && json_object_get(retry, "cleared"))
        json_object_del(a->retries, id); /* said once */
    pthread_mutex_unlock(&a->lock);
    if (busy)
        return NULL;
    if (failure && json_integer_value(json_object_get(failure, "generation")) >= generation)
        return json_pack("{s:s, s:s, s:I, s:O}", "id", id, "state", "failed", "generation",
                         (json_int_t)generation, "message", json_object_get(failure, "message"));
    json_t *rep;
    if (instance_running(a, id, NULL)) {
        rep = json_pack("{s:s, s:s, s:I}", "id", id, "state", "running", "generation",
                        (json_int_t)local_generation(a, id));
        /* processes the OOM killer ended since the container started */
        cleanup_free char *cgroup = xasprintf("/suanli/%s", id);
        int64_t oom_kills = cgroup_oom_kills(cgroup);
        if (oom_kills >= 0)
            json_object_set_new(rep, "oom_kills", json_integer((json_int_t)oom_kills));
    } else {
        rep = json_pack("{s:s, s:s, s:I}", "id", id, "state",
                        instance_exists(a, id) ? "stopped" : "absent", "generation",
                        (json_int_t)local_generation(a, id));
    }
    /* a stop or release that keeps failing says why (the state message),
     * and once it worked, the message goes; else a data disk that could not
     * grow online says so (grow_data_disk) */
    json_t *grow = retry ? NULL : grow_report(id);
    if (grow)
        json_object_set_new(rep, "message", grow);
    if (retry && json_object_get(retry, "cleared")) {
        json_object_set_new(rep, "message", json_string(""));
    } else if (retry) {
        char text[500];
        snprintf(text, sizeof(text), "%s; trying again every %llds",
                 json_string_value(json_object_get(retry, "message")),
                 (long long)(json_integer_value(json_object_get(retry, "delay_ms")) / 1000));
        json_object_set_new(rep, "message", json_string(text));
    }
    return rep;
}
