#include "net.h"
#include "disk.h"
#include "firewall.h"
#include "fsutil.h"
#include "steps.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/file.h"
#include "../lib/id.h"
#include "../lib/json.h"
#include "../lib/subprocess.h"
#include "../lib/timefmt.h"
#include "../lib/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <net/if.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define NETNS_PARENT   "/run/suanli-node"
#define NETNS_DIR      NETNS_PARENT "/netns"
#define LEGACY_DIR     "/run/netns" /* where older agents pinned */
#define NSFS_MAGIC     0x6e736673
#define CNI_VERSION    "1.0.0"
#define NETWORK_NAME   "suanli"
#define SSH_PORT       22
#define CNI_OUTPUT_MAX (1 << 20)

/* The agent converges instances in threads of their own. The pins change
 * one at a time, under net_lock (a pin computed from the results before
 * another's attach must not be written after it, or that instance would run
 * unpinned for a pass), and so does the firewall check (ensure_rules). The
 * CNI plugins run for several instances at once, as container runtimes run
 * them (host-local leases under a file lock, iptables under its own), except
 * until one attach has worked since the agent started: that first one makes
 * the plugins' shared chains (CNI-FORWARD, CNI-HOSTPORT-DNAT, ...), which two
 * plugins making them at once could both try to create. */
static pthread_mutex_t net_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static bool net_warm; /* under net_lock: an attach has worked since the agent started */

char *net_netns_path(const char *id)
{
    return xasprintf("%s/suanli-%s", NETNS_DIR, id);
}

static char *legacy_path(const char *id)
{
    return xasprintf("%s/suanli-%s", LEGACY_DIR, id);
}

/* Whether path is a namespace file (a pin's mount, or /proc/PID/ns/net):
 * what the CNI plugins check before they enter it ("unknown FS magic"). */
static bool is_nsfs(const char *path)
{
    struct statfs sf;
    return statfs(path, &sf) == 0 && (unsigned long)sf.f_type == NSFS_MAGIC;
}

/* Whether the instance has a pin, here or where an older agent kept it;
 * the file counts even when what was mounted on it is gone. */
static bool pinned(const char *id)
{
    cleanup_free char *pin = net_netns_path(id);
    cleanup_free char *legacy = legacy_path(id);
    return access(pin, F_OK) == 0 || access(legacy, F_OK) == 0;
}

/* Whether a namespace is mounted under NETNS_DIR. */
static bool netns_dir_busy(void)
{
    cleanup_free char *info = fs_read_file("/proc/self/mountinfo", 16 << 20, NULL, NULL);
    for (char *line = info; line && *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        /* "ID PARENT MAJ:MIN ROOT MOUNTPOINT ..." */
        char *field = line;
        for (int i = 0; i < 4 && field; i++) {
            field = strchr(field, ' ');
            field = field ? field + 1 : NULL;
        }
        if (field && strncmp(field, NETNS_DIR "/", strlen(NETNS_DIR) + 1) == 0)
            return true;
        line = end ? end + 1 : NULL;
    }
    return false;
}

/* The pins live in a directory of the agent's own (docs/design/
 * node-runtime.md, "Network namespace pins"): /run/netns is every tool's,
 * and the first `ip netns add` on a host where it is not a mount point
 * bind-mounts it over itself and hides the pins below. Ours is a shared
 * mount point of its own, as iproute2 makes /run/netns, so a pin's unmount
 * reaches the copies other mount namespaces took; made under a lock, as
 * several agents of one host (a test's fleet) may start together. */
static int netns_dir_prepare(struct sl_error *err)
{
    if (fs_mkdir_p(NETNS_DIR, 0755, err) < 0)
        return -1;
    if (mount("", NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) == 0)
        return 0;
    if (errno != EINVAL) /* EINVAL: not a mount point yet */
        return sl_fail_errno(err, "unable to make '%s' a shared mount", NETNS_DIR);
    cleanup_close int lock = open(NETNS_PARENT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock < 0 || flock(lock, LOCK_EX) < 0)
        return sl_fail_errno(err, "unable to lock '%s'", NETNS_PARENT);
    if (mount("", NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) == 0)
        return 0;         /* another agent made it meanwhile */
    if (netns_dir_busy()) /* the bind would hide these very namespaces */
        return 0;
    if (mount(NETNS_DIR, NETNS_DIR, "none", MS_BIND | MS_REC, NULL) < 0 ||
        mount("", NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) < 0)
        return sl_fail_errno(err, "unable to make '%s' a shared mount point", NETNS_DIR);
    return 0;
}

