#include "firewall.h"
#include "../lib/buf.h"
#include "../lib/subprocess.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

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

static int iptables(const char *op, const char *chain, const char *const *rule, bool check,
                    struct sl_error *err)
{
    return iptables_in("filter", op, chain, rule, check, err);
}

static int ensure_chain(const char *chain, struct sl_error *err)
{
    int rc = iptables("-L", chain, (const char *const[]){ "-n", NULL }, true, err);
    if (rc <= 0)
        return rc;
    rc = iptables("-N", chain, NULL, true, err);
    if (rc <= 0)
        return rc;
    /* another agent made it in the meantime */
    return iptables("-L", chain, (const char *const[]){ "-n", NULL }, false, err);
}

/* Appends (or inserts first, when first) rule to chain unless it is there. */
static int ensure_rule(const char *chain, const char *const *rule, bool first, struct sl_error *err)
{
    int rc = iptables("-C", chain, rule, true, err);
    if (rc <= 0)
        return rc;
    if (!first)
        return iptables("-A", chain, rule, false, err);
    const char *argv[ARGV_MAX] = { "1" };
    size_t n = 1;
    for (size_t i = 0; rule[i] && n < ARGV_MAX - 1; i++)
        argv[n++] = rule[i];
    argv[n] = NULL;
    return iptables("-I", chain, argv, false, err);
}

int firewall_ensure(const char *bridge, struct sl_error *err)
{
    const char *const forward_jump[] = { "-j", FIREWALL_FORWARD_CHAIN, NULL };
    const char *const input_jump[] = { "-j", FIREWALL_INPUT_CHAIN, NULL };
    const char *const between_instances[] = { "-i",   bridge,      "-o",   bridge,
                                              "-m",   "conntrack", "!",    "--ctstate",
                                              "DNAT", "-j",        "DROP", NULL };
    const char *const to_host[] = {
        "-i", bridge, "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED", "-j", "DROP", NULL
    };

    if (ensure_chain(FIREWALL_FORWARD_CHAIN, err) < 0 ||
        ensure_chain(FIREWALL_INPUT_CHAIN, err) < 0 ||
        ensure_rule(FIREWALL_FORWARD_CHAIN, between_instances, false, err) < 0 ||
        ensure_rule(FIREWALL_INPUT_CHAIN, to_host, false, err) < 0 ||
        ensure_chain("CNI-ADMIN", err) < 0 ||
        ensure_rule("CNI-ADMIN", forward_jump, true, err) < 0 ||
        ensure_rule("INPUT", input_jump, true, err) < 0) {
        sl_error_prefix(err, "isolate instances on bridge '%s'", bridge);
        return -1;
    }
    return 0;
}

int firewall_isolate_port(const char *host_veth, struct sl_error *err)
{
    const char *argv[] = { "bridge", "link", "set", "dev", host_veth, "isolated", "on", NULL };
    if (sl_run(argv, NULL, err) < 0) {
        sl_error_prefix(err, "isolate bridge port '%s'", host_veth);
        return -1;
    }
    return 0;
}

/* The nat table's counterparts of ensure_chain and ensure_rule. */
static int ensure_nat_chain(const char *chain, struct sl_error *err)
{
    int rc = iptables_in("nat", "-L", chain, (const char *const[]){ "-n", NULL }, true, err);
    if (rc <= 0)
        return rc;
    rc = iptables_in("nat", "-N", chain, NULL, true, err);
    if (rc <= 0)
        return rc;
    return iptables_in("nat", "-L", chain, (const char *const[]){ "-n", NULL }, false, err);
}

static int ensure_nat_rule(const char *chain, const char *const *rule, struct sl_error *err)
{
    int rc = iptables_in("nat", "-C", chain, rule, true, err);
    if (rc <= 0)
        return rc;
    return iptables_in("nat", "-A", chain, rule, false, err);
}

int firewall_allow_metadata(const char *bridge, const char *gateway, unsigned port,
                            struct sl_error *err)
{
    char port_text[16], to[80];
    snprintf(port_text, sizeof(port_text), "%u", port);
    snprintf(to, sizeof(to), "%s:%u", gateway, port);
    const char *const nat_jump[] = { "-j", FIREWALL_METADATA_CHAIN, NULL };
    const char *const dnat[] = { "-i",
                                 bridge,
                                 "-d",
                                 FIREWALL_METADATA_ADDRESS "/32",
                                 "-p",
                                 "tcp",
                                 "--dport",
                                 "80",
                                 "-j",
                                 "DNAT",
                                 "--to-destination",
                                 to,
                                 NULL };
    const char *const accept[] = { "-i",          bridge,
                                   "-d",          gateway,
                                   "-p",          "tcp",
                                   "--dport",     port_text,
                                   "-m",          "conntrack",
                                   "--ctstate",   "DNAT",
                                   "--ctorigdst", FIREWALL_METADATA_ADDRESS,
                                   "-j",          "ACCEPT",
                                   NULL };

    if (firewall_ensure(bridge, err) < 0 || ensure_nat_chain(FIREWALL_METADATA_CHAIN, err) < 0 ||
        ensure_nat_rule(FIREWALL_METADATA_CHAIN, dnat, err) < 0 ||
        ensure_nat_rule("PREROUTING", nat_jump, err) < 0 ||
        ensure_rule(FIREWALL_INPUT_CHAIN, accept, true, err) < 0) {
        sl_error_prefix(err, "open the metadata endpoint on bridge '%s'", bridge);
        return -1;
    }
    return 0;
}
