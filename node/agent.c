#include "agent.h"
#include "inventory.h"

#include "../cli/client.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/config.h"
#include "../lib/crypto.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "cgroup.h"
#include "fsutil.h"
#include "image-import.h"
#include "image.h"
#include "proxy.h"
#include "activity.h"
#include "metadata.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define AGENT_VERSION "0.1.0"

#define STRINGIFY_(x) #x
#define STRINGIFY(x)  STRINGIFY_(x)

#define OPT(n, t, d, lo, hi, field, h)                                                             \
    {                                                                                              \
        .name = n, .type = t, .def = d, .min = lo, .max = hi,                                      \
        .offset = offsetof(struct agent_config, field), .help = h                                  \
    }

const struct sl_option agent_options[] = {
    OPT("data_dir", SL_OPT_STRING, "/var/lib/suanli-node", 0, 0, data_dir,
        "images, disks and instance state"),
    OPT("server", SL_OPT_STRING, "http://127.0.0.1:7070", 0, 0, server, "suanlid's URL"),
    OPT("join", SL_OPT_STRING, NULL, 0, 0, join,
        "file holding the join token for the first start ('-': read it from stdin); never the "
        "token itself"),
    OPT("simulate_gpus", SL_OPT_STRING, NULL, 0, 0, simulate_gpus,
        "COUNT:MODEL simulated GPUs for a host without NVIDIA GPUs"),
    OPT("address", SL_OPT_STRING, NULL, 0, 0, address,
        "address renters reach this host at (default: its first non-loopback IPv4)"),
    OPT("hostname", SL_OPT_STRING, NULL, 0, 0, hostname, "name shown to admins"),
    OPT("network.bridge", SL_OPT_STRING, "suanli0", 0, 0, bridge, "the instances' bridge"),
    OPT("network.subnet", SL_OPT_STRING, "10.88.0.0/16", 0, 0, subnet,
        "the bridge's private subnet"),
    OPT("runtime", SL_OPT_STRING, "runc", 0, 0, runtime, "OCI runtime binary"),
    OPT("poll_ms", SL_OPT_INT, "200", 20, 60000, poll_ms, "how often the desired state is read"),
    OPT("stop_grace_ms", SL_OPT_INT, "10000", 0, 600000, stop_grace_ms,
        "time between SIGTERM and SIGKILL on stop"),
    OPT("ssh_wait_ms", SL_OPT_INT, "10000", 100, 600000, ssh_wait_ms,
        "how long a start waits for sshd's banner before it fails"),
    OPT("proxy.listen", SL_OPT_STRING, "0.0.0.0:8080", 0, 0, proxy_listen,
        "where the service ports' nginx listens (PORT, IPV4:PORT or [IPV6]:PORT)"),
    OPT("proxy.nginx", SL_OPT_STRING, "nginx", 0, 0, proxy_nginx,
        "the nginx binary; \"off\": no service ports on this node"),
    OPT("metadata.port", SL_OPT_INT, "8775", 0, 65535, metadata_port,
        "port on the bridge's gateway that 169.254.169.254:80 inside instances maps to; 0: off"),
    OPT("images.max_bytes", SL_OPT_INT, STRINGIFY(IMAGE_MAX_BYTES_DEFAULT), 1 << 20, 1LL << 50,
        image_max_bytes,
        "an image import unpacks at most this many bytes (uncompressed tar, all layers)"),
    OPT("images.max_entries", SL_OPT_INT, STRINGIFY(IMAGE_MAX_ENTRIES_DEFAULT), 16, 1LL << 32,
        image_max_entries, "an image import unpacks at most this many files (all layers)"),
    OPT("images.max_file_bytes", SL_OPT_INT, STRINGIFY(IMAGE_MAX_FILE_BYTES_DEFAULT), 1 << 10,
        1LL << 50, image_max_file_bytes,
        "the largest file an image may hold (a sparse file's holes count)"),
    OPT("images.max_path_depth", SL_OPT_INT, STRINGIFY(IMAGE_MAX_PATH_DEPTH_DEFAULT), 8, 2048,
        image_max_path_depth, "the deepest path an image may hold, in directories"),
    OPT("images.min_free_bytes", SL_OPT_INT, STRINGIFY(IMAGE_MIN_FREE_BYTES_DEFAULT), 0, 1LL << 50,
        image_min_free_bytes,
        "an image import stops before the data directory's file system has less free; 0: off"),
};