/* Binds source (a namespace file) onto path, a new empty file. */
static int netns_bind(const char *source, const char *path, struct sl_error *err)
{
    if (netns_dir_prepare(err) < 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0)
        return sl_fail_errno(err, "unable to create '%s'", path);
    close(fd);
    if (mount(source, path, NULL, MS_BIND, NULL) < 0) {
        sl_fail_errno(err, "unable to bind '%s' onto '%s'", source, path);
        unlink(path);
        return -1;
    }
    return 0;
}

/* Unmounts and removes a pin; one that is not there is fine. */
static int netns_remove(const char *path, struct sl_error *err)
{
    if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        return sl_fail_errno(err, "unable to unmount '%s'", path);
    if (unlink(path) < 0 && errno != ENOENT)
        return sl_fail_errno(err, "unable to remove '%s'", path);
    return 0;
}

static int net_adopt_locked(const struct net_config *cfg, const char *id, pid_t pid,
                            struct sl_error *err)
{
    (void)cfg;
    cleanup_free char *pin = net_netns_path(id);
    cleanup_free char *legacy = legacy_path(id);
    if (is_nsfs(pin))
        return 0;
    if (is_nsfs(legacy)) {
        if (netns_remove(pin, err) < 0 || netns_bind(legacy, pin, err) < 0)
            return -1;
        struct sl_error e = SL_ERROR_INIT;
        sl_error_warn(netns_remove(legacy, &e), &e, "remove an older agent's namespace pin");
        return NET_ADOPTED_LEGACY;
    }
    if (pid <= 0)
        return 0;
    /* the container's own namespace, never the host's (a process that
     * already left the container's, or a recycled pid) */
    char proc[64];
    struct stat inside, host;
    snprintf(proc, sizeof(proc), "/proc/%d/ns/net", (int)pid);
    if (stat(proc, &inside) < 0 || stat("/proc/self/ns/net", &host) < 0)
        return 0;
    if (inside.st_ino == host.st_ino && inside.st_dev == host.st_dev)
        return 0;
    if (netns_remove(pin, err) < 0 || netns_bind(proc, pin, err) < 0)
        return -1;
    return NET_ADOPTED_PROCESS;
}

/* A child enters a new network namespace and binds it onto path; the
 * namespace then lives as long as that mount. */
static int netns_create(const char *path, struct sl_error *err)
{
    char fstype[32];
    int mounted = disk_mounted(path, NULL, 0, fstype, sizeof(fstype), err);
    if (mounted < 0)
        return -1;
    if (mounted)
        return strcmp(fstype, "nsfs") == 0 ? 0
                                           : sl_fail(err, SL_E_CONFLICT, "netns_busy",
                                                     "'%s' holds a '%s' mount", path, fstype);
    if (netns_dir_prepare(err) < 0)
        return -1;
    int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0444);
    if (fd < 0)
        return sl_fail_errno(err, "unable to create '%s'", path);
    close(fd);

    pid_t pid = fork();
    if (pid < 0)
        return sl_fail_errno(err, "unable to fork");
    if (pid == 0) {
        if (unshare(CLONE_NEWNET) < 0)
            _exit(1);
        /* lo up, as CNI's loopback plugin would, without running it */
        struct ifreq ifr = { .ifr_name = "lo" };
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
            _exit(3);
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
            _exit(3);
        if (mount("/proc/self/ns/net", path, NULL, MS_BIND, NULL) < 0)
            _exit(2);
        _exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return sl_fail_errno(err, "unable to wait for the netns child");
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        unlink(path);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        return sl_fail(err, SL_E_INTERNAL, "netns_failed", "unable to %s network namespace '%s'",
                       code == 2   ? "bind"
                       : code == 3 ? "bring up the loopback interface of"
                                   : "create",
                       path);
    }
    return 0;
}

