/* node/firewall.c. Without root: the iptables rules of a bridge and of the
 * metadata endpoint, word for word, and the nft script that pins ports.
 * Against the real nft (root): the table holds one chain per port with its
 * MAC and address, a second call with the same ports changes nothing, a
 * changed set replaces the table, no ports removes it, and names that could
 * inject nft syntax are refused before nft runs. The bridge need not exist:
 * a table only names interfaces. Not root: the nft test says so and checks
 * nothing. */
#include "harness.h"

#include "../../node/firewall.h"
#include "../../lib/buf.h"
#include "../../lib/cleanup.h"
#include "../../lib/subprocess.h"
#include "../../lib/xalloc.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char bridge[IF_NAMESIZE];

static const char *test_bridge(void)
{
    snprintf(bridge, sizeof(bridge), "slft%d", (int)getpid() % 100000);
    return bridge;
}

/* `nft list table bridge suanli-BR`, or NULL when absent; caller frees. */
static char *listing(const char *br)
{
    cleanup_free char *table = xasprintf(FIREWALL_PIN_TABLE_PREFIX "%s", br);
    const char *argv[] = { "nft", "list", "table", "bridge", table, NULL };
    struct sl_buf out;
    sl_buf_init(&out);
    struct sl_error err = SL_ERROR_INIT;
    if (sl_run(argv, &out, &err) < 0) {
        sl_buf_release(&out);
        return NULL;
    }
    return sl_buf_detach(&out, NULL);
}

static const struct firewall_port two[] = {
    { .id = "i-aaaa", .veth = "vethaaaa", .mac = "0a:58:0a:52:00:02", .ip = "10.82.0.2" },
    { .id = "i-bbbb", .veth = "vethbbbb", .mac = "0a:58:0a:52:00:03", .ip = "10.82.0.3" },
};

TEST(firewall_pins_ports_and_converges)
{
    const char *br = test_bridge();
    struct sl_error err = SL_ERROR_INIT;
    enum firewall_pin_change changed = FIREWALL_PIN_SAME;

    if (geteuid() != 0) {
        fprintf(stderr, "firewall_pins_ports_and_converges: not root, nft not tried\n");
        return;
    }

    if (!CHECK_EQ_INT(firewall_pin_ports(br, two, 2, &changed, &err), 0)) {
        fprintf(stderr, "%s\n", err.message);
        return;
    }
    CHECK_EQ_INT(changed, FIREWALL_PIN_CREATED);
    cleanup_free char *text = listing(br);
    CHECK_CONTAINS(text, "hook prerouting");
    CHECK_CONTAINS(text, "\"vethaaaa\" : jump port-i-aaaa");
    CHECK_CONTAINS(text, "chain port-i-bbbb");
    CHECK_CONTAINS(text, "ether saddr != 0a:58:0a:52:00:03");
    CHECK_CONTAINS(text, "ip saddr 10.82.0.3 accept");
    CHECK_CONTAINS(text, "arp saddr ether 0a:58:0a:52:00:02 arp saddr ip 10.82.0.2 accept");

    /* the same ports again: nothing written */
    CHECK_EQ_INT(firewall_pin_ports(br, two, 2, &changed, &err), 0);
    CHECK_EQ_INT(changed, FIREWALL_PIN_SAME);

    /* one released: its chain goes, in the same transaction */
    CHECK_EQ_INT(firewall_pin_ports(br, two + 1, 1, &changed, &err), 0);
    CHECK_EQ_INT(changed, FIREWALL_PIN_REPLACED);
    cleanup_free char *one = listing(br);
    CHECK(one && !strstr(one, "i-aaaa"));
    CHECK_CONTAINS(one, "chain port-i-bbbb");

    /* flushed behind its back (a reboot, `nft flush ruleset`): made again */
    cleanup_free char *table = xasprintf(FIREWALL_PIN_TABLE_PREFIX "%s", br);
    const char *drop[] = { "nft", "delete", "table", "bridge", table, NULL };
    CHECK_EQ_INT(sl_run(drop, NULL, &err), 0);
    CHECK_EQ_INT(firewall_pin_ports(br, two + 1, 1, &changed, &err), 0);
    CHECK_EQ_INT(changed, FIREWALL_PIN_CREATED);

    /* none left: no table */
    CHECK_EQ_INT(firewall_pin_ports(br, NULL, 0, &changed, &err), 0);
    CHECK_EQ_INT(changed, FIREWALL_PIN_REMOVED);
    cleanup_free char *gone = listing(br);
    CHECK(gone == NULL);
    CHECK_EQ_INT(firewall_pin_ports(br, NULL, 0, &changed, &err), 0);
    CHECK_EQ_INT(changed, FIREWALL_PIN_SAME);
}