void agent_image_limits(const struct agent_config *cfg, struct image_limits *out)
{
    *out = (struct image_limits){
        .max_bytes = (uint64_t)cfg->image_max_bytes,
        .max_entries = (uint64_t)cfg->image_max_entries,
        .max_file_bytes = (uint64_t)cfg->image_max_file_bytes,
        .max_path_depth = (uint64_t)cfg->image_max_path_depth,
        .min_free_bytes = (uint64_t)cfg->image_min_free_bytes,
    };
}

const size_t agent_options_count = sizeof(agent_options) / sizeof(agent_options[0]);

struct agent {
    struct agent_config *cfg;
    char node_id[SL_ID_MAX];
    char token[SL_TOKEN_MAX];
    struct client client;
    struct gpu_source gpus;
    struct runtime rt;
    struct net_config net;
    struct node_host host;
    char *runc_root, *net_state;
    int64_t heartbeat_s;
    int64_t revision;
    json_t *failures; /* {id: {"generation": g, "message": m}} */
    bool first_pass;  /* the first convergence since the agent started */
    pthread_mutex_t lock;
    json_t *builds; /* {name: "building" | "failed: ..."}, guarded by lock */
    struct proxy proxy;
    char *proxy_dir;
    bool proxy_warned;
    bool pin_warned;                  /* net_pin failed; said once until it works again */
    struct metadata_server *metadata; /* http://169.254.169.254/ inside */
};

/* node.json: who this host is to the control plane. */
static int load_identity(struct agent *a, struct sl_error *err)
{
    cleanup_free char *path = xasprintf("%s/node.json", a->cfg->data_dir);
    cleanup_json json_t *j = NULL;
    json_error_t jerr;

    if (access(path, F_OK) != 0)
        return 0;
    j = json_load_file(path, 0, &jerr);
    const char *id = json_string_value(json_object_get(j, "node_id"));
    const char *token = json_string_value(json_object_get(j, "node_token"));
    if (!id || !token || strlen(id) >= sizeof(a->node_id) || strlen(token) >= sizeof(a->token))
        return sl_fail(err, SL_E_INVALID, "bad_identity",
                       "'%s' is damaged: remove it and enroll again with --join", path);
    snprintf(a->node_id, sizeof(a->node_id), "%s", id);
    snprintf(a->token, sizeof(a->token), "%s", token);
    return 1;
}

#define JOIN_TOKEN_MAX 128

static bool looks_like_token(const char *s)
{
    return strncmp(s, "sl_", 3) == 0 && !strchr(s, '/');
}

int agent_join_source_check(const char *value, struct sl_error *err)
{
    if (strcmp(value, "-") == 0 || access(value, F_OK) == 0 || !looks_like_token(value))
        return 0;
    return sl_fail(err, SL_E_INVALID, "join_token_on_command_line",
                   "--join takes a FILE holding the join token, or - to read it from stdin, not "
                   "the token itself (on the command line it shows in the process list): "
                   "(umask 077; cat > /root/suanli-join-token), paste the token, then "
                   "--join /root/suanli-join-token");
}

