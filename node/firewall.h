/* Isolation of instances on a node's bridge (DESIGN.md section 6: instances
 * cannot reach each other or the host's own services), on top of what the
 * CNI plugins set up. Three layers:
 *
 *  - L2: every instance's host-side veth is an "isolated" bridge port, so
 *    frames between two instances (ARP included) are never forwarded; the
 *    bridge itself (the gateway) still reaches and is reached by all.
 *  - L3, in two iptables chains of the filter table, one rule per bridge:
 *      SUANLI-FORWARD (jumped to from the CNI firewall plugin's CNI-ADMIN,
 *      which CNI-FORWARD runs before any per-container ACCEPT):
 *        -i BR -o BR -m conntrack ! --ctstate DNAT -j DROP
 *      (instance to instance through the gateway; a published port reached
 *      through the host's address stays open, as it is to anyone)
 *      SUANLI-INPUT (jumped to from the top of INPUT):
 *        -i BR -m conntrack ! --ctstate RELATED,ESTABLISHED -j DROP
 *      (no new connection from an instance to any address of the host:
 *      suanlid, the agent, sshd of the host; replies to connections the host
 *      opened, such as SSH through the mapped port, still pass).
 *      And in SUANLI-FORWARD, -i BR -d NET -j DROP for each of
 *      FIREWALL_CLOUD_METADATA: no instance reaches a cloud provider's
 *      metadata service through the host's routes (suanli's own
 *      169.254.169.254:80 is DNATed to the host, so it is INPUT, not
 *      FORWARD, and passes; see firewall_allow_metadata).
 *  - L2 pinning, in nftables' bridge family (firewall_pin_ports): a frame
 *    from an instance's veth must carry the instance's MAC; of what it
 *    carries, only IPv4 from the instance's address and ARP whose sender is
 *    the instance's MAC and address pass. Everything else (another source,
 *    IPv6, VLAN tags, other protocols) is dropped before the bridge sees it,
 *    so root in an instance cannot impersonate a neighbour with raw sockets
 *    (CAP_NET_RAW stays: ping, traceroute, tcpdump). IPv6 is off on the
 *    bridge as well (and inside, node/oci.c).
 *
 * iptables rules are added idempotently (`iptables -C` first, `-w` for the
 * xtables lock) and kept while the bridge exists; scripts/cleanup-host-net.sh
 * removes them with the bridge. The bridge table is rebuilt whole, in one
 * nft transaction, whenever the set of ports changes. */
#ifndef SL_NODE_FIREWALL_H
#define SL_NODE_FIREWALL_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#include "../lib/error.h"
#include "../lib/id.h"

#define FIREWALL_FORWARD_CHAIN    "SUANLI-FORWARD"
#define FIREWALL_INPUT_CHAIN      "SUANLI-INPUT"
#define FIREWALL_METADATA_CHAIN   "SUANLI-METADATA"
#define FIREWALL_METADATA_ADDRESS "169.254.169.254"

/* Other providers' metadata and host services, never reached from an
 * instance: link-local (AWS, GCP, Azure, Tencent's 169.254.0.23, ECS's
 * 169.254.170.2, ...), Alibaba's 100.100.100.200, Azure's wire server
 * 168.63.129.16 and Oracle's 192.0.0.192 (AWS's fd00:ec2::254 is IPv6:
 * no IPv6 leaves an instance at all). */
#define FIREWALL_CLOUD_METADATA                                                                    \
    "169.254.0.0/16", "100.100.100.200/32", "168.63.129.16/32", "192.0.0.192/32"

/* One iptables rule: its table ("filter" or "nat"), chain and words (NULL
 * after the last); first: inserted at the top of the chain, else appended. */
#define FIREWALL_RULE_WORDS 20
struct firewall_rule {
    const char *table;
    const char *chain;
    bool first;
    const char *words[FIREWALL_RULE_WORDS];
};

#define FIREWALL_CLOUD_METADATA_COUNT                                                              \
    (sizeof((const char *[]){ FIREWALL_CLOUD_METADATA }) / sizeof(const char *))
#define FIREWALL_BRIDGE_RULES (4 + FIREWALL_CLOUD_METADATA_COUNT)

/* The rules firewall_ensure makes sure of for bridge, in the order it adds
 * them (the jumps to the SUANLI chains last); returns how many. The words
 * point to bridge and to constants. */
