#include "firewall.h"
#include "../lib/buf.h"
#include "../lib/cleanup.h"
#include "../lib/crypto.h"
#include "../lib/subprocess.h"
#include "../lib/xalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define ARGV_MAX 24

/* `iptables -w -t TABLE OP CHAIN RULE...`: returns the exit status (0
 * for -C means the rule exists), or -1 when iptables could not run. */
static int iptables_in(const char *table, const char *op, const char *chain,
                       const char *const *rule, bool check, struct sl_error *err)
{
    const char *argv[ARGV_MAX] = { "iptables", "-w", "-t", table, op, chain };
    size_t n = 6;
    for (size_t i = 0; rule && rule[i] && n < ARGV_MAX - 1; i++)
        argv[n++] = rule[i];
    argv[n] = NULL;
    struct sl_subprocess sp = { .argv = argv };
    return check ? sl_subprocess_run(&sp, err) : sl_subprocess_check(&sp, err);
}

static int ensure_chain(const char *table, const char *chain, struct sl_error *err)
{
    int rc = iptables_in(table, "-L", chain, (const char *const[]){ "-n", NULL }, true, err);
    if (rc <= 0)
        return rc;
    rc = iptables_in(table, "-N", chain, NULL, true, err);
    if (rc <= 0)
        return rc;
    /* another agent made it in the meantime */
    return iptables_in(table, "-L", chain, (const char *const[]){ "-n", NULL }, false, err);
}

/* Appends (or inserts first, when r->first) the rule unless it is there. */
static int ensure_rule(const struct firewall_rule *r, struct sl_error *err)
{
    int rc = iptables_in(r->table, "-C", r->chain, r->words, true, err);
    if (rc <= 0)
        return rc;
    if (!r->first)
        return iptables_in(r->table, "-A", r->chain, r->words, false, err);
    const char *argv[ARGV_MAX] = { "1" };
    size_t n = 1;
    for (size_t i = 0; r->words[i] && n < ARGV_MAX - 1; i++)
        argv[n++] = r->words[i];
    argv[n] = NULL;
    return iptables_in(r->table, "-I", r->chain, argv, false, err);
}

static int ensure_rules(const struct firewall_rule *rules, size_t n, struct sl_error *err)
{
    for (size_t i = 0; i < n; i++) {
        if (ensure_rule(&rules[i], err) < 0)
            return -1;
    }
    return 0;
}

/* No IPv6 on the bridge: the host keeps no link-local address there that
 * an instance could reach a service listening on `::` through. A kernel
 * without IPv6 has no such file, and nothing to turn off. */
static int bridge_ipv6_off(const char *bridge, struct sl_error *err)
{
    cleanup_free char *path = xasprintf("/proc/sys/net/ipv6/conf/%s/disable_ipv6", bridge);
    cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : sl_fail_errno(err, "unable to open '%s'", path);
    if (write(fd, "1", 1) != 1)
        return sl_fail_errno(err, "unable to write '%s'", path);
    return 0;
}

size_t firewall_bridge_rules(const char *bridge,
                             struct firewall_rule out[static FIREWALL_BRIDGE_RULES])
{
    static const char *const nets[] = { FIREWALL_CLOUD_METADATA };
    size_t n = 0;

    /* instance to instance through the gateway */
    out[n++] = (struct firewall_rule){ "filter",
                                       FIREWALL_FORWARD_CHAIN,
                                       false,
                                       { "-i", bridge, "-o", bridge, "-m", "conntrack", "!",
                                         "--ctstate", "DNAT", "-j", "DROP", NULL } };
    for (size_t i = 0; i < sizeof(nets) / sizeof(nets[0]); i++)
        out[n++] = (struct firewall_rule){ "filter",
                                           FIREWALL_FORWARD_CHAIN,
                                           false,
                                           { "-i", bridge, "-d", nets[i], "-j", "DROP", NULL } };
    /* a new connection from an instance to the host */
    out[n++] = (struct firewall_rule){ "filter",
                                       FIREWALL_INPUT_CHAIN,
                                       false,
                                       { "-i", bridge, "-m", "conntrack", "!", "--ctstate",
                                         "RELATED,ESTABLISHED", "-j", "DROP", NULL } };
    /* the jumps last: the chains hold their rules before anything runs them */
    out[n++] = (struct firewall_rule){
        "filter", "CNI-ADMIN", true, { "-j", FIREWALL_FORWARD_CHAIN, NULL }
    };
    out[n++] =
        (struct firewall_rule){ "filter", "INPUT", true, { "-j", FIREWALL_INPUT_CHAIN, NULL } };
    return n;
}

