/* The agent's options, its setup (GPUs, runtime, network, the service
 * ports' nginx, identity, metadata endpoint) and its loop: read the desired
 * state, converge each instance (converge.c), pin the ports, make the images
 * (image-fetch.c), sync nginx, report (heartbeat.c). */
#include "agent-internal.h"
#include "disk-spares.h"
#include "fsutil.h"
#include "inventory.h"
#include "lxcfs.h"
#include "public-data.h"
#include "steps.h"
#include "storage.h"
#include "transfer.h"
#include "../lib/cleanup.h"
#include "../lib/config.h"
#include "../lib/json.h"
#include "../lib/log.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"
#include "../lib/timeconst.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    OPT("lxcfs", SL_OPT_STRING, "auto", 0, 0, lxcfs,
        "what shows instances their own memory and CPUs in free, top and /proc: auto (an lxcfs "
        "the agent starts at DATA/lxcfs, when installed), off, or the path of a running lxcfs"),
    OPT("poll_ms", SL_OPT_INT, "200", 20, 60000, poll_ms,
        "how often each instance on the host is checked against its desired state (which "
        "suanlid sends the moment it changes)"),
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
    OPT("terminal.socket", SL_OPT_STRING, "", 0, 0, terminal_socket,
        "the unix socket the browser's terminal is served on, for the node's nginx only "
        "(default: /run/suanli-node/terminal-NODE.sock)"),
    OPT("terminal.max_per_instance", SL_OPT_INT, "4", 0, 64, terminal_max_per_instance,
        "terminals open at once per instance; 0: no terminals on this node"),
    OPT("transfer.port", SL_OPT_INT, STRINGIFY(TRANSFER_PORT_DEFAULT), 0, 65535, transfer_port,
        "port on the host's address where other hosts copy the disks of instances being cloned "
        "(with a one-time token from suanlid); 0: off"),
    OPT("transfer.retry_s", SL_OPT_INT, "60", 1, 86400, transfer_retry_s,
        "how long a clone's copy waits for a silent source host before it fails"),
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
    OPT("metrics.interval_s", SL_OPT_INT, "10", 2, 300, metrics_interval_s,
        "how often each running instance's CPU, memory, disks, network and GPUs are sampled"),
    OPT("metrics.listen", SL_OPT_STRING, "127.0.0.1:9108", 0, 0, metrics_listen,
        "where the agent serves Prometheus /metrics (IPV4:PORT, or off): never an address "
        "instances reach (the bridge's gateway, the metadata address)"),
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

/* The browser's terminal (terminal.h), reached through the proxy's nginx
 * only: none without it. */
static void setup_terminal(struct agent *a)
{
    struct agent_config *cfg = a->cfg;

    if (!a->proxy.nginx || cfg->terminal_max_per_instance == 0)
        return;
    /* the runtime's exec joins the instance's mount namespace and lands on
     * its root: outside a chroot the instance's, inside one the host's (seen
     * under fresh-machine: the shell ran on the host's files) */
    if (fs_chrooted()) {
        log_warn("agent: no terminals on this host: the agent runs in a chroot, where the "
                 "runtime's exec would start a terminal's shell on the host's root instead of "
                 "the instance's; run the agent outside a chroot");
        return;
    }
    a->terminal_socket = *cfg->terminal_socket
                             ? xstrdup(cfg->terminal_socket)
                             : xasprintf("/run/suanli-node/terminal-%s.sock", a->node_id);
    struct terminal_config tc = { .socket_path = a->terminal_socket,
                                  .rt = &a->rt,
                                  .max_per_instance = (unsigned)cfg->terminal_max_per_instance,
                                  .drop_privileges = a->proxy.s.drop_privileges,
                                  .data_dir = cfg->data_dir };
    struct sl_error e = SL_ERROR_INIT;
    a->terminal = terminal_start(&tc, &e);
    if (!a->terminal) {
        /* the rest of the host works without it, as without nginx */
        log_warn("agent: no terminals on this host: %s (terminal.socket)", e.message);
        free(a->terminal_socket);
        a->terminal_socket = NULL;
        return;
    }
    a->proxy.s.terminal_socket = a->terminal_socket;
    a->proxy.s.terminal_key = terminal_key(a->terminal);
}

/* The instances the metrics collector samples: the desired state's. */
static json_t *desired_instances(void *ctx)
{
    struct agent *a = ctx;

    pthread_mutex_lock(&a->lock);
    json_t *instances = json_incref(json_object_get(a->desired, "instances"));
    pthread_mutex_unlock(&a->lock);
    return instances;
}

