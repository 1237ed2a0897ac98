/* Instance networking with CNI plugins (DESIGN.md section 6): a named network
 * namespace per instance, a veth on the node's bridge with an address from
 * host-local IPAM, masquerade out, a host TCP port mapped to the instance's
 * port 22 (portmap), and the firewall plugin's forward rules.
 *
 * The plugins are run as the CNI spec says (CNI_COMMAND, CNI_CONTAINERID,
 * CNI_NETNS, CNI_IFNAME, CNI_PATH; the config on stdin, each plugin of the
 * list getting the previous one's result as prevResult). The final ADD result
 * is cached under state_dir so DEL can hand it back. */
#ifndef SL_NODE_NET_H
#define SL_NODE_NET_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "firewall.h"
#include "../lib/error.h"

struct net_config {
    const char *cni_path;  /* plugin directory, e.g. "/usr/lib/cni" */
    const char *bridge;    /* e.g. "suanli0" */
    const char *subnet;    /* the bridge's private subnet, e.g. "10.88.0.0/16" */
    const char *state_dir; /* e.g. DATA/net: IPAM leases and cached results */
};

struct net_attachment {
    char netns[PATH_MAX]; /* /run/suanli-node/netns/suanli-<id> */
    char ip[64];          /* the instance's address on the bridge, no prefix */
    char gateway[64];
};

/* The path of an instance's network namespace pin,
 * /run/suanli-node/netns/suanli-<id>; the caller frees it. */
char *net_netns_path(const char *id);

#define NET_ADOPTED_LEGACY  1 /* net_adopt moved an older agent's pin */
#define NET_ADOPTED_PROCESS 2 /* net_adopt pinned the namespace of pid */

/* Makes sure a running instance's namespace is pinned where this agent
 * keeps pins: from the pin an older agent made in /run/netns, else from
 * its container's process pid (> 0) when the pin is gone (another tool's
 * mount hid it). 0 when it was pinned already or nothing could be found
 * (pid 0, or pid in the host's namespace), NET_ADOPTED_* when it pinned,
 * -1 on failure. */
int net_adopt(const struct net_config *cfg, const char *id, pid_t pid, struct sl_error *err);

/* Creates the instance's network namespace, pinned at net_netns_path(id),
 * with its loopback up, if missing: what a container created before
 * net_attach ends (instance.c) joins. */
int net_prepare(const struct net_config *cfg, const char *id, struct sl_error *err);

/* Creates the instance's network namespace (if missing), brings up its
 * loopback, and runs the bridge, portmap and firewall plugins, mapping
 * host_port (TCP, all host addresses including 127.0.0.1) to port 22 inside.
 * Fills out. On failure everything it did is undone. */
int net_attach(const struct net_config *cfg, const char *id, unsigned host_port,
               struct net_attachment *out, struct sl_error *err);

/* Whether anything of an attachment is left: the network namespace or the
 * cached ADD result (whose address lease and rules DEL frees). A container
 * that died without net_detach (a crash, a host reboot: the namespace is
 * gone but the cache, the lease and the rules stay) must be detached before
 * it is attached again, or host-local refuses a second address. */
bool net_attached(const struct net_config *cfg, const char *id);

/* Runs DEL through the plugin list in reverse (freeing the address, the port
 * map and the firewall and masquerade rules) and removes the namespace. Safe
 * to call on a half-attached or already detached instance. */
int net_detach(const struct net_config *cfg, const char *id, unsigned host_port,
               struct sl_error *err);

/* Pins every attached instance's bridge port to the instance's MAC and
 * IPv4 address (firewall_pin_ports), from the cached ADD results of the
 * instances whose namespace exists: run by net_attach before it returns (so
 * before any process of the instance runs), by net_detach, and by the
 * agent's every pass (level-triggered: after an agent restart the table is
 * found as it should be; after a host reboot or a flushed ruleset it is
 * made again). */
int net_pin(const struct net_config *cfg, struct sl_error *err);

/* net_pin for the agent's loop, at most once per NET_RECHECK_MS (a pass
 * comes every 200 ms and at every change, and each check runs nft): an
 * attach and a detach pin at once themselves; a table removed behind the
 * agent's back is back within that time. */
#define NET_RECHECK_MS 1000
int net_pin_recheck(const struct net_config *cfg, struct sl_error *err);

/* The address of an attached instance (its namespace exists) from the
 * cached ADD result, into ip (size bytes); false when there is none. Reads
 * one small file: cheap enough for every pass of the agent. */
bool net_address(const struct net_config *cfg, const char *id, char *ip, size_t size);

/* The pure parts of the above, for tests. */

/* The plugin list an instance's eth0 is added with, in order: bridge (the
 * gateway, masquerade, host-local addresses from subnet kept under
 * state_dir/ipam), portmap (host_port, TCP, to port 22 inside; snat) and
 * firewall (iptables). A new reference. */
json_t *net_cni_plugins(const struct net_config *cfg, unsigned host_port);

/* What one plugin of the list reads on stdin: plugin with the CNI version,
 * the network's name and, when prev is not NULL, prev as prevResult. A new
 * reference. */
json_t *net_cni_conf(json_t *plugin, json_t *prev);

/* The address (without its prefix) and gateway of a CNI result's first IP
 * into out->ip and out->gateway; each is left as it was when missing. */
void net_result_address(json_t *result, struct net_attachment *out);

/* The instance's port from its ADD result: the host-side veth (outside any
 * sandbox, not the bridge), the MAC of the interface inside, and the IPv4
 * address on that interface (else the first IPv4). False when one is
 * missing. */
bool net_result_port(const struct net_config *cfg, const char *id, json_t *result,
                     struct firewall_port *port);

/* The name of the bridge plugin's masquerade chain of an instance (its
 * utils.FormatChainName: "CNI-" and the first 24 hex digits of
 * SHA-512(network name + container id)), which DEL cannot find without the
 * namespace. */
#define NET_MASQ_CHAIN_MAX 29
void net_masq_chain(const char *id, char chain[static NET_MASQ_CHAIN_MAX]);

#endif