/* The join token from source: "-" (stdin) or a file, one line. */
static int read_join_token(const char *source, char *token, struct sl_error *err)
{
    bool stdin_ = strcmp(source, "-") == 0;
    const char *name = stdin_ ? "stdin" : source;
    char buf[JOIN_TOKEN_MAX + 64];
    size_t n = 0;
    ssize_t got;
    cleanup_close int fd = stdin_ ? -1 : open(source, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    int in = stdin_ ? STDIN_FILENO : fd;
    struct stat st;

    if (in < 0 || fstat(in, &st) < 0)
        return sl_fail_errno(err,
                             "--join: unable to read '%s' (it takes a file holding the "
                             "join token, or - to read it from stdin)",
                             name);
    if (!stdin_ && !S_ISREG(st.st_mode))
        return sl_fail(err, SL_E_INVALID, "bad_join_token",
                       "--join: '%s' is not a file: give a file holding the join token, or - to "
                       "read it from stdin",
                       name);
    if (!stdin_ && (st.st_mode & 077))
        log_warn("agent: '%s' is readable by others (mode %03o): a join token is a secret, "
                 "chmod 600 it or remove it once the host has joined",
                 name, (unsigned)(st.st_mode & 0777));
    while (n < sizeof(buf) - 1 && (got = read(in, buf + n, sizeof(buf) - 1 - n)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return sl_fail_errno(err, "--join: unable to read '%s'", name);
        }
        n += (size_t)got;
        buf[n] = '\0';
        /* one line is enough: a pasted token and Enter, no Ctrl-D needed */
        char *nl = strchr(buf, '\n');
        if (nl && strspn(buf, " \t\r\n") < (size_t)(nl - buf))
            break;
    }
    buf[n] = '\0';
    char *s = buf + strspn(buf, " \t\r\n");
    size_t len = strcspn(s, "\r\n");
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    s[len] = '\0';
    if (!len || len > JOIN_TOKEN_MAX ||
        strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != len)
        return sl_fail(err, SL_E_INVALID, "bad_join_token",
                       "--join: '%s' does not hold a join token (one line, as suanli admin "
                       "join-token create printed it)",
                       name);
    memcpy(token, s, len + 1);
    sodium_memzero(buf, sizeof(buf));
    return 0;
}

static int enroll(struct agent *a, struct sl_error *err)
{
    cleanup_json json_t *inv = inventory_json(&a->gpus, a->cfg->data_dir, AGENT_VERSION, err);
    cleanup_json json_t *out = NULL;
    char host[256], join[JOIN_TOKEN_MAX + 1];

    if (!inv)
        return -1;
    if (!a->cfg->join)
        return sl_fail(err, SL_E_INVALID, "not_enrolled",
                       "this host is not enrolled yet: start it once with --join FILE, a file "
                       "holding a join token (make one with suanli admin join-token create "
                       "--region R), or --join - to read it from stdin");
    if (read_join_token(a->cfg->join, join, err) < 0)
        return -1;
    if (!a->cfg->hostname)
        gethostname(host, sizeof(host));
    cleanup_json json_t *body = json_pack("{s:s, s:s, s:s, s:O}", "join_token", join, "hostname",
                                          a->cfg->hostname ? a->cfg->hostname : host, "address",
                                          a->cfg->address, "inventory", inv);
    if (client_request(&a->client, "POST", "/v1/nodes/enroll", body, NULL, &out, err) < 0) {
        sl_error_prefix(err, "enroll at %s", a->cfg->server);
        return -1;
    }
    const char *id = json_string_value(json_object_get(out, "node_id"));
    const char *token = json_string_value(json_object_get(out, "node_token"));
    if (!id || !token)
        return sl_fail(err, SL_E_INTERNAL, NULL, "enroll: the server's answer lacks an id");
    snprintf(a->node_id, sizeof(a->node_id), "%s", id);
    snprintf(a->token, sizeof(a->token), "%s", token);
    cleanup_json json_t *identity =
        json_pack("{s:s, s:s, s:s}", "server", a->cfg->server, "node_id", id, "node_token", token);
    cleanup_free char *text = json_dumps(identity, JSON_INDENT(2));
    cleanup_free char *path = xasprintf("%s/node.json", a->cfg->data_dir);
    if (fs_write_file(path, text, strlen(text), 0600, err) < 0)
        return -1;
    log_info("agent: enrolled as %s", id);
    return 0;
}

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
            if (poll(&p, 1, 2000) == 1 && read(fd, buf, sizeof(buf)) >= 4 &&
                memcmp(buf, "SSH-", 4) == 0)
                return true;
        }
        usleep(10000);
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
    return fs_write_file(path, text, (size_t)n, 0600, err);
}

/* Brings one instance to what is desired; true when it did something. */
static bool converge_one(struct agent *a, json_t *d)
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

static json_t *report_one(struct agent *a, json_t *d)
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

struct build_job {
    struct agent *agent;
    char name[IMAGE_NAME_MAX + 1];
    char sha256[65]; /* an uploaded archive to fetch, else "" (build the recipe) */
    char recipe[32];
};

/* Fetches an archive an admin uploaded to suanlid, checks its digest and
 * imports it (image-import.h: rootfs tarball, docker save or OCI layout). */