static int setup_metrics(struct agent *a, struct sl_error *err)
{
    static char gateway[64];

    if (metadata_gateway(a->cfg->subnet, gateway, err) < 0)
        return -1;
    struct metrics_config mc = { .data_dir = a->cfg->data_dir,
                                 .cgroup_root = "/sys/fs/cgroup",
                                 .gpus = &a->gpus,
                                 .interval_ms = a->cfg->metrics_interval_s * 1000,
                                 .listen = a->cfg->metrics_listen,
                                 .forbidden_host = gateway,
                                 .instances = desired_instances,
                                 .ctx = a };
    a->metrics = metrics_start(&mc, err);
    return a->metrics ? 0 : -1;
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
    bool lxcfs_own;
    if (lxcfs_ensure(cfg->lxcfs, cfg->data_dir, &a->lxcfs_dir, &lxcfs_own, err) < 0 ||
        disk_spares_init(cfg->data_dir, err) < 0 || public_init(cfg->data_dir, err) < 0)
        return -1;
    a->public_dir = public_dir(cfg->data_dir);
    a->host = (struct node_host){ .data_dir = cfg->data_dir,
                                  .runtime = &a->rt,
                                  .net = &a->net,
                                  .lxcfs_dir = a->lxcfs_dir,
                                  .lxcfs_own = lxcfs_own,
                                  .public_dir = a->public_dir };
    if (setup_proxy(a, err) < 0)
        return -1;
    a->failures = json_object();
    a->retries = json_object();
    a->inflight = json_object();
    a->first_pass = true;
    a->builds = json_object();
    a->datasets = json_object();
    a->desired = json_pack("{s:I, s:[], s:[]}", "revision", (json_int_t)0, "instances", "images");
    a->heartbeat_s = 3;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->wake, NULL);
    sl_client_init(&a->client, cfg->server, NULL);
    int rc = agent_identity_load(a, err);
    if (rc < 0)
        return -1;
    if (rc == 0 && agent_enroll(a, err) < 0)
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
    setup_terminal(a);
    if (setup_metrics(a, err) < 0)
        return -1;
    /* disk copies for clones: a port taken is logged, not fatal */
    transfer_server_start(cfg->data_dir, cfg->address, (unsigned)cfg->transfer_port);
    return 0;
}

/* How long suanlid holds a read of the desired state open while nothing
 * changes (GET /v1/nodes/{id}/desired?after=REVISION&wait=SECONDS). */
#define LONG_POLL_S 25

static void wait_ms(struct agent *a, int64_t ms)
{
    for (int64_t left = ms; left > 0 && !*a->stop; left -= 100)
        usleep((useconds_t)(left < 100 ? left : 100) * SL_USEC_PER_MSEC);
}

/* The desired state, read as it changes: a long-poll that suanlid answers
 * the moment the node's revision passes the one the agent has (or, with
 * 304, after LONG_POLL_S). A suanlid that does not wait (an older one)
 * answers at once: the agent then reads it every poll_ms, as before. */
static void *desired_reader(void *p)
{
    struct agent *a = p;
    struct sl_client c;
    int64_t after = 0;
    bool warned = false;

    sl_client_init(&c, a->cfg->server, a->token);
    c.timeout_s = LONG_POLL_S + 20;
    c.cancel = a->stop;
    while (!*a->stop) {
        struct sl_error e = SL_ERROR_INIT;
        json_t *fresh = NULL;
        /* after a failure, a read that answers at once: suanlid back (with
         * nothing new) is known at once, not after a whole wait */
        cleanup_free char *path = xasprintf("/v1/nodes/%s/desired?after=%lld&wait=%d", a->node_id,
                                            (long long)after, warned ? 0 : LONG_POLL_S);
        int64_t asked = sl_time_mono_ms();
        if (sl_client_request(&c, "GET", path, NULL, NULL, &fresh, &e) < 0) {
            if (*a->stop)
                break;
            if (!warned) /* keep converging to the last desired state: instances run on */
                log_warn("agent: cannot read the desired state: %s", e.message);
            warned = true;
            wait_ms(a, a->cfg->poll_ms > 1000 ? a->cfg->poll_ms : 1000);
            continue;
        }
        if (warned)
            log_info("agent: desired state readable again from %s", a->cfg->server);
        warned = false;
        if (!fresh)
            continue; /* 304: nothing changed while it waited */
        int64_t revision = json_integer_value(json_object_get(fresh, "revision"));
        bool unchanged = revision <= after;
        pthread_mutex_lock(&a->lock);
        json_decref(a->desired);
        a->desired = fresh;
        a->revision = revision;
        a->desired_us = steps_wall_us();
        a->kicked = true;
        pthread_cond_broadcast(&a->wake);
        pthread_mutex_unlock(&a->lock);
        after = revision;
        if (unchanged && sl_time_mono_ms() - asked < LONG_POLL_S * SL_MSEC_PER_SEC / 2)
            wait_ms(a, a->cfg->poll_ms);
    }
    sl_client_release(&c);
    return NULL;
}

