/* netaddr: IP addresses and networks. The contract is in include/lib/netaddr.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/netaddr.h"

#define MAPPED_PREFIX 96   /* bits of ::ffff:0:0/96 before the IPv4 address */

static uint32_t load32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static const char *v4_class(uint32_t a)
{
    if (a >> 24 == 127)
        return "loopback";
    if (a >> 24 == 0)
        return "unspecified";
    if (a >> 24 == 10 || (a & 0xfff00000) == 0xac100000 || (a & 0xffff0000) == 0xc0a80000 ||
        (a & 0xffc00000) == 0x64400000)   /* 10/8, 172.16/12, 192.168/16, CGNAT 100.64/10 */
        return "private";
    if ((a & 0xffff0000) == 0xa9fe0000)
        return "link-local";
    if ((a & 0xf0000000) == 0xe0000000)
        return "multicast";
    if (a == 0xffffffff)
        return "broadcast";
    return NULL;
}

/* Mapped addresses are IPv4 by then. */
static const char *v6_class(const unsigned char *b)
{
    static const unsigned char zero[15];
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b };

    if (memcmp(b, zero, 15) == 0)
        return b[15] == 1 ? "loopback" : b[15] == 0 ? "unspecified" : NULL;
    if (memcmp(b, nat64, 12) == 0)
        return v4_class(load32(b + 12));
    if ((b[0] & 0xfe) == 0xfc)
        return "private";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80)
        return "link-local";
    if (b[0] == 0xff)
        return "multicast";
    return NULL;
}

const char *netaddr_class(const struct netaddr *a)
{
    return a->v4 ? v4_class(load32(a->b)) : v6_class(a->b);
}

/* The IPv6 address b into *a, ::ffff:a.b.c.d as a.b.c.d. */
static void of_v6(const unsigned char *b, struct netaddr *a)
{
    static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

    memset(a, 0, sizeof(*a));
    if (memcmp(b, mapped, 12) == 0) {
        a->v4 = 1;
        memcpy(a->b, b + 12, 4);
    } else {
        memcpy(a->b, b, 16);
    }
}

int netaddr_of_sockaddr(const struct sockaddr *sa, socklen_t len, struct netaddr *a)
{
    struct sockaddr_in in4;
    struct sockaddr_in6 in6;

    if (sa->sa_family == AF_INET && len >= sizeof(in4)) {
        memcpy(&in4, sa, sizeof(in4));
        memset(a, 0, sizeof(*a));
        a->v4 = 1;
        memcpy(a->b, &in4.sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(in6)) {
        memcpy(&in6, sa, sizeof(in6));
        of_v6(in6.sin6_addr.s6_addr, a);
        return 0;
    }
    return -1;
}

int netaddr_net_contains(const struct netaddr_net *n, const struct netaddr *a)
{
    int whole = n->prefix / 8, rest = n->prefix % 8;

    if (n->addr.v4 != a->v4 || memcmp(n->addr.b, a->b, (size_t)whole) != 0)
        return 0;
    return rest == 0 || ((n->addr.b[whole] ^ a->b[whole]) & (0xff << (8 - rest)) & 0xff) == 0;
}

static int parse_fail(const char *text, const char *why, char *err, size_t errlen)
{
    snprintf(err, errlen, "\"%s\" %s", text, why);
    return -1;
}

/* The decimal prefix length after the slash into *bits. 0, or -1. */
static int prefix_parse(const char *s, long *bits)
{
    char *end;

    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    *bits = strtol(s, &end, 10);
    return *end || errno ? -1 : 0;
}

int netaddr_net_parse(const char *text, struct netaddr_net *n, char *err, size_t errlen)
{
    char addr[NETADDR_TEXT_MAX], *slash;
    unsigned char b[16];
    long bits = -1;

    if (strlen(text) >= sizeof(addr))
        return parse_fail(text, "is too long for an address or a network", err, errlen);
    snprintf(addr, sizeof(addr), "%s", text);
    if ((slash = strchr(addr, '/'))) {
        *slash = '\0';
        if (prefix_parse(slash + 1, &bits) < 0)
            return parse_fail(text, "has no prefix length after the /", err, errlen);
    }
    memset(n, 0, sizeof(*n));
    if (inet_pton(AF_INET, addr, b) == 1) {
        n->addr.v4 = 1;
        memcpy(n->addr.b, b, 4);
        bits = bits < 0 ? 32 : bits;
    } else if (inet_pton(AF_INET6, addr, b) == 1) {
        of_v6(b, &n->addr);
        bits = bits < 0 ? 128 : bits;
        if (n->addr.v4 && (bits -= MAPPED_PREFIX) < 0)
            return parse_fail(text, "is wider than the IPv4-mapped range ::ffff:0:0/96", err,
                              errlen);
    } else {
        return parse_fail(text, "is not an IPv4 or IPv6 address or network", err, errlen);
    }
    if (bits > (n->addr.v4 ? 32 : 128))
        return parse_fail(text, n->addr.v4 ? "has a prefix length over 32"
                                           : "has a prefix length over 128", err, errlen);
    n->prefix = (int)bits;
    return 0;
}