static int fetch_and_import(struct agent *a, const struct build_job *job, struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/downloads", a->cfg->data_dir);
    cleanup_free char *file = xasprintf("%s/%s.part", dir, job->sha256);
    cleanup_free char *path = xasprintf("/v1/nodes/%s/uploads/%s", a->node_id, job->sha256);
    struct client c;
    char got[65];
    int rc;

    if (fs_mkdir_p(dir, 0700, err) < 0)
        return -1;
    client_init(&c, a->cfg->server, a->token); /* a handle of its own: another thread */
    rc = client_download(&c, path, file, got, err);
    client_release(&c);
    if (rc < 0)
        return -1;
    if (strcmp(got, job->sha256) != 0) {
        unlink(file);
        return sl_fail(err, SL_E_INVALID, "bad_digest",
                       "the archive arrived with SHA-256 %s, not %s: upload it again", got,
                       job->sha256);
    }
    struct image_limits limits;
    agent_image_limits(a->cfg, &limits);
    rc = image_import(a->cfg->data_dir, file, job->name, &limits, err);
    unlink(file);
    return rc;
}

static void *build_image(void *p)
{
    struct build_job *job = p;
    struct agent *a = job->agent;
    struct sl_error err = SL_ERROR_INIT;

    int rc;
    if (job->sha256[0]) {
        log_info("agent: fetching image %s (%.12s)", job->name, job->sha256);
        rc = fetch_and_import(a, job, &err);
    } else {
        log_info("agent: building image %s with mmdebstrap", job->name);
        rc = image_build_recipe(a->cfg->data_dir, job->name, job->recipe, "bookworm", &err);
    }
    pthread_mutex_lock(&a->lock);
    if (rc < 0) {
        cleanup_free char *msg = xasprintf("failed: %s", err.message);
        json_object_set_new(a->builds, job->name, json_string(msg));
        log_error("agent: image %s: %s", job->name, err.message);
    } else {
        json_object_del(a->builds, job->name);
        log_info("agent: image %s ready", job->name);
    }
    pthread_mutex_unlock(&a->lock);
    free(job);
    return NULL;
}

static void converge_images(struct agent *a, json_t *wanted)
{
    size_t i;
    json_t *w;

    json_array_foreach(wanted, i, w)
    {
        const char *name = json_string_value(json_object_get(w, "name"));
        struct image img = { 0 };
        if (!name || !image_name_valid(name))
            continue;
        if (image_load(a->cfg->data_dir, name, &img, NULL) == 0) {
            image_release(&img);
            continue;
        }
        pthread_mutex_lock(&a->lock);
        bool known = json_object_get(a->builds, name) != NULL;
        if (!known)
            json_object_set_new(a->builds, name, json_string("building"));
        pthread_mutex_unlock(&a->lock);
        if (known)
            continue;
        struct build_job *job = xzalloc(sizeof(*job));
        const char *recipe = json_string_value(json_object_get(w, "recipe"));
        const char *sha = json_string_value(json_object_get(w, "sha256"));
        job->agent = a;
        snprintf(job->name, sizeof(job->name), "%s", name);
        if (recipe && strcmp(recipe, "upload") == 0 && sha && strlen(sha) == 64)
            snprintf(job->sha256, sizeof(job->sha256), "%s", sha);
        /* a recipe this node does not know fails the build with its name */
        snprintf(job->recipe, sizeof(job->recipe), "%s", recipe ? recipe : "base");
        pthread_t t;
        pthread_create(&t, NULL, build_image, job);
        pthread_detach(t);
    }
}

static bool reported_ready(json_t *list, const char *name)
{
    size_t i;
    json_t *e;

    json_array_foreach(list, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            return true;
    }
    return false;
}

static json_t *images_report(struct agent *a)
{
    cleanup_free char *dir = xasprintf("%s/images", a->cfg->data_dir);
    json_t *out = json_array();
    DIR *d = opendir(dir);
    struct dirent *e;

    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        struct image img = { 0 };
        if (n <= 5 || strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        cleanup_free char *name = xstrndup(e->d_name, n - 5);
        if (image_load(a->cfg->data_dir, name, &img, NULL) < 0)
            continue;
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I}", "name", name,
                                             "state", "ready", "os", img.os, "python", img.python,
                                             "cuda", img.cuda, "framework", img.framework,
                                             "size_bytes", (json_int_t)img.size_bytes));
        image_release(&img);
    }
    if (d)
        closedir(d);
    pthread_mutex_lock(&a->lock);
    const char *name;
    json_t *v;
    json_object_foreach(a->builds, name, v)
    {
        const char *s = json_string_value(v);
        bool failed = strncmp(s, "failed: ", 8) == 0;
        if (reported_ready(out, name))
            continue; /* usable now, whatever a rebuild in progress does */
        json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "name", name, "state",
                                             failed ? "failed" : "building", "message",
                                             failed ? s + 8 : ""));
    }
    pthread_mutex_unlock(&a->lock);
    return out;
}