TEST(firewall_refuses_what_is_not_a_plain_name_or_address)
{
    const char *br = test_bridge();
    static const struct firewall_port bad[] = {
        { .id = "i-x", .veth = "veth\" : accept", .mac = "0a:58:0a:52:00:02", .ip = "10.0.0.2" },
        { .id = "i-x }", .veth = "vethx", .mac = "0a:58:0a:52:00:02", .ip = "10.0.0.2" },
        { .id = "i-x", .veth = "vethx", .mac = "0a:58:0a:52:00:0g", .ip = "10.0.0.2" },
        { .id = "i-x", .veth = "vethx", .mac = "0a:58:0a:52:00:02", .ip = "10.0.0.2/0" },
        { .id = "i-x", .veth = "vethx", .mac = "0a:58:0a:52:00:02", .ip = "fd00::2" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct sl_error err = SL_ERROR_INIT;
        CHECK_EQ_INT(firewall_pin_ports(br, &bad[i], 1, NULL, &err), -1);
        CHECK_STR(err.code, "bad_port");
    }
    struct sl_error err = SL_ERROR_INIT;
    CHECK_EQ_INT(firewall_pin_ports("br; flush ruleset", two, 1, NULL, &err), -1);
    CHECK_STR(err.code, "invalid_option");
    cleanup_free char *none = listing(br);
    CHECK(none == NULL);
}

/* "-t TABLE -A|-I CHAIN WORDS...", as iptables -S would show the rule */
static char *rule_text(const struct firewall_rule *r)
{
    struct sl_buf b;
    sl_buf_init(&b);
    sl_buf_addf(&b, "-t %s %s %s", r->table, r->first ? "-I" : "-A", r->chain);
    for (size_t i = 0; r->words[i]; i++)
        sl_buf_addf(&b, " %s", r->words[i]);
    return sl_buf_detach(&b, NULL);
}

TEST(firewall_bridge_rules_word_for_word)
{
    static const char *const want[] = {
        "-t filter -A SUANLI-FORWARD -i br7 -o br7 -m conntrack ! --ctstate DNAT -j DROP",
        "-t filter -A SUANLI-FORWARD -i br7 -d 169.254.0.0/16 -j DROP",
        "-t filter -A SUANLI-FORWARD -i br7 -d 100.100.100.200/32 -j DROP",
        "-t filter -A SUANLI-FORWARD -i br7 -d 168.63.129.16/32 -j DROP",
        "-t filter -A SUANLI-FORWARD -i br7 -d 192.0.0.192/32 -j DROP",
        "-t filter -A SUANLI-INPUT -i br7 -m conntrack ! --ctstate RELATED,ESTABLISHED -j DROP",
        "-t filter -I CNI-ADMIN -j SUANLI-FORWARD",
        "-t filter -I INPUT -j SUANLI-INPUT",
    };
    struct firewall_rule rules[FIREWALL_BRIDGE_RULES];
    size_t n = firewall_bridge_rules("br7", rules);

    if (!CHECK_EQ_INT(n, sizeof(want) / sizeof(want[0])))
        return;
    for (size_t i = 0; i < n; i++) {
        cleanup_free char *text = rule_text(&rules[i]);
        CHECK_STR(text, want[i]);
    }
}

TEST(firewall_metadata_rules_word_for_word)
{
    static const char *const want[] = {
        "-t nat -A SUANLI-METADATA -i br7 -d 169.254.169.254/32 -p tcp --dport 80 -j DNAT "
        "--to-destination 10.77.0.1:8775",
        "-t nat -A PREROUTING -j SUANLI-METADATA",
        "-t filter -I SUANLI-INPUT -i br7 -d 10.77.0.1 -p tcp --dport 8775 -m conntrack "
        "--ctstate DNAT --ctorigdst 169.254.169.254 -j ACCEPT",
    };
    struct firewall_metadata_texts texts;
    struct firewall_rule rules[FIREWALL_METADATA_RULES];
    size_t n = firewall_metadata_rules("br7", "10.77.0.1", 8775, &texts, rules);

    if (!CHECK_EQ_INT(n, sizeof(want) / sizeof(want[0])))
        return;
    for (size_t i = 0; i < n; i++) {
        cleanup_free char *text = rule_text(&rules[i]);
        CHECK_STR(text, want[i]);
    }
}

TEST(firewall_pin_script_text)
{
    struct sl_error err = SL_ERROR_INIT;
    char marker[FIREWALL_PIN_MARKER_MAX];
    cleanup_free char *script = firewall_pin_script("br7", two, 1, marker, &err);

    if (!CHECK(script))
        return;
    CHECK_PREFIX(marker, "comment \"suanli-node ");
    CHECK_EQ_INT(strlen(marker), strlen("comment \"suanli-node \"") + 16);
    cleanup_free char *want = xasprintf(
        "add table bridge suanli-br7\n"
        "delete table bridge suanli-br7\n"
        "table bridge suanli-br7 {\n"
        "\t%s\n"
        "\tchain prerouting {\n"
        "\t\ttype filter hook prerouting priority filter; policy accept;\n"
        "\t\tiifname vmap { \"vethaaaa\" : jump port-i-aaaa }\n"
        "\t}\n"
        "\tchain port-i-aaaa {\n"
        "\t\tether saddr != 0a:58:0a:52:00:02 counter drop\n"
        "\t\tether type ip ip saddr 10.82.0.2 accept\n"
        "\t\tether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp saddr ether "
        "0a:58:0a:52:00:02 arp saddr ip 10.82.0.2 accept\n"
        "\t\tcounter drop\n"
        "\t}\n"
        "}\n",
        marker);
    CHECK_STR(script, want);

    /* the marker follows the chains: the same ports give the same one,
     * another port another (and so a reload) */
    char again[FIREWALL_PIN_MARKER_MAX], other[FIREWALL_PIN_MARKER_MAX];
    cleanup_free char *s2 = firewall_pin_script("br7", two, 1, again, &err);
    cleanup_free char *s3 = firewall_pin_script("br7", two, 2, other, &err);
    CHECK_STR(again, marker);
    CHECK_STR(s2, script);
    CHECK(strcmp(other, marker) != 0);
    CHECK_CONTAINS(s3, "\"vethaaaa\" : jump port-i-aaaa, \"vethbbbb\" : jump port-i-bbbb }");

    /* refused before anything is written */
    CHECK(!firewall_pin_script("br7 }", two, 1, marker, &err));
    CHECK_STR(err.code, "invalid_option");
    struct firewall_port bad = two[0];
    snprintf(bad.ip, sizeof(bad.ip), "%s", "10.82.0.2 drop");
    CHECK(!firewall_pin_script("br7", &bad, 1, marker, &err));
    CHECK_STR(err.code, "bad_port");
}