int firewall_ensure(const char *bridge, struct sl_error *err)
{
    struct firewall_rule rules[FIREWALL_BRIDGE_RULES];
    size_t n = firewall_bridge_rules(bridge, rules);

    if (ensure_chain("filter", FIREWALL_FORWARD_CHAIN, err) < 0 ||
        ensure_chain("filter", FIREWALL_INPUT_CHAIN, err) < 0 ||
        ensure_chain("filter", "CNI-ADMIN", err) < 0 || ensure_rules(rules, n, err) < 0 ||
        bridge_ipv6_off(bridge, err) < 0) {
        sl_error_prefix(err, "isolate instances on bridge '%s'", bridge);
        return -1;
    }
    return 0;
}

static bool plain_name(const char *s);

int firewall_isolate_port(const char *host_veth, struct sl_error *err)
{
    /* the port's flag in sysfs (kernels since 4.18): no program to run */
    if (plain_name(host_veth) && strcmp(host_veth, ".") != 0 && strcmp(host_veth, "..") != 0) {
        cleanup_free char *path = xasprintf("/sys/class/net/%s/brport/isolated", host_veth);
        cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, "1", 1) == 1)
                return 0;
            sl_fail_errno(err, "unable to write '%s'", path);
            sl_error_prefix(err, "isolate bridge port '%s'", host_veth);
            return -1;
        }
    }
    const char *argv[] = { "bridge", "link", "set", "dev", host_veth, "isolated", "on", NULL };
    if (sl_run(argv, NULL, err) < 0) {
        sl_error_prefix(err, "isolate bridge port '%s'", host_veth);
        return -1;
    }
    return 0;
}

size_t firewall_metadata_rules(const char *bridge, const char *gateway, unsigned port,
                               struct firewall_metadata_texts *texts,
                               struct firewall_rule out[static FIREWALL_METADATA_RULES])
{
    size_t n = 0;

    snprintf(texts->port, sizeof(texts->port), "%u", port);
    snprintf(texts->to, sizeof(texts->to), "%s:%u", gateway, port);
    out[n++] = (struct firewall_rule){ "nat",
                                       FIREWALL_METADATA_CHAIN,
                                       false,
                                       { "-i", bridge, "-d", FIREWALL_METADATA_ADDRESS "/32", "-p",
                                         "tcp", "--dport", "80", "-j", "DNAT", "--to-destination",
                                         texts->to, NULL } };
    out[n++] = (struct firewall_rule){
        "nat", "PREROUTING", false, { "-j", FIREWALL_METADATA_CHAIN, NULL }
    };
    out[n++] =
        (struct firewall_rule){ "filter",
                                FIREWALL_INPUT_CHAIN,
                                true,
                                { "-i", bridge, "-d", gateway, "-p", "tcp", "--dport", texts->port,
                                  "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdst",
                                  FIREWALL_METADATA_ADDRESS, "-j", "ACCEPT", NULL } };
    return n;
}

int firewall_allow_metadata(const char *bridge, const char *gateway, unsigned port,
                            struct sl_error *err)
{
    struct firewall_metadata_texts texts;
    struct firewall_rule rules[FIREWALL_METADATA_RULES];
    size_t n = firewall_metadata_rules(bridge, gateway, port, &texts, rules);

    if (firewall_ensure(bridge, err) < 0 || ensure_chain("nat", FIREWALL_METADATA_CHAIN, err) < 0 ||
        ensure_rules(rules, n, err) < 0) {
        sl_error_prefix(err, "open the metadata endpoint on bridge '%s'", bridge);
        return -1;
    }
    return 0;
}

/* Names that go into nft's language unquoted (table, chain) or quoted
 * (interface): letters, digits and - _ . only, so nothing can end a
 * string or start a statement. */
static bool plain_name(const char *s)
{
    return *s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
                     strlen(s);
}

static bool plain_mac(const char *s)
{
    if (strlen(s) != 17)
        return false;
    for (size_t i = 0; i < 17; i++) {
        if (i % 3 == 2 ? s[i] != ':' : !strchr("0123456789abcdefABCDEF", s[i]))
            return false;
    }
    return true;
}

static int port_valid(const struct firewall_port *p, struct sl_error *err)
{
    struct in_addr a;
    if (!plain_name(p->id) || !plain_name(p->veth) || !plain_mac(p->mac) ||
        inet_pton(AF_INET, p->ip, &a) != 1)
        return sl_fail(err, SL_E_INVALID, "bad_port",
                       "cannot pin port '%s' of '%s' to MAC '%s' and address '%s': not a plain "
                       "name, MAC or IPv4 address",
                       p->veth, p->id, p->mac, p->ip);
    return 0;
}

