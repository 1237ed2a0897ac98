/* Convergence of one instance: compare what suanlid wants (running at a
 * generation, stopped, released) with what the host has (runc's state, the
 * instance directory, the generation written next to the disks) and act.
 * Level-triggered: any pass may start from any state the host is in. */
#include "agent-internal.h"
#include "cgroup.h"
#include "fsutil.h"
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

static bool instance_running(struct agent *a, const char *id)
{
    struct runtime_state rs;
    return a->rt.ops->state(&a->rt, id, &rs, NULL) == 0 && rs.status == RUNTIME_RUNNING;
}

static void record_failure(struct agent *a, const char *id, int64_t generation, const char *msg)
{
    json_object_set_new(
        a->failures, id,
        json_pack("{s:I, s:s}", "generation", (json_int_t)generation, "message", msg));
    log_warn("agent: instance %s failed: %s", id, msg);
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
    /* the port whose app is Jupyter, with Jupyter's own token */
    json_t *jupyter = NULL;
    json_array_foreach(json_object_get(d, "ports"), i, g)
    {
        if (json_is_string(json_object_get(g, "app")) &&
            strcmp(json_string_value(json_object_get(g, "app")), "jupyter") == 0)
            jupyter = g;
    }
    struct instance_spec spec = {
        .jupyter_port = (unsigned)json_integer_value(json_object_get(jupyter, "port")),
        .jupyter_token = json_string_value(json_object_get(jupyter, "app_token")),
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
        .gpus = gpus,
        .n_gpus = n_gpus,
    };
    if (instance_create_disks(&a->host, &spec, err) < 0 ||
        instance_start(&a->host, &spec, ip, err) < 0)
        return -1;
    if (!ssh_ready(ip, a->cfg->ssh_wait_ms)) {
        instance_stop(&a->host, id, spec.host_port, 0, NULL);
        return sl_fail(err, SL_E_UNAVAILABLE, "ssh_not_ready",
                       "sshd did not answer within %lld ms; see the instance's console.log",
                       (long long)a->cfg->ssh_wait_ms);
    }
    cleanup_free char *path = generation_path(a, id);
    char text[32];
    int n = snprintf(text, sizeof(text), "%lld\n", (long long)generation);
    return sl_file_write(path, text, (size_t)n, 0600, 0, err);
}

/* Brings one instance to what is desired; true when it did something. */
bool agent_converge_instance(struct agent *a, json_t *d)
{
    struct sl_error err = SL_ERROR_INIT;
    const char *id = json_string_value(json_object_get(d, "id"));
    const char *desired = json_string_value(json_object_get(d, "desired"));
    int64_t generation = json_integer_value(json_object_get(d, "generation"));
    unsigned port = (unsigned)json_integer_value(json_object_get(d, "ssh_port"));
    json_t *failure = json_object_get(a->failures, id);

    if (!id || !desired)
        return false;
    if (strcmp(desired, "running") == 0) {
        bool running = instance_running(a, id);
        int64_t have = running ? local_generation(a, id) : 0;
        if (running && have >= generation) {
            if (a->first_pass)
                log_info("agent: adopted %s (running, generation %lld)", id, (long long)have);
            return false;
        }
        if (failure && json_integer_value(json_object_get(failure, "generation")) >= generation)
            return false; /* failed at this generation: wait for a new start */
        if (running) {
            log_info("agent: restarting %s (generation %lld)", id, (long long)generation);
            instance_stop(&a->host, id, port, (int)a->cfg->stop_grace_ms, NULL);
        }
        log_info("agent: starting %s", id);
        if (start_one(a, d, &err) < 0)
            record_failure(a, id, generation, err.message);
        else
            json_object_del(a->failures, id);
        return true;
    }
    if (strcmp(desired, "stopped") == 0) {
        struct runtime_state rs;
        json_object_del(a->failures, id);
        if (a->rt.ops->state(&a->rt, id, &rs, NULL) < 0)
            return false;
        if (rs.status == RUNTIME_RUNNING)
            log_info("agent: stopping %s", id);
        else if (rs.status != RUNTIME_ABSENT || instance_has_leftovers(&a->host, id))
            log_info("agent: cleaning up %s (container %s: it ended without a stop)", id,
                     runtime_status_name(rs.status));
        else
            return false;
        if (instance_stop(&a->host, id, port, (int)a->cfg->stop_grace_ms, &err) < 0)
            log_warn("agent: stop %s: %s", id, err.message);
        return true;
    }
    if (strcmp(desired, "released") == 0) {
        json_object_del(a->failures, id);
        if (!instance_exists(a, id))
            return false;
        log_info("agent: releasing %s", id);
        if (instance_release(&a->host, id, port, &err) < 0)
            log_warn("agent: release %s: %s", id, err.message);
        return true;
    }
    return false;
}

json_t *agent_instance_report(struct agent *a, json_t *d)
{
    const char *id = json_string_value(json_object_get(d, "id"));
    int64_t generation = json_integer_value(json_object_get(d, "generation"));
    json_t *failure = json_object_get(a->failures, id);

    if (failure && json_integer_value(json_object_get(failure, "generation")) >= generation)
        return json_pack("{s:s, s:s, s:I, s:O}", "id", id, "state", "failed", "generation",
                         (json_int_t)generation, "message", json_object_get(failure, "message"));
    if (instance_running(a, id)) {
        json_t *rep = json_pack("{s:s, s:s, s:I}", "id", id, "state", "running", "generation",
                                (json_int_t)local_generation(a, id));
        /* processes the OOM killer ended since the container started */
        cleanup_free char *cgroup = xasprintf("/suanli/%s", id);
        int64_t oom_kills = cgroup_oom_kills(cgroup);
        if (oom_kills >= 0)
            json_object_set_new(rep, "oom_kills", json_integer((json_int_t)oom_kills));
        return rep;
    }
    return json_pack("{s:s, s:s, s:I}", "id", id, "state",
                     instance_exists(a, id) ? "stopped" : "absent", "generation",
                     (json_int_t)local_generation(a, id));
}