json_t *net_cni_plugins(const struct net_config *cfg, unsigned host_port)
{
    cleanup_free char *ipam_dir = xasprintf("%s/ipam", cfg->state_dir);
    json_t *bridge = json_pack("{s:s, s:s, s:b, s:b, s:b, s:{s:s, s:[[{s:s}]], s:[{s:s}], s:s}}",
                               "type", "bridge", "bridge", cfg->bridge, "isGateway", 1, "ipMasq", 1,
                               "hairpinMode", 1, "ipam", "type", "host-local", "ranges", "subnet",
                               cfg->subnet, "routes", "dst", "0.0.0.0/0", "dataDir", ipam_dir);
    /* snat: a connection to 127.0.0.1:PORT is masqueraded so the reply finds
     * its way back; portmap then also sets route_localnet on the bridge. */
    json_t *portmap =
        json_pack("{s:s, s:{s:b}, s:b, s:{s:[{s:i, s:i, s:s}]}}", "type", "portmap", "capabilities",
                  "portMappings", 1, "snat", 1, "runtimeConfig", "portMappings", "hostPort",
                  (int)host_port, "containerPort", SSH_PORT, "protocol", "tcp");
    json_t *firewall = json_pack("{s:s, s:s}", "type", "firewall", "backend", "iptables");
    return json_pack("[o, o, o]", bridge, portmap, firewall);
}

/* Runs one plugin; its stdout (a result, or an error object) goes to out. */
static int run_plugin(const struct net_config *cfg, const char *command, const char *id,
                      const char *netns, const char *ifname, json_t *conf, struct sl_buf *out,
                      struct sl_error *err)
{
    const char *type = json_string_value(json_object_get(conf, "type"));
    cleanup_free char *binary = xasprintf("%s/%s", cfg->cni_path, type);
    cleanup_free char *e_command = xasprintf("CNI_COMMAND=%s", command);
    cleanup_free char *e_id = xasprintf("CNI_CONTAINERID=suanli-%s", id);
    cleanup_free char *e_netns = xasprintf("CNI_NETNS=%s", netns);
    cleanup_free char *e_ifname = xasprintf("CNI_IFNAME=%s", ifname);
    cleanup_free char *e_path = xasprintf("CNI_PATH=%s", cfg->cni_path);
    const char *envp[] = {
        e_command, e_id,   e_netns,
        e_ifname,  e_path, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        NULL
    };
    const char *argv[] = { binary, NULL };
    cleanup_free char *input = json_dumps(conf, JSON_COMPACT);
    cleanup_buf struct sl_buf errout = SL_BUF_INIT;
    struct sl_subprocess sp = { .argv = argv,
                                .envp = envp,
                                .input = input,
                                .input_len = strlen(input),
                                .out = out,
                                .err = &errout };
    int rc = sl_subprocess_run(&sp, err);
    if (rc > 0) {
        json_error_t jerr;
        cleanup_json json_t *obj = json_loadb(out->data, out->len, 0, &jerr);
        const char *msg = json_string_value(json_object_get(obj, "msg"));
        const char *details = json_string_value(json_object_get(obj, "details"));
        sl_fail(err, SL_E_INTERNAL, "network_failed", "CNI %s %s for '%s': %s%s%s", type, command,
                id, msg ? msg : errout.data, details ? ": " : "", details ? details : "");
    }
    return rc == 0 ? 0 : -1;
}

json_t *net_cni_conf(json_t *plugin, json_t *prev)
{
    json_t *conf = json_deep_copy(plugin);
    json_object_set_new(conf, "cniVersion", json_string(CNI_VERSION));
    json_object_set_new(conf, "name", json_string(NETWORK_NAME));
    if (prev)
        json_object_set(conf, "prevResult", prev);
    return conf;
}

static char *result_path(const struct net_config *cfg, const char *id)
{
    return xasprintf("%s/results/%s.json", cfg->state_dir, id);
}

/* The bridge plugin's masquerade rules of an instance: a nat chain named
 * from the network and container names (net_masq_chain) and a POSTROUTING
 * rule per address jumping to it. */