size_t firewall_bridge_rules(const char *bridge,
                             struct firewall_rule out[static FIREWALL_BRIDGE_RULES]);

/* Makes sure the chains, their jumps and bridge's rules exist, and that
 * IPv6 is off on the bridge (net.ipv6.conf.BR.disable_ipv6 = 1: the host
 * has no address there an instance could talk to). */
int firewall_ensure(const char *bridge, struct sl_error *err);

/* The metadata endpoint (node/metadata.h): in the nat table, chain
 * SUANLI-METADATA (jumped to from PREROUTING)
 *   -i BR -d 169.254.169.254/32 -p tcp --dport 80 -j DNAT --to GATEWAY:PORT
 * and, first in SUANLI-INPUT, the one exception to "no connection from an
 * instance to the host":
 *   -i BR -d GATEWAY -p tcp --dport PORT -m conntrack --ctstate DNAT
 *     --ctorigdst 169.254.169.254 -j ACCEPT
 * so only connections made to 169.254.169.254:80 on this bridge reach the
 * agent's port (not the gateway's port itself, nor other bridges').
 * Idempotent; removed with the bridge by scripts/cleanup-host-net.sh. */
int firewall_allow_metadata(const char *bridge, const char *gateway, unsigned port,
                            struct sl_error *err);

/* The words of firewall_allow_metadata's rules that are made up. */
struct firewall_metadata_texts {
    char port[16]; /* PORT */
    char to[80];   /* GATEWAY:PORT */
};

#define FIREWALL_METADATA_RULES 3

/* The rules firewall_allow_metadata makes sure of (after firewall_ensure's),
 * in order: the DNAT, the jump to it from PREROUTING, the ACCEPT first in
 * SUANLI-INPUT; returns how many. The words point to bridge, gateway,
 * texts (filled here) and constants. */
size_t firewall_metadata_rules(const char *bridge, const char *gateway, unsigned port,
                               struct firewall_metadata_texts *texts,
                               struct firewall_rule out[static FIREWALL_METADATA_RULES]);

/* Marks host_veth (a port of the instance bridge) isolated. */
int firewall_isolate_port(const char *host_veth, struct sl_error *err);

/* The bridge-family nftables table of a bridge: "suanli-<bridge>". */
#define FIREWALL_PIN_TABLE_PREFIX "suanli-"

/* One instance's port on the bridge and the addresses it is pinned to. */
struct firewall_port {
    char id[SL_ID_MAX];       /* instance id: its chain is "port-<id>" */
    char veth[IF_NAMESIZE];   /* the host side of its veth pair */
    char mac[18];             /* its eth0's MAC, aa:bb:cc:dd:ee:ff */
    char ip[INET_ADDRSTRLEN]; /* its IPv4 address */
};

/* What firewall_pin_ports found and did. */
enum firewall_pin_change {
    FIREWALL_PIN_SAME,     /* the table was as wanted (or absent, and none wanted) */
    FIREWALL_PIN_CREATED,  /* there was none: made (first port, a reboot, a flush) */
    FIREWALL_PIN_REPLACED, /* another set of ports: replaced */
    FIREWALL_PIN_REMOVED,  /* no ports left: removed */
};

/* Makes the table `bridge suanli-<bridge>` pin exactly these ports (n may
 * be 0: the table is removed). Level-triggered and cheap when nothing
 * changed: one `nft list table`, whose comment carries a digest of the
 * wanted table; otherwise the table is replaced in one transaction. A port
 * whose fields are not plain names and addresses is SL_E_INVALID; a missing
 * nft is SL_E_UNAVAILABLE. change (may be NULL) says what it did. */
int firewall_pin_ports(const char *bridge, const struct firewall_port *ports, size_t n,
                       enum firewall_pin_change *change, struct sl_error *err);

#define FIREWALL_PIN_MARKER_MAX 64

/* The nft script firewall_pin_ports loads: the table replaced whole in one
 * transaction (add, delete, then the table with one chain per port). marker
 * gets the table's comment line, which carries a digest of the chains and
 * which `nft list table` shows as written. NULL (SL_E_INVALID) when bridge
 * or a port is not plain names and addresses; the caller frees the text. */
char *firewall_pin_script(const char *bridge, const struct firewall_port *ports, size_t n,
                          char marker[static FIREWALL_PIN_MARKER_MAX], struct sl_error *err);

#endif
