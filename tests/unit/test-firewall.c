/* node/firewall.c's pinning of bridge ports, against the real nft (root):
 * the table holds one chain per port with its MAC and address, a second
 * call with the same ports changes nothing, a changed set replaces the
 * table, no ports removes it, and names that could inject nft syntax are
 * refused before nft runs. The bridge need not exist: a table only names
 * interfaces. Not root: the first test says so and checks nothing. */
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