void net_masq_chain(const char *id, char chain[static NET_MASQ_CHAIN_MAX])
{
    cleanup_free char *key = xasprintf("%ssuanli-%s", NETWORK_NAME, id);
    unsigned char hash[crypto_hash_sha512_BYTES];
    crypto_hash_sha512(hash, (const unsigned char *)key, strlen(key));
    memcpy(chain, "CNI-", 4);
    for (size_t i = 0; i < 12; i++)
        snprintf(chain + 4 + 2 * i, 3, "%02x", hash[i]);
}

/* The bridge plugin's DEL finds the addresses to unmasquerade on the
 * interface in the namespace; when the namespace is gone (the host
 * rebooted, or the container died and it was removed) it skips that, so the
 * rules are removed here from the cached result. Missing rules are fine. */
static void masq_teardown(const char *id, json_t *result)
{
    char chain[NET_MASQ_CHAIN_MAX];
    size_t i;
    json_t *ip;

    net_masq_chain(id, chain);
    cleanup_free char *comment = xasprintf("name: \"%s\" id: \"suanli-%s\"", NETWORK_NAME, id);
    json_array_foreach(json_object_get(result, "ips"), i, ip)
    {
        const char *cidr = json_string_value(json_object_get(ip, "address"));
        if (!cidr)
            continue;
        cleanup_free char *addr = xstrndup(cidr, strcspn(cidr, "/"));
        const char *argv[] = { "iptables",    "-w",      "-t",        "nat",   "-D",
                               "POSTROUTING", "-s",      addr,        "-j",    chain,
                               "-m",          "comment", "--comment", comment, NULL };
        struct sl_error e = SL_ERROR_INIT;
        sl_error_warn(sl_run(argv, NULL, &e), &e, "remove the masquerade rule of an instance");
    }
    const char *flush[] = { "iptables", "-w", "-t", "nat", "-F", chain, NULL };
    const char *drop[] = { "iptables", "-w", "-t", "nat", "-X", chain, NULL };
    struct sl_error e = SL_ERROR_INIT;
    if (sl_error_warn(sl_run(flush, NULL, &e), &e, "flush the masquerade chain") == 0)
        sl_error_warn(sl_run(drop, NULL, &e), &e, "remove the masquerade chain");
}

/* DEL in reverse order; goes on after a failure and reports the first.
 * known: what ADD made so far when the caller has it, else the cache's. */
static int chain_del(const struct net_config *cfg, const char *id, const char *netns,
                     unsigned host_port, json_t *known, struct sl_error *err)
{
    cleanup_free char *cache = result_path(cfg, id);
    json_error_t jerr;
    cleanup_json json_t *prev = known ? json_incref(known) : json_load_file(cache, 0, &jerr);
    cleanup_json json_t *plugins = net_cni_plugins(cfg, host_port);
    int rc = 0;
    for (size_t i = json_array_size(plugins); i-- > 0;) {
        cleanup_json json_t *conf = net_cni_conf(json_array_get(plugins, i), prev);
        cleanup_buf struct sl_buf out = SL_BUF_INIT;
        struct sl_error e = SL_ERROR_INIT;
        sl_error_gather(err, &rc, run_plugin(cfg, "DEL", id, netns, "eth0", conf, &out, &e), &e);
    }
    if (prev && access(netns, F_OK) != 0)
        masq_teardown(id, prev);
    if (rc == 0) /* with what an agent killed while caching left */
        fs_unlink_with_temps(cache);
    return rc;
}

void net_result_address(json_t *result, struct net_attachment *out)
{
    json_t *ip = json_array_get(json_object_get(result, "ips"), 0);
    const char *addr = json_string_value(json_object_get(ip, "address"));
    const char *gw = json_string_value(json_object_get(ip, "gateway"));
    if (addr)
        snprintf(out->ip, sizeof(out->ip), "%.*s", (int)strcspn(addr, "/"), addr);
    if (gw)
        snprintf(out->gateway, sizeof(out->gateway), "%s", gw);
}

/* firewall_ensure's checks are eight iptables runs: made once per
 * ENSURE_EVERY_MS for the bridge (under net_lock), by the attach that
 * comes first or by net_pin, which every pass of the agent's loop runs, so
 * rules deleted behind the agent's back come back within that time for
 * running instances too (before, only at the next attach); a table of
 * pins found gone (a flushed ruleset, a reboot) makes them at once. */
#define ENSURE_EVERY_MS 10000
static char ensured_bridge[64];
static int64_t ensured_ms;

