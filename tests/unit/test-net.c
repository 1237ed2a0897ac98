/* node/net.c without root: the CNI plugin list and each plugin's stdin, what
 * is read back from a CNI result (the address, the port to pin), and the
 * name of the bridge plugin's masquerade chain. net_attach and net_detach
 * themselves need root and the plugins: node-smoke and the integration
 * tests run them. */
#include "harness.h"

#include "../../lib/cleanup.h"
#include "../../lib/json.h"
#include "../../node/net.h"

#include <string.h>

static const struct net_config cfg = { .cni_path = "/usr/lib/cni",
                                       .bridge = "suanlit0",
                                       .subnet = "10.77.0.0/16",
                                       .state_dir = "/var/lib/suanli-node/net" };

/* A bridge plugin's ADD result as CNI 1.0.0 hands it on (portmap and
 * firewall pass it through): the bridge, the host side of the veth, the
 * instance's eth0 in its namespace, and eth0's address. */
static const char bridge_result[] =
    "{\"cniVersion\": \"1.0.0\","
    " \"interfaces\": ["
    "   {\"name\": \"suanlit0\", \"mac\": \"6e:1c:51:4c:65:0b\"},"
    "   {\"name\": \"veth3f6c2a1b\", \"mac\": \"b2:7e:0d:43:19:a4\"},"
    "   {\"name\": \"eth0\", \"mac\": \"0a:58:0a:4d:00:05\","
    "    \"sandbox\": \"/run/netns/suanli-i-0123456789ab\"}],"
    " \"ips\": [{\"interface\": 2, \"address\": \"10.77.0.5/16\", \"gateway\": \"10.77.0.1\"}],"
    " \"routes\": [{\"dst\": \"0.0.0.0/0\"}], \"dns\": {}}";

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j)
        test_fail(__FILE__, __LINE__, "bad JSON in the test: %s", jerr.text);
    return j;
}

static const char *str(json_t *obj, const char *path)
{
    return json_string_value(json_object_get(obj, path));
}

TEST(net_cni_plugins_bridge_portmap_firewall)
{
    cleanup_json json_t *plugins = net_cni_plugins(&cfg, 42022);

    if (!CHECK_EQ_INT(json_array_size(plugins), 3))
        return;
    json_t *bridge = json_array_get(plugins, 0);
    json_t *portmap = json_array_get(plugins, 1);
    json_t *firewall = json_array_get(plugins, 2);

    CHECK_STR(str(bridge, "type"), "bridge");
    CHECK_STR(str(bridge, "bridge"), "suanlit0");
    CHECK(json_is_true(json_object_get(bridge, "isGateway")));
    CHECK(json_is_true(json_object_get(bridge, "ipMasq")));
    CHECK(json_is_true(json_object_get(bridge, "hairpinMode")));
    json_t *ipam = json_object_get(bridge, "ipam");
    CHECK_STR(str(ipam, "type"), "host-local");
    CHECK_STR(str(ipam, "dataDir"), "/var/lib/suanli-node/net/ipam");
    json_t *range = json_array_get(json_array_get(json_object_get(ipam, "ranges"), 0), 0);
    CHECK_STR(str(range, "subnet"), "10.77.0.0/16");
    CHECK_STR(str(json_array_get(json_object_get(ipam, "routes"), 0), "dst"), "0.0.0.0/0");

    CHECK_STR(str(portmap, "type"), "portmap");
    CHECK(json_is_true(json_object_get(json_object_get(portmap, "capabilities"), "portMappings")));
    CHECK(json_is_true(json_object_get(portmap, "snat")));
    json_t *maps = json_object_get(json_object_get(portmap, "runtimeConfig"), "portMappings");
    CHECK_EQ_INT(json_array_size(maps), 1);
    json_t *map = json_array_get(maps, 0);
    CHECK_EQ_INT(json_integer_value(json_object_get(map, "hostPort")), 42022);
    CHECK_EQ_INT(json_integer_value(json_object_get(map, "containerPort")), 22);
    CHECK_STR(str(map, "protocol"), "tcp");

    CHECK_STR(str(firewall, "type"), "firewall");
    CHECK_STR(str(firewall, "backend"), "iptables");
}

TEST(net_cni_conf_adds_version_name_and_prev_result)
{
    cleanup_json json_t *plugins = net_cni_plugins(&cfg, 42022);
    cleanup_json json_t *prev = parse(bridge_result);
    json_t *portmap = json_array_get(plugins, 1);

    cleanup_json json_t *first = net_cni_conf(json_array_get(plugins, 0), NULL);
    CHECK_STR(str(first, "cniVersion"), "1.0.0");
    CHECK_STR(str(first, "name"), "suanli");
    CHECK_STR(str(first, "type"), "bridge");
    CHECK(!json_object_get(first, "prevResult"));

    cleanup_json json_t *next = net_cni_conf(portmap, prev);
    CHECK_STR(str(next, "type"), "portmap");
    CHECK(json_equal(json_object_get(next, "prevResult"), prev));
    /* a copy: the list itself stays as it was for the next plugin */
    CHECK(!json_object_get(portmap, "prevResult"));
    CHECK(!json_object_get(portmap, "cniVersion"));
}

