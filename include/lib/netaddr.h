/* netaddr: IP addresses and networks for the callbacks' address check. An address is read from
 * a socket address or as part of a network ("10.1.0.0/16", "fd00::/8", or an address alone);
 * a network says whether it holds an address, and an address has a class: loopback, private,
 * link-local and so on, or public. IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are held as
 * IPv4, since they reach the same hosts. Pure logic: no network library. */
#ifndef DQ_NETADDR_H
#define DQ_NETADDR_H

#include <stddef.h>
#include <sys/socket.h>

#define NETADDR_TEXT_MAX 64   /* a network's text: an IPv6 address (45) and "/128", with room */

/* An IPv4 or IPv6 address, in network byte order. */
struct netaddr {
    int v4;                   /* 1: IPv4 in b[0..3], the rest zero */
    unsigned char b[16];
};

/* The addresses whose first prefix bits are those of addr. */
struct netaddr_net {
    struct netaddr addr;
    int prefix;               /* bits: 0-32 for IPv4, 0-128 for IPv6 */
};

/* The address of sa (len bytes: AF_INET or AF_INET6) into *a. 0, or -1 when sa is no IP
 * address. */
int netaddr_of_sockaddr(const struct sockaddr *sa, socklen_t len, struct netaddr *a);

/* Reads "a.b.c.d/n", "x::/n", or a single address (a network of one: /32 or /128) into *n.
 * A mapped network ("::ffff:10.0.0.0/104") becomes the IPv4 one ("10.0.0.0/8"). Host bits
 * past the prefix are allowed and ignored. 0, or -1 with what is wrong in err. */
int netaddr_net_parse(const char *text, struct netaddr_net *n, char *err, size_t errlen);

/* 1 when a is in n, else 0. An IPv4 address is never in an IPv6 network, nor the reverse. */
int netaddr_net_contains(const struct netaddr_net *n, const struct netaddr *a);

/* Why a may not be called unless allowed, by the IANA special-purpose address registries:
 * "loopback", "unspecified", "private" (10/8, 172.16/12, 192.168/16, carrier-grade NAT
 * 100.64/10, fc00::/7, site-local fec0::/10, NAT64 for local use 64:ff9b:1::/48),
 * "link-local", "multicast", "broadcast", "documentation", "reserved" (IETF assignments
 * 192.0.0/24 and 2001::/23, benchmarking 198.18/15, 240/4, ::/8 with ::a.b.c.d, 6to4 2002::/16,
 * ...); NULL when it is public. An address of NAT64's 64:ff9b::/96 is judged by the IPv4
 * address inside, since the translator calls that one. A static string. */
const char *netaddr_class(const struct netaddr *a);

#endif