static int heartbeat(struct agent *a, json_t *desired, struct sl_error *err)
{
    cleanup_json json_t *inv = inventory_json(&a->gpus, a->cfg->data_dir, AGENT_VERSION, err);
    cleanup_json json_t *report = json_array();
    cleanup_json json_t *out = NULL;
    size_t i;
    json_t *d;

    if (!inv)
        return -1;
    json_array_foreach(json_object_get(desired, "instances"), i, d)
    {
        json_array_append_new(report, report_one(a, d));
    }
    cleanup_json json_t *body =
        json_pack("{s:O, s:I, s:O, s:o}", "inventory", inv, "revision", (json_int_t)a->revision,
                  "instances", report, "images", images_report(a));
    /* for the idle stop: SSH sessions and GPU use of what runs */
    json_object_set_new(body, "activity",
                        activity_report(&a->rt, &a->gpus, json_object_get(desired, "instances")));
    cleanup_free char *path = xasprintf("/v1/nodes/%s/heartbeat", a->node_id);
    if (client_request(&a->client, "POST", path, body, NULL, &out, err) < 0)
        return -1;
    int64_t hb = json_integer_value(json_object_get(out, "heartbeat_interval_seconds"));
    if (hb > 0)
        a->heartbeat_s = hb;
    return 0;
}

/* nginx for the service ports, under DATA/proxy (an absolute path: nginx's
 * prefix); proxy.nginx = off leaves it out. */
static int setup_proxy(struct agent *a, struct sl_error *err)
{
    struct agent_config *cfg = a->cfg;
    char *abs;

    if (strcmp(cfg->proxy_nginx, "off") == 0)
        return 0;
    if (!proxy_listen_valid(cfg->proxy_listen))
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'proxy.listen': '%s' is not PORT, IPV4:PORT or [IPV6]:PORT",
                       cfg->proxy_listen);
    if (!proxy_auth_url_valid(cfg->server))
        return sl_fail(err, SL_E_INVALID, "invalid_option",
                       "option 'server': nginx asks suanlid at '%s', which is not "
                       "http[s]://HOST[:PORT] (or set proxy.nginx = off)",
                       cfg->server);
    if (!(abs = realpath(cfg->data_dir, NULL)))
        return sl_fail_errno(err, "unable to resolve '%s'", cfg->data_dir);
    a->proxy_dir = xasprintf("%s/proxy", abs);
    free(abs);
    if (fs_mkdir_p(a->proxy_dir, 0700, err) < 0)
        return -1;
    a->proxy = (struct proxy){ .s = { .dir = a->proxy_dir,
                                      .listen = cfg->proxy_listen,
                                      .auth_url = cfg->server,
                                      /* filled by enrollment before the first sync */
                                      .node_id = a->node_id,
                                      .node_token = a->token,
                                      .drop_privileges = geteuid() == 0 },
                               .nginx = cfg->proxy_nginx };
    return 0;
}