static int ensure_rules(const struct net_config *cfg, bool now, struct sl_error *err)
{
    pthread_mutex_lock(&net_lock);
    int64_t t = sl_time_mono_ms();
    int rc = 0;
    if (now || strcmp(ensured_bridge, cfg->bridge) != 0 || t - ensured_ms >= ENSURE_EVERY_MS) {
        ensured_bridge[0] = '\0';
        rc = firewall_ensure(cfg->bridge, err);
        if (rc == 0) {
            snprintf(ensured_bridge, sizeof(ensured_bridge), "%s", cfg->bridge);
            ensured_ms = t;
        }
    }
    pthread_mutex_unlock(&net_lock);
    return rc;
}

/* The instance's host-side veth (the result's interface outside any
 * sandbox that is not the bridge) becomes an isolated port, and the bridge's
 * rules are made sure of: see firewall.h. */
static int isolate(const struct net_config *cfg, json_t *result, struct sl_error *err)
{
    size_t i;
    json_t *iface;

    json_array_foreach(json_object_get(result, "interfaces"), i, iface)
    {
        const char *name = json_string_value(json_object_get(iface, "name"));
        if (name && !json_object_get(iface, "sandbox") && strcmp(name, cfg->bridge) != 0 &&
            firewall_isolate_port(name, err) < 0)
            return -1;
    }
    return ensure_rules(cfg, false, err);
}

bool net_result_port(const struct net_config *cfg, const char *id, json_t *result,
                     struct firewall_port *port)
{
    json_t *ifaces = json_object_get(result, "interfaces");
    json_t *iface, *ip;
    size_t i;
    long inside = -1;

    *port = (struct firewall_port){ 0 };
    snprintf(port->id, sizeof(port->id), "%s", id);
    json_array_foreach(ifaces, i, iface)
    {
        const char *name = json_string_value(json_object_get(iface, "name"));
        const char *mac = json_string_value(json_object_get(iface, "mac"));
        if (!name)
            continue;
        if (json_object_get(iface, "sandbox")) {
            if (mac && inside < 0) {
                inside = (long)i;
                snprintf(port->mac, sizeof(port->mac), "%s", mac);
            }
        } else if (strcmp(name, cfg->bridge) != 0 && strlen(name) < sizeof(port->veth)) {
            snprintf(port->veth, sizeof(port->veth), "%s", name);
        }
    }
    json_array_foreach(json_object_get(result, "ips"), i, ip)
    {
        const char *cidr = json_string_value(json_object_get(ip, "address"));
        json_t *at = json_object_get(ip, "interface");
        if (!cidr || strchr(cidr, ':') || (port->ip[0] && json_integer_value(at) != inside))
            continue;
        snprintf(port->ip, sizeof(port->ip), "%.*s", (int)strcspn(cidr, "/"), cidr);
    }
    return port->veth[0] && port->mac[0] && port->ip[0];
}

static int net_pin_locked(const struct net_config *cfg, struct sl_error *err)
{
    cleanup_free char *dir = xasprintf("%s/results", cfg->state_dir);
    cleanup_free char *unreadable = NULL; /* an attached instance with no port to pin */
    struct firewall_port *ports = NULL;
    size_t n = 0, cap = 0;
    cleanup_dir DIR *d = opendir(dir);
    struct dirent *e;

    if (!d && errno != ENOENT)
        return sl_fail_errno(err, "unable to read '%s'", dir);
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || len - 5 >= SL_ID_MAX || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        cleanup_free char *id = xstrndup(e->d_name, len - 5);
        cleanup_free char *path = xasprintf("%s/%s", dir, e->d_name);
        json_error_t jerr;
        if (!pinned(id)) /* not attached: its veth went with it */
            continue;
        cleanup_json json_t *result = json_load_file(path, 0, &jerr);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ports = xrealloc(ports, cap * sizeof(*ports));
        }
        if (result && net_result_port(cfg, id, result, &ports[n]))
            n++;
        else if (!unreadable)
            unreadable = xstrdup(path);
    }
    enum firewall_pin_change change;
    int rc = firewall_pin_ports(cfg->bridge, ports, n, &change, err);
    free(ports);
    /* Instances attached but no table: a reboot, or a flushed ruleset that
     * took the iptables isolation rules with it: put those back too. */
    if (rc == 0)
        rc = ensure_rules(cfg, change == FIREWALL_PIN_CREATED, err);
    /* the others are pinned; this one fails its start (net_attach) */
    if (rc == 0 && unreadable)
        rc = sl_fail(err, SL_E_INTERNAL, "network_failed",
                     "'%s' names no veth, MAC and IPv4 address to pin: stop the instance",
                     unreadable);
    return rc;
}

