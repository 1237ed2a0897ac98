/* Isolation of instances on a node's bridge (DESIGN.md section 6: instances
 * cannot reach each other or the host's own services), on top of what the
 * CNI plugins set up. Two layers:
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
 *
 * Rules are added idempotently (`iptables -C` first, `-w` for the xtables
 * lock) and kept while the bridge exists; scripts/cleanup-host-net.sh removes
 * them with the bridge. */
#ifndef SL_NODE_FIREWALL_H
#define SL_NODE_FIREWALL_H

#include "../lib/error.h"

#define FIREWALL_FORWARD_CHAIN    "SUANLI-FORWARD"
#define FIREWALL_INPUT_CHAIN      "SUANLI-INPUT"
#define FIREWALL_METADATA_CHAIN   "SUANLI-METADATA"
#define FIREWALL_METADATA_ADDRESS "169.254.169.254"

/* Makes sure the chains, their jumps and bridge's rules exist. */
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

/* Marks host_veth (a port of the instance bridge) isolated. */
int firewall_isolate_port(const char *host_veth, struct sl_error *err);

#endif
