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

/* A special-purpose range: its first bytes, prefix length in bits, and why it is refused. */
struct special {
    unsigned char b[16];
    int bits;
    const char *why;
};

/* The IANA IPv4 Special-Purpose Address Registry's ranges that are not globally reachable,
 * besides multicast and the reserved 240/4 (broadcast 255.255.255.255 within it). */
static const struct special v4_special[] = {
    { { 127 }, 8, "loopback" },
    { { 0 }, 8, "unspecified" },
    { { 10 }, 8, "private" },
    { { 172, 16 }, 12, "private" },
    { { 192, 168 }, 16, "private" },
    { { 100, 64 }, 10, "private" },            /* carrier-grade NAT */
    { { 169, 254 }, 16, "link-local" },
    { { 192, 0, 0 }, 24, "reserved" },         /* IETF protocol assignments */
    { { 192, 0, 2 }, 24, "documentation" },
    { { 198, 51, 100 }, 24, "documentation" },
    { { 203, 0, 113 }, 24, "documentation" },
    { { 198, 18 }, 15, "reserved" },           /* benchmarking */
    { { 192, 88, 99 }, 24, "reserved" },       /* the former 6to4 relay anycast */
    { { 224 }, 4, "multicast" },
    { { 255, 255, 255, 255 }, 32, "broadcast" },
    { { 240 }, 4, "reserved" },
};

/* The IANA IPv6 Special-Purpose Address Registry's ranges that are not globally reachable or
 * that carry another address (6to4, Teredo), and the deprecated site-local fec0::/10; the
 * first that holds an address says (NAT64 within ::/8 first). NAT64's 64:ff9b::/96 is judged
 * by its IPv4 address before these; ::ffff:0:0/96 is IPv4 by then. */
static const struct special v6_special[] = {
    { { 0 }, 128, "unspecified" },
    { { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 }, 128, "loopback" },
    { { 0, 0x64, 0xff, 0x9b, 0, 1 }, 48, "private" },   /* NAT64 for local use */
    { { 0 }, 8, "reserved" },                  /* ::a.b.c.d and the rest of ::/8 */
    { { 1, 0 }, 64, "reserved" },              /* discard-only */
    { { 0x20, 0x01, 0x0d, 0xb8 }, 32, "documentation" },
    { { 0x20, 0x01 }, 23, "reserved" },        /* IETF protocol assignments, Teredo */
    { { 0x20, 0x02 }, 16, "reserved" },        /* 6to4 */
    { { 0x3f, 0xff }, 20, "documentation" },
    { { 0x5f, 0x00 }, 16, "reserved" },        /* segment routing */
    { { 0xfc }, 7, "private" },
    { { 0xfe, 0x80 }, 10, "link-local" },
    { { 0xfe, 0xc0 }, 10, "private" },         /* site-local */
    { { 0xff }, 8, "multicast" },
};

/* 1 when the first bits of b are those of s->b. */
static int within(const unsigned char *b, const struct special *s)
{
    int whole = s->bits / 8, rest = s->bits % 8;

    return memcmp(b, s->b, (size_t)whole) == 0 &&
           (!rest || ((b[whole] ^ s->b[whole]) & (0xff << (8 - rest)) & 0xff) == 0);
}

static const char *special_of(const unsigned char *b, const struct special *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (within(b, &t[i]))
            return t[i].why;
    return NULL;
}

#define COUNT(t) (sizeof(t) / sizeof((t)[0]))

static const char *v6_class(const unsigned char *b)
{
    static const unsigned char nat64[12] = { 0, 0x64, 0xff, 0x9b };

    if (memcmp(b, nat64, 12) == 0)
        return special_of(b + 12, v4_special, COUNT(v4_special));
    return special_of(b, v6_special, COUNT(v6_special));
}

const char *netaddr_class(const struct netaddr *a)
{
    return a->v4 ? special_of(a->b, v4_special, COUNT(v4_special)) : v6_class(a->b);
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
