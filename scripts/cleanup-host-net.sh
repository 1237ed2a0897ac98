#!/bin/sh
# Removes what the CNI plugins leave on a host after its last instance is
# released: the instances' bridge, and the plugins' shared iptables chains
# when they no longer hold any container's rule. Tests call it when done.
#   scripts/cleanup-host-net.sh [BRIDGE]     (default suanli0)
set -u
bridge=${1:-suanli0}
if ip link show "$bridge" >/dev/null 2>&1; then
    if ip link show master "$bridge" 2>/dev/null | grep -q .; then
        echo "cleanup-host-net: $bridge still has ports; left alone" >&2
    else
        ip link del "$bridge"
    fi
fi
# a chain is removable when its only rules are the plugins' own fixed ones
only_fixed() { # TABLE CHAIN PATTERN
    [ "$(iptables -t "$1" -S "$2" 2>/dev/null | grep -v "^-N $2\$" | grep -cv -- "$3")" = 0 ]
}
drop_chain() { # TABLE CHAIN
    iptables -t "$1" -S 2>/dev/null | grep -- "-j $2\$" | sed 's/^-A /-D /' |
        while read -r rule; do eval iptables -t "$1" "$rule"; done
    iptables -t "$1" -F "$2" 2>/dev/null
    iptables -t "$1" -X "$2" 2>/dev/null
}
# the isolation rules of node/firewall.h: the bridge's go with the bridge,
# the chains with their last rule
if ! ip link show "$bridge" >/dev/null 2>&1; then
    for chain in SUANLI-FORWARD SUANLI-INPUT; do
        iptables -w -S "$chain" 2>/dev/null | grep -- "-i $bridge " | sed 's/^-A /-D /' |
            while read -r rule; do eval iptables -w "$rule"; done
    done
fi
for chain in SUANLI-FORWARD SUANLI-INPUT; do
    if iptables -w -S "$chain" >/dev/null 2>&1 && only_fixed filter "$chain" "^$"; then
        drop_chain filter "$chain"
    fi
done
# the bridge's nftables table pinning instance ports (node/firewall.h): the
# agent removes it with the last instance; a killed agent may leave it
if ! ip link show "$bridge" >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; then
    nft delete table bridge "suanli-$bridge" 2>/dev/null
fi
# the metadata endpoint's DNAT (node/firewall.h): likewise
if ! ip link show "$bridge" >/dev/null 2>&1; then
    iptables -w -t nat -S SUANLI-METADATA 2>/dev/null | grep -- "-i $bridge " |
        sed 's/^-A /-D /' | while read -r rule; do eval iptables -w -t nat "$rule"; done
fi
if iptables -w -t nat -S SUANLI-METADATA >/dev/null 2>&1 && only_fixed nat SUANLI-METADATA "^$"; then
    drop_chain nat SUANLI-METADATA
fi
if iptables -S CNI-FORWARD >/dev/null 2>&1 && only_fixed filter CNI-FORWARD "-j CNI-ADMIN" &&
    only_fixed filter CNI-ADMIN "^$"; then
    drop_chain filter CNI-FORWARD
    drop_chain filter CNI-ADMIN
fi
if iptables -t nat -S CNI-HOSTPORT-DNAT >/dev/null 2>&1 &&
    only_fixed nat CNI-HOSTPORT-DNAT "^$"; then
    drop_chain nat CNI-HOSTPORT-DNAT
    drop_chain nat CNI-HOSTPORT-MASQ
    drop_chain nat CNI-HOSTPORT-SETMARK
fi
exit 0