static int detach(const struct net_config *cfg, const char *id, unsigned host_port, json_t *known,
                  struct sl_error *err);

/* Undoes an attach that failed, from what ADD made so far (prev); the
 * failure in err stays the one returned. */
static int attach_failed(const struct net_config *cfg, const char *id, unsigned host_port,
                         json_t *prev, struct sl_error *err)
{
    struct sl_error e = SL_ERROR_INIT;
    int rc = -1;
    sl_error_gather(err, &rc, detach(cfg, id, host_port, prev, &e), &e);
    sl_error_prefix(err, "attach network of '%s'", id);
    return -1;
}

/* The plugins of net_cni_plugins by index, as steps (steps.h) name them. */
static const char *plugin_step(size_t i)
{
    static const char *const names[] = { "network: cni bridge", "network: cni portmap",
                                         "network: cni firewall" };
    return i < ARRAY_SIZE(names) ? names[i] : "network: cni other";
}

/* The port's isolation and pin, which need only the bridge plugin's result
 * (the veth, the MAC and the address inside), made in a thread beside the
 * portmap and firewall plugins. */
struct pin_job {
    const struct net_config *cfg;
    json_t *result; /* a copy of its own */
    struct sl_error err;
    int rc;
    struct steps steps;
};

static void *pin_thread(void *p)
{
    struct pin_job *job = p;
    job->err = (struct sl_error)SL_ERROR_INIT;
    steps_begin(&job->steps, 0);
    job->rc = isolate(job->cfg, job->result, &job->err);
    steps_mark("overlap: isolate port");
    if (job->rc == 0)
        job->rc = net_pin(job->cfg, &job->err);
    steps_mark("overlap: nft pin");
    steps_end();
    return NULL;
}

/* beside: whether the pin may run in a thread (not while this thread holds
 * net_lock, which net_pin takes). */
/* A plugin run in a thread: the portmap plugin beside the firewall plugin.
 * Both act on the bridge's result alone (portmap's own result is its
 * prevResult, unchanged), so they need not wait for each other. */
struct plugin_job {
    const struct net_config *cfg;
    const char *id, *netns;
    json_t *conf; /* of its own */
    struct sl_buf out;
    struct sl_error err;
    int rc;
    struct steps steps;
};

static void *plugin_thread(void *p)
{
    struct plugin_job *job = p;
    job->err = (struct sl_error)SL_ERROR_INIT;
    steps_begin(&job->steps, 0);
    job->rc =
        run_plugin(job->cfg, "ADD", job->id, job->netns, "eth0", job->conf, &job->out, &job->err);
    steps_mark("overlap: cni portmap");
    steps_end();
    return NULL;
}

static int attach(const struct net_config *cfg, const char *id, unsigned host_port, bool beside,
                  struct net_attachment *out, struct sl_error *err)
{
    *out = (struct net_attachment){ 0 };
    if (host_port == 0 || host_port > 65535)
        return sl_fail(err, SL_E_INVALID, "invalid_port", "host port %u is out of range",
                       host_port);
    cleanup_free char *netns = net_netns_path(id);
    snprintf(out->netns, sizeof(out->netns), "%s", netns);
    cleanup_free char *results = xasprintf("%s/results", cfg->state_dir);
    if (fs_mkdir_p(results, 0700, err) < 0 || netns_create(netns, err) < 0)
        return -1;
    steps_mark("network: netns");

