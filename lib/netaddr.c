#include "netaddr.h"
#include "cleanup.h"
#include "xalloc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* family and 16 address bytes of sa; IPv4-mapped IPv6 becomes IPv4 */
static bool sockaddr_bytes(const struct sockaddr *sa, int *family, unsigned char addr[16])
{
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

    memset(addr, 0, 16);
    if (!sa)
        return false;
    if (sa->sa_family == AF_INET) {
        *family = AF_INET;
        memcpy(addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family != AF_INET6)
        return false;
    const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    if (memcmp(b, mapped, sizeof(mapped)) == 0) {
        *family = AF_INET;
        memcpy(addr, b + 12, 4);
    } else {
        *family = AF_INET6;
        memcpy(addr, b, 16);
    }
    return true;
}

static bool text_bytes(const char *text, int *family, unsigned char addr[16])
{
    struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };
    struct sockaddr_in in4 = { .sin_family = AF_INET };

    if (inet_pton(AF_INET, text, &in4.sin_addr) == 1)
        return sockaddr_bytes((struct sockaddr *)&in4, family, addr);
    if (inet_pton(AF_INET6, text, &in6.sin6_addr) == 1)
        return sockaddr_bytes((struct sockaddr *)&in6, family, addr);
    return false;
}

static bool net_has(const struct sl_net *net, int family, const unsigned char addr[16])
{
    if (net->family != family)
        return false;
    unsigned full = net->prefix / 8, rest = net->prefix % 8;
    if (memcmp(net->addr, addr, full) != 0)
        return false;
    if (rest == 0)
        return true;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (net->addr[full] & mask) == (addr[full] & mask);
}

static int parse_net(const char *entry, struct sl_net *net, struct sl_error *err)
{
    char text[SL_ADDR_TEXT_MAX];
    const char *slash = strchr(entry, '/');
    size_t len = slash ? (size_t)(slash - entry) : strlen(entry);

    if (len >= sizeof(text))
        goto bad;
    memcpy(text, entry, len);
    text[len] = '\0';
    if (!text_bytes(text, &net->family, net->addr))
        goto bad;
    unsigned max = net->family == AF_INET ? 32 : 128;
    net->prefix = max;
    if (slash) {
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || bits < 0 || bits > (long)max)
            goto bad;
        net->prefix = (unsigned)bits;
    }
    return 0;
bad:
    return sl_fail(err, SL_E_INVALID, "invalid_network",
                   "'%s' is not an address or network: write 192.0.2.1, 10.0.0.0/8 or "
                   "2001:db8::/32",
                   entry);
}

int sl_net_list_parse(const char *text, struct sl_net_list *out, struct sl_error *err)
{
    cleanup_free char *copy = xstrdup(text ? text : "");
    struct sl_net_list list = { 0 };
    char *save = NULL;

    for (char *tok = strtok_r(copy, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        list.items = xrealloc(list.items, (list.n + 1) * sizeof(*list.items));
        if (parse_net(tok, &list.items[list.n], err) < 0) {
            free(list.items);
            return -1;
        }
        list.n++;
    }
    *out = list;
    return 0;
}

void sl_net_list_release(struct sl_net_list *list)
{
    free(list->items);
    list->items = NULL;
    list->n = 0;
}

bool sl_net_list_has(const struct sl_net_list *list, const struct sockaddr *sa)
{
    unsigned char addr[16];
    int family;

    if (!list || !sockaddr_bytes(sa, &family, addr))
        return false;
    for (size_t i = 0; i < list->n; i++)
        if (net_has(&list->items[i], family, addr))
            return true;
    return false;
}

bool sl_net_list_has_text(const struct sl_net_list *list, const char *text)
{
    unsigned char addr[16];
    int family;

    if (!list || !text || !text_bytes(text, &family, addr))
        return false;
    for (size_t i = 0; i < list->n; i++)
        if (net_has(&list->items[i], family, addr))
            return true;
    return false;
}

static void format_bytes(int family, const unsigned char addr[16], char *out)
{
    if (!inet_ntop(family, addr, out, SL_ADDR_TEXT_MAX))
        snprintf(out, SL_ADDR_TEXT_MAX, "unknown");
}

void sl_addr_format(const struct sockaddr *sa, char *out)
{
    unsigned char addr[16];
    int family;

    if (!sockaddr_bytes(sa, &family, addr)) {
        snprintf(out, SL_ADDR_TEXT_MAX, "unknown");
        return;
    }
    format_bytes(family, addr, out);
}

bool sl_addr_valid(const char *text)
{
    unsigned char addr[16];
    int family;

    return text && text_bytes(text, &family, addr);
}

void sl_addr_limit_key(const char *text, char *out)
{
    unsigned char addr[16];
    int family;

    if (!text || !text_bytes(text, &family, addr)) {
        snprintf(out, SL_ADDR_TEXT_MAX, "%s", text ? text : "unknown");
        return;
    }
    if (family == AF_INET6)
        memset(addr + 8, 0, 8);
    format_bytes(family, addr, out);
    if (family == AF_INET6)
        strncat(out, "/64", SL_ADDR_TEXT_MAX - strlen(out) - 1);
}

bool sl_addr_limit_key_bin(const struct sockaddr *sa, unsigned char key[17])
{
    int family;

    memset(key, 0, 17);
    if (!sockaddr_bytes(sa, &family, key + 1))
        return false;
    key[0] = (unsigned char)family;
    if (family == AF_INET6)
        memset(key + 1 + 8, 0, 8);
    return true;
}
