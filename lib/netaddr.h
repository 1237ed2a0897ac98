/* Client addresses: lists of networks ("10.0.0.0/8, ::1") an operator
 * trusts, and the key an address is counted under by limits (one IPv4
 * address, or one IPv6 /64: a subscriber commonly holds a whole /64, so
 * counting single IPv6 addresses would give one client 2^64 budgets).
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are IPv4 throughout. */
#ifndef SL_NETADDR_H
#define SL_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "error.h"

/* Longest text of an address or rate key ("ffff:...:ffff/64"), with NUL. */
#define SL_ADDR_TEXT_MAX 64

struct sl_net {
    int family; /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    unsigned prefix; /* bits */
};

struct sl_net_list {
    struct sl_net *items;
    size_t n;
};

/* Parses "ADDR[/BITS], ..." (commas or spaces between entries; may be
 * empty). On error nothing is kept and err names the bad entry. */
int sl_net_list_parse(const char *text, struct sl_net_list *out, struct sl_error *err);
void sl_net_list_release(struct sl_net_list *list);

/* Whether the address is in one of the list's networks. */
bool sl_net_list_has(const struct sl_net_list *list, const struct sockaddr *sa);
/* The same for an address in text form; false when it is not an address. */
bool sl_net_list_has_text(const struct sl_net_list *list, const char *addr);

/* The address of sa as text (IPv4-mapped shown as IPv4); "unknown" when sa
 * is NULL or not IP. out holds SL_ADDR_TEXT_MAX bytes. */
void sl_addr_format(const struct sockaddr *sa, char *out);

/* Whether text is a plain IPv4 or IPv6 address. */
bool sl_addr_valid(const char *text);

/* The key limits count an address under: the IPv4 address itself, or the
 * IPv6 address's /64 ("2001:db8:1:2::/64"). Text that is no address is
 * copied as it is. out holds SL_ADDR_TEXT_MAX bytes. */
void sl_addr_limit_key(const char *addr, char *out);

/* The same key in binary, for counting connections: 17 bytes (the family,
 * then the address with the host bits of an IPv6 /64 cleared). Returns false
 * for anything that is not IP. */
bool sl_addr_limit_key_bin(const struct sockaddr *sa, unsigned char key[17]);

#endif