int agent_run(struct agent_config *cfg, volatile bool *stop, struct sl_error *err)
{
    struct agent a = { .cfg = cfg, .stop = stop };
    int64_t next_heartbeat = 0;
    char hb_failing[sizeof(((struct sl_error *)0)->code)] = ""; /* the last failure's code */
    pthread_t reader;

    if (setup(&a, err) < 0)
        return -1;
    log_info("agent: node %s serving %s from %s", a.node_id, cfg->address, cfg->server);
    if (pthread_create(&reader, NULL, desired_reader, &a) != 0)
        return sl_fail(err, SL_E_INTERNAL, "thread", "unable to start the desired-state reader");
    while (!*stop) {
        struct sl_error e = SL_ERROR_INIT;
        pthread_mutex_lock(&a.lock);
        cleanup_json json_t *desired = json_incref(a.desired);
        bool acted = a.acted;
        a.acted = a.kicked = false;
        pthread_mutex_unlock(&a.lock);

        /* first: what the workers that just finished reached, before this
         * pass's workers take their instances again */
        if (acted || sl_time_mono_ms() >= next_heartbeat) {
            if (agent_heartbeat(&a, desired, &e) < 0) {
                /* suanlid unreachable: the desired-state reader says so.
                 * Any other failure is said once per kind, even right
                 * after an unreachable spell: a refusal by a suanlid
                 * just back must not hide behind the outage before it. */
                if (strcmp(e.code, hb_failing) != 0 && strcmp(e.code, "unreachable") != 0)
                    log_warn("agent: heartbeat: %s", e.message);
                snprintf(hb_failing, sizeof(hb_failing), "%s", e.code);
            } else if (*hb_failing) {
                if (strcmp(hb_failing, "unreachable") != 0)
                    log_info("agent: heartbeat accepted again");
                *hb_failing = '\0';
            }
            next_heartbeat = sl_time_mono_ms() + a.heartbeat_s * SL_MSEC_PER_SEC;
        }
        transfer_sync(desired); /* disks exported, copies still wanted (transfer.h) */
        agent_converge_start(&a, json_object_get(desired, "instances"),
                             json_integer_value(json_object_get(desired, "revision")));
        if (json_integer_value(json_object_get(desired, "revision")) > 0)
            a.first_pass = false; /* converging to what suanlid says now */
        /* each running instance's port pinned to its MAC and IP, however
         * the table went (a reboot, a flushed ruleset): see net.h */
        if (net_pin_recheck(&a.net, &e) < 0) {
            if (!a.pin_warned)
                log_error("agent: %s", e.message);
            a.pin_warned = true;
        } else if (a.pin_warned) {
            log_info("agent: instance ports pinned again");
            a.pin_warned = false;
        }
        agent_images_converge(&a, json_object_get(desired, "images"));
        agent_saves_converge(&a, json_object_get(desired, "saves"));
        agent_public_converge(&a, json_integer_value(json_object_get(desired, "revision")) > 0
                                      ? json_object_get(desired, "datasets")
                                      : NULL);
        /* a grown quota grows the mounted images (storage.h) */
        storage_converge(cfg->data_dir, json_object_get(desired, "storage"),
                         json_object_get(desired, "instances"));
        if (a.proxy.nginx &&
            proxy_sync_desired(&a.proxy, json_object_get(desired, "instances"), &a.net, &e) < 0 &&
            !a.proxy_warned) {
            log_warn("agent: service ports: %s", e.message);
            a.proxy_warned = true;
        }
        /* until the next check, a new desired state or a worker done */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ns = until.tv_nsec + (cfg->poll_ms % 1000) * 1000000;
        until.tv_sec += cfg->poll_ms / 1000 + ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        pthread_mutex_lock(&a.lock);
        while (!a.kicked && !*stop) {
            if (pthread_cond_timedwait(&a.wake, &a.lock, &until) != 0)
                break;
        }
        pthread_mutex_unlock(&a.lock);
    }
    pthread_join(reader, NULL);
    agent_converge_drain(&a);
    metrics_stop(a.metrics);
    proxy_stop(&a.proxy);
    metadata_stop(a.metadata);
    terminal_stop(a.terminal);
    free(a.terminal_socket);
    transfer_server_stop();
    free(a.proxy_dir);
    sl_client_release(&a.client);
    gpu_source_release(&a.gpus);
    json_decref(a.failures);
    json_decref(a.retries);
    json_decref(a.inflight);
    json_decref(a.desired);
    json_decref(a.builds);
    json_decref(a.datasets);
    free(a.runc_root);
    free(a.public_dir);
    free(a.net_state);
    return 0;
}