/* The table's chains: prerouting sends each instance port's frames to the
 * port's own chain; a frame from any other port (none but instances' are
 * on the bridge) is not this table's business. */
static void pin_body(struct sl_buf *b, const struct firewall_port *ports, size_t n)
{
    sl_buf_adds(b, "\tchain prerouting {\n"
                   "\t\ttype filter hook prerouting priority filter; policy accept;\n"
                   "\t\tiifname vmap {");
    for (size_t i = 0; i < n; i++)
        sl_buf_addf(b, "%s \"%s\" : jump port-%s", i ? "," : "", ports[i].veth, ports[i].id);
    sl_buf_adds(b, " }\n\t}\n");
    for (size_t i = 0; i < n; i++) {
        const struct firewall_port *p = &ports[i];
        sl_buf_addf(b,
                    "\tchain port-%s {\n"
                    "\t\tether saddr != %s counter drop\n"
                    "\t\tether type ip ip saddr %s accept\n"
                    "\t\tether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4"
                    " arp saddr ether %s arp saddr ip %s accept\n"
                    "\t\tcounter drop\n"
                    "\t}\n",
                    p->id, p->mac, p->ip, p->mac, p->ip);
    }
}

char *firewall_pin_script(const char *bridge, const struct firewall_port *ports, size_t n,
                          char marker[static FIREWALL_PIN_MARKER_MAX], struct sl_error *err)
{
    if (!plain_name(bridge)) {
        sl_fail(err, SL_E_INVALID, "invalid_option",
                "bridge name '%s' may only have letters, digits and - _ .", bridge);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (port_valid(&ports[i], err) < 0)
            return NULL;
    }
    cleanup_free char *table = xasprintf(FIREWALL_PIN_TABLE_PREFIX "%s", bridge);
    cleanup_buf struct sl_buf body = SL_BUF_INIT;
    cleanup_buf struct sl_buf script = SL_BUF_INIT;
    pin_body(&body, ports, n);
    char digest[SL_HASH_HEX_MAX];
    sl_sha256_hex(body.data, body.len, digest);
    snprintf(marker, FIREWALL_PIN_MARKER_MAX, "comment \"suanli-node %.16s\"", digest);
    /* one transaction: no moment without the table or with half of it */
    sl_buf_addf(&script, "add table bridge %s\ndelete table bridge %s\n", table, table);
    sl_buf_addf(&script, "table bridge %s {\n\t%s\n%s}\n", table, marker, body.data);
    return sl_buf_detach(&script, NULL);
}

int firewall_pin_ports(const char *bridge, const struct firewall_port *ports, size_t n,
                       enum firewall_pin_change *change, struct sl_error *err)
{
    if (change)
        *change = FIREWALL_PIN_SAME;
    char comment[FIREWALL_PIN_MARKER_MAX];
    cleanup_free char *script = firewall_pin_script(bridge, ports, n, comment, err);
    if (!script)
        return -1;
    cleanup_free char *table = xasprintf(FIREWALL_PIN_TABLE_PREFIX "%s", bridge);
    cleanup_buf struct sl_buf listing = SL_BUF_INIT;

    /* what the kernel has now: absent (status 1) or a table with a digest */
    const char *list[] = { "nft", "list", "table", "bridge", table, NULL };
    struct sl_subprocess lsp = { .argv = list, .out = &listing };
    int rc = sl_subprocess_run(&lsp, err);
    bool present = rc == 0;
    bool same = present && listing.data && strstr(listing.data, comment);
    if (rc < 0) {
        if (strcmp(err->code, "missing_program") == 0)
            sl_fail(err, SL_E_UNAVAILABLE, "missing_program",
                    "the nft command is missing: install the nftables package (scripts/deps.sh "
                    "run)");
    } else if (n == 0 && present) {
        const char *drop[] = { "nft", "delete", "table", "bridge", table, NULL };
        struct sl_subprocess sp = { .argv = drop };
        rc = sl_subprocess_check(&sp, err);
        if (rc == 0 && change)
            *change = FIREWALL_PIN_REMOVED;
    } else if (n > 0 && !same) {
        const char *load[] = { "nft", "-f", "-", NULL };
        cleanup_buf struct sl_buf out = SL_BUF_INIT;
        struct sl_subprocess sp = {
            .argv = load, .input = script, .input_len = strlen(script), .out = &out
        };
        rc = sl_subprocess_check(&sp, err);
        if (rc == 0 && change)
            *change = present ? FIREWALL_PIN_REPLACED : FIREWALL_PIN_CREATED;
    } else {
        rc = 0;
    }
    if (rc < 0) {
        sl_error_prefix(err, "pin the instances' ports on bridge '%s'", bridge);
        return -1;
    }
    return 0;
}