    cleanup_json json_t *plugins = net_cni_plugins(cfg, host_port);
    cleanup_json json_t *prev = NULL;
    cleanup_free char *cache = result_path(cfg, id);
    cleanup_buf struct sl_buf res = SL_BUF_INIT;
    struct pin_job pin = { .cfg = cfg };
    pthread_t pin_t;
    bool pinning = false;   /* pin_t runs */
    bool pinned_ok = false; /* it ran and pinned */
    struct plugin_job side = { .cfg = cfg, .id = id, .netns = netns, .out = SL_BUF_INIT };
    pthread_t side_t;
    bool siding = false; /* side_t runs */
    for (size_t i = 0; i < json_array_size(plugins); i++) {
        /* portmap (1) in a thread, beside firewall (2), both after bridge */
        if (i == 1 && beside && json_array_size(plugins) == 3) {
            json_t *copy = json_deep_copy(prev);
            side.conf = net_cni_conf(json_array_get(plugins, i), copy);
            json_decref(copy);
            siding = pthread_create(&side_t, NULL, plugin_thread, &side) == 0;
            if (siding)
                continue;
            json_decref(TAKE_PTR(side.conf));
        }
        cleanup_json json_t *conf = net_cni_conf(json_array_get(plugins, i), prev);
        sl_buf_reset(&res);
        if (run_plugin(cfg, "ADD", id, netns, "eth0", conf, &res, err) < 0)
            goto fail;
        json_error_t jerr;
        json_t *result = json_loadb(res.data, res.len, 0, &jerr);
        if (!result) {
            sl_fail(err, SL_E_INTERNAL, "network_failed", "CNI %s ADD for '%s': bad result: %s",
                    json_string_value(json_object_get(conf, "type")), id, jerr.text);
            goto fail;
        }
        json_decref(prev);
        prev = result;
        steps_mark(plugin_step(i));
        /* after every plugin, not only the last: an agent killed midway
         * leaves DEL the addresses (the firewall plugin's rules are found
         * from them alone) */
        if (sl_file_write(cache, res.data, res.len, 0600, 0, err) < 0)
            goto fail;
        steps_mark("network: cni result cache");
        /* the bridge's result, cached: what the pin reads */
        if (i == 0 && beside) {
            pin.result = json_deep_copy(prev);
            pinning = pthread_create(&pin_t, NULL, pin_thread, &pin) == 0;
            if (!pinning)
                json_decref(TAKE_PTR(pin.result));
        }
    }
    if (siding) {
        pthread_join(side_t, NULL);
        siding = false;
        steps_mark("network: waited for the portmap plugin");
        steps_beside(steps_current(), &side.steps);
        json_decref(TAKE_PTR(side.conf));
        sl_buf_release(&side.out);
        if (side.rc < 0) {
            *err = side.err;
            if (pinning) {
                pthread_join(pin_t, NULL);
                json_decref(TAKE_PTR(pin.result));
            }
            return attach_failed(cfg, id, host_port, prev, err);
        }
    }
    if (pinning) {
        pthread_join(pin_t, NULL);
        pinning = false;
        json_decref(TAKE_PTR(pin.result));
        steps_mark("network: waited for the pin");
        steps_beside(steps_current(), &pin.steps);
        if (pin.rc < 0) {
            *err = pin.err;
            return attach_failed(cfg, id, host_port, prev, err);
        }
        pinned_ok = true;
    }
    net_result_address(prev, out);
    if (!out->ip[0])
        sl_fail(err, SL_E_INTERNAL, "network_failed", "CNI gave '%s' no address", id);
    if (!out->ip[0])
        return attach_failed(cfg, id, host_port, prev, err);
    if (!pinned_ok) { /* not made beside */
        if (isolate(cfg, prev, err) < 0)
            return attach_failed(cfg, id, host_port, prev, err);
        steps_mark("network: isolate port");
        if (net_pin(cfg, err) < 0)
            return attach_failed(cfg, id, host_port, prev, err);
        steps_mark("network: nft pin");
    }
    return 0;

fail:
    if (siding) { /* what it made goes with the DEL */
        pthread_join(side_t, NULL);
        json_decref(TAKE_PTR(side.conf));
        sl_buf_release(&side.out);
    }
    if (pinning) { /* its pin, if made, goes with the DEL (detach pins again) */
        pthread_join(pin_t, NULL);
        json_decref(TAKE_PTR(pin.result));
    }
    /* Hand DEL what ADD made so far (the cache may be unwritable: a
     * full disk). */
    return attach_failed(cfg, id, host_port, prev, err);
}