TEST(net_result_address_strips_the_prefix)
{
    cleanup_json json_t *result = parse(bridge_result);
    struct net_attachment a = { 0 };

    net_result_address(result, &a);
    CHECK_STR(a.ip, "10.77.0.5");
    CHECK_STR(a.gateway, "10.77.0.1");

    cleanup_json json_t *none = parse("{\"cniVersion\": \"1.0.0\", \"ips\": []}");
    struct net_attachment empty = { 0 };
    net_result_address(none, &empty);
    CHECK_STR(empty.ip, "");
    CHECK_STR(empty.gateway, "");
}

TEST(net_result_port_from_a_bridge_result)
{
    cleanup_json json_t *result = parse(bridge_result);
    struct firewall_port port;

    if (!CHECK(net_result_port(&cfg, "i-0123456789ab", result, &port)))
        return;
    CHECK_STR(port.id, "i-0123456789ab");
    CHECK_STR(port.veth, "veth3f6c2a1b");     /* not the bridge, not inside */
    CHECK_STR(port.mac, "0a:58:0a:4d:00:05"); /* eth0's, inside */
    CHECK_STR(port.ip, "10.77.0.5");
}

/* IPv6 never counts, and an address on eth0 wins over one elsewhere. */
TEST(net_result_port_picks_the_inside_ipv4)
{
    cleanup_json json_t *result = parse(
        "{\"interfaces\": ["
        "   {\"name\": \"suanlit0\", \"mac\": \"6e:1c:51:4c:65:0b\"},"
        "   {\"name\": \"vethaa\", \"mac\": \"b2:7e:0d:43:19:a4\"},"
        "   {\"name\": \"eth0\", \"mac\": \"0a:58:0a:4d:00:07\", \"sandbox\": \"/run/netns/x\"}],"
        " \"ips\": [{\"interface\": 2, \"address\": \"fd00::7/64\"},"
        "          {\"interface\": 0, \"address\": \"10.77.0.1/16\"},"
        "          {\"interface\": 2, \"address\": \"10.77.0.7/16\"},"
        "          {\"interface\": 0, \"address\": \"10.77.0.9/16\"}]}");
    struct firewall_port port;

    CHECK(net_result_port(&cfg, "i-7", result, &port));
    CHECK_STR(port.ip, "10.77.0.7");
    CHECK_STR(port.veth, "vethaa");
}

/* A result that names no veth, no MAC inside or no IPv4 pins nothing:
 * net_pin then fails the start rather than leave the port open. */
TEST(net_result_port_refuses_what_is_missing)
{
    static const char *const incomplete[] = {
        /* only the bridge and eth0: no host side */
        "{\"interfaces\": [{\"name\": \"suanlit0\"},"
        " {\"name\": \"eth0\", \"mac\": \"0a:58:0a:4d:00:05\", \"sandbox\": \"/x\"}],"
        " \"ips\": [{\"interface\": 1, \"address\": \"10.77.0.5/16\"}]}",
        /* no MAC inside */
        "{\"interfaces\": [{\"name\": \"vethaa\"}, {\"name\": \"eth0\", \"sandbox\": \"/x\"}],"
        " \"ips\": [{\"interface\": 1, \"address\": \"10.77.0.5/16\"}]}",
        /* IPv6 only */
        "{\"interfaces\": [{\"name\": \"vethaa\"},"
        " {\"name\": \"eth0\", \"mac\": \"0a:58:0a:4d:00:05\", \"sandbox\": \"/x\"}],"
        " \"ips\": [{\"interface\": 1, \"address\": \"fd00::5/64\"}]}",
        /* a host-side name longer than an interface name can be */
        "{\"interfaces\": [{\"name\": \"veth0123456789abcdef\"},"
        " {\"name\": \"eth0\", \"mac\": \"0a:58:0a:4d:00:05\", \"sandbox\": \"/x\"}],"
        " \"ips\": [{\"interface\": 1, \"address\": \"10.77.0.5/16\"}]}",
        "{}",
    };
    for (size_t i = 0; i < sizeof(incomplete) / sizeof(incomplete[0]); i++) {
        cleanup_json json_t *result = parse(incomplete[i]);
        struct firewall_port port;
        if (!CHECK(!net_result_port(&cfg, "i-5", result, &port)))
            test_fail(__FILE__, __LINE__, "result %zu was taken", i);
    }
}

/* The name the bridge plugin gives the chain (containernetworking's
 * utils.FormatChainName("suanli", "suanli-i-0123456789ab")), computed
 * independently: "CNI-" + sha512("suanlisuanli-i-0123456789ab")[:24]. */
TEST(net_masq_chain_is_the_bridge_plugins)
{
    char chain[NET_MASQ_CHAIN_MAX];

    net_masq_chain("i-0123456789ab", chain);
    CHECK_STR(chain, "CNI-e3846a88dc304d15080526d8");
    CHECK_EQ_INT(strlen(chain), 28); /* iptables allows 28 */
}

TEST(net_netns_path_is_named_for_the_instance)
{
    cleanup_free char *path = net_netns_path("i-0123456789ab");
    CHECK_STR(path, "/run/suanli-node/netns/suanli-i-0123456789ab");
}