static int setup(struct agent *a, struct sl_error *err)
{
    struct agent_config *cfg = a->cfg;

    if (fs_mkdir_p(cfg->data_dir, 0700, err) < 0)
        return -1;
    if (cfg->simulate_gpus) {
        if (gpu_sim_open(cfg->simulate_gpus, &a->gpus, err) < 0)
            return -1;
        log_warn("agent: SIMULATED GPUs (%s): renters see them flagged as simulated",
                 cfg->simulate_gpus);
    } else if (gpu_nvml_open(&a->gpus, err) < 0) {
        sl_error_prefix(err, "no GPUs found; on a host without NVIDIA GPUs declare simulated "
                             "ones with --simulate-gpus \"8:RTX 4090\"");
        return -1;
    }
    if (!cfg->address) {
        char addr[64];
        inventory_default_address(addr, sizeof(addr));
        cfg->address = xstrdup(addr);
    }
    a->runc_root = xasprintf("%s/runc", cfg->data_dir);
    a->net_state = xasprintf("%s/net", cfg->data_dir);
    a->rt =
        (struct runtime){ .ops = &runtime_runc_ops, .binary = cfg->runtime, .root = a->runc_root };
    a->net = (struct net_config){ .cni_path = "/usr/lib/cni",
                                  .bridge = cfg->bridge,
                                  .subnet = cfg->subnet,
                                  .state_dir = a->net_state };
    a->host = (struct node_host){ .data_dir = cfg->data_dir, .runtime = &a->rt, .net = &a->net };
    if (setup_proxy(a, err) < 0)
        return -1;
    a->failures = json_object();
    a->first_pass = true;
    a->builds = json_object();
    a->heartbeat_s = 3;
    pthread_mutex_init(&a->lock, NULL);
    client_init(&a->client, cfg->server, NULL);
    int rc = load_identity(a, err);
    if (rc < 0)
        return -1;
    if (rc == 0 && enroll(a, err) < 0)
        return -1;
    a->client.token = a->token;
    if (cfg->metadata_port) {
        struct metadata_config mc = { .server = cfg->server,
                                      .node_id = a->node_id,
                                      .node_token = a->token,
                                      .data_dir = cfg->data_dir,
                                      .net_state = a->net_state,
                                      .bridge = cfg->bridge,
                                      .subnet = cfg->subnet,
                                      .port = (unsigned)cfg->metadata_port };
        a->metadata = metadata_start(&mc, err);
        if (!a->metadata)
            return -1;
    }
    return 0;
}

int agent_run(struct agent_config *cfg, volatile bool *stop, struct sl_error *err)
{
    struct agent a = { .cfg = cfg };
    cleanup_json json_t *desired =
        json_pack("{s:I, s:[], s:[]}", "revision", (json_int_t)0, "instances", "images");
    int64_t next_heartbeat = 0;
    bool warned = false;

    if (setup(&a, err) < 0)
        return -1;
    cleanup_free char *path = xasprintf("/v1/nodes/%s/desired", a.node_id);
    log_info("agent: node %s serving %s from %s", a.node_id, cfg->address, cfg->server);
    while (!*stop) {
        struct sl_error e = SL_ERROR_INIT;
        json_t *fresh = NULL;
        bool acted = false;
        if (client_request(&a.client, "GET", path, NULL, NULL, &fresh, &e) == 0 && fresh) {
            json_decref(desired);
            desired = fresh;
            a.revision = json_integer_value(json_object_get(desired, "revision"));
            if (warned)
                log_info("agent: desired state readable again from %s", cfg->server);
            warned = false;
        } else if (!warned) {
            /* keep converging to the last desired state: instances run on */
            log_warn("agent: cannot read the desired state: %s", e.message);
            warned = true;
        }
        size_t i;
        json_t *d;
        json_array_foreach(json_object_get(desired, "instances"), i, d)
        {
            acted |= converge_one(&a, d);
        }
        if (fresh)
            a.first_pass = false; /* converged to what suanlid says now */
        /* each running instance's port pinned to its MAC and IP, however
         * the table went (a reboot, a flushed ruleset): see net.h */
        if (net_pin(&a.net, &e) < 0) {
            if (!a.pin_warned)
                log_error("agent: %s", e.message);
            a.pin_warned = true;
        } else if (a.pin_warned) {
            log_info("agent: instance ports pinned again");
            a.pin_warned = false;
        }
        converge_images(&a, json_object_get(desired, "images"));
        if (a.proxy.nginx &&
            proxy_sync_desired(&a.proxy, json_object_get(desired, "instances"), &a.net, &e) < 0 &&
            !a.proxy_warned) {
            log_warn("agent: service ports: %s", e.message);
            a.proxy_warned = true;
        }
        if (acted || sl_time_mono_ms() >= next_heartbeat) {
            if (heartbeat(&a, desired, &e) < 0 && !warned)
                log_warn("agent: heartbeat: %s", e.message);
            next_heartbeat = sl_time_mono_ms() + a.heartbeat_s * 1000;
        }
        usleep((useconds_t)cfg->poll_ms * 1000);
    }
    proxy_stop(&a.proxy);
    metadata_stop(a.metadata);
    free(a.proxy_dir);
    client_release(&a.client);
    gpu_source_release(&a.gpus);
    json_decref(a.failures);
    json_decref(a.builds);
    free(a.runc_root);
    free(a.net_state);
    return 0;
}