int net_prepare(const struct net_config *cfg, const char *id, struct sl_error *err)
{
    (void)cfg;
    cleanup_free char *netns = net_netns_path(id);
    return netns_create(netns, err);
}

bool net_attached(const struct net_config *cfg, const char *id)
{
    cleanup_free char *cache = result_path(cfg, id);
    return pinned(id) || access(cache, F_OK) == 0;
}

static int detach(const struct net_config *cfg, const char *id, unsigned host_port, json_t *known,
                  struct sl_error *err)
{
    cleanup_free char *netns = net_netns_path(id);
    cleanup_free char *legacy = legacy_path(id);
    struct sl_error e = SL_ERROR_INIT;
    int rc = 0;
    /* The plugins enter the namespace the pin holds; a pin whose mount is
     * gone (hidden by another tool's, or a reboot) is a plain file, which
     * they refuse ("unknown FS magic") on every try: it goes first, and DEL
     * then frees what the cache names without entering. */
    const char *ns = is_nsfs(netns) ? netns : is_nsfs(legacy) ? legacy : NULL;
    if (!ns) {
        sl_error_gather(err, &rc, netns_remove(netns, &e), &e);
        sl_error_gather(err, &rc, netns_remove(legacy, &e), &e);
    }
    sl_error_gather(err, &rc, chain_del(cfg, id, ns ? ns : netns, host_port, known, &e), &e);
    sl_error_gather(err, &rc, netns_remove(netns, &e), &e);
    sl_error_gather(err, &rc, netns_remove(legacy, &e), &e);
    sl_error_gather(err, &rc, net_pin(cfg, &e), &e); /* its port's chain goes */
    if (rc < 0)
        sl_error_prefix(err, "detach network of '%s'", id);
    return rc;
}

bool net_address(const struct net_config *cfg, const char *id, char *ip, size_t size)
{
    cleanup_free char *cache = result_path(cfg, id);
    json_error_t jerr;
    struct net_attachment a = { 0 };

    if (!pinned(id))
        return false;
    cleanup_json json_t *result = json_load_file(cache, 0, &jerr);
    if (!result)
        return false;
    net_result_address(result, &a);
    if (!a.ip[0] || strlen(a.ip) >= size)
        return false;
    snprintf(ip, size, "%s", a.ip);
    return true;
}

int net_attach(const struct net_config *cfg, const char *id, unsigned host_port,
               struct net_attachment *out, struct sl_error *err)
{
    pthread_mutex_lock(&net_lock);
    bool first = !net_warm; /* held through the plugins (see net_lock) */
    if (!first)
        pthread_mutex_unlock(&net_lock);
    steps_mark("network: wait for lock");
    int rc = attach(cfg, id, host_port, !first, out, err);
    if (first) {
        net_warm = rc == 0;
        pthread_mutex_unlock(&net_lock);
    }
    return rc;
}

int net_detach(const struct net_config *cfg, const char *id, unsigned host_port,
               struct sl_error *err)
{
    return detach(cfg, id, host_port, NULL, err);
}

int net_pin(const struct net_config *cfg, struct sl_error *err)
{
    pthread_mutex_lock(&net_lock);
    int rc = net_pin_locked(cfg, err);
    pthread_mutex_unlock(&net_lock);
    return rc;
}

int net_pin_recheck(const struct net_config *cfg, struct sl_error *err)
{
    static int64_t checked_ms; /* under net_lock */
    pthread_mutex_lock(&net_lock);
    int rc = 0;
    int64_t now = sl_time_mono_ms();
    if (checked_ms == 0 || now - checked_ms >= NET_RECHECK_MS) {
        rc = net_pin_locked(cfg, err);
        if (rc == 0)
            checked_ms = now;
    }
    pthread_mutex_unlock(&net_lock);
    return rc;
}

int net_adopt(const struct net_config *cfg, const char *id, pid_t pid, struct sl_error *err)
{
    cleanup_free char *pin = net_netns_path(id);
    if (is_nsfs(pin)) /* pinned where it should be: the common case, without the lock */
        return 0;
    pthread_mutex_lock(&net_lock);
    int rc = net_adopt_locked(cfg, id, pid, err);
    pthread_mutex_unlock(&net_lock);
    return rc;
}
