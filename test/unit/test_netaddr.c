/* netaddr: which addresses the callbacks' check refuses, and the networks callbacks.networks
 * allows them through. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/un.h>

#include "lib/netaddr.h"
#include "unit.h"

/* The class of the address text, or "unparsed". */
static const char *class_of(const char *text)
{
    struct netaddr_net n;
    char err[128];
    const char *c;

    if (netaddr_net_parse(text, &n, err, sizeof(err)) < 0)
        return "unparsed";
    c = netaddr_class(&n.addr);
    return c ? c : "public";
}

/* 1 when the network net holds the address addr, 0 when not, -1 when either does not parse. */
static int in(const char *net, const char *addr)
{
    struct netaddr_net n, a;
    char err[128];

    if (netaddr_net_parse(net, &n, err, sizeof(err)) < 0 ||
        netaddr_net_parse(addr, &a, err, sizeof(err)) < 0)
        return -1;
    return netaddr_net_contains(&n, &a.addr);
}

/* err when text does not parse, "" when it does. */
static const char *parse_error(const char *text)
{
    static char err[256];
    struct netaddr_net n;

    if (netaddr_net_parse(text, &n, err, sizeof(err)) == 0)
        return "";
    return err;
}

static void ipv4_classes(void)
{
    CHECK_STR(class_of("127.0.0.1"), "loopback");
    CHECK_STR(class_of("127.255.255.254"), "loopback");
    CHECK_STR(class_of("0.0.0.0"), "unspecified");
    CHECK_STR(class_of("0.1.2.3"), "unspecified");
    CHECK_STR(class_of("10.0.0.1"), "private");
    CHECK_STR(class_of("10.255.255.255"), "private");
    CHECK_STR(class_of("172.16.0.1"), "private");
    CHECK_STR(class_of("172.31.255.255"), "private");
    CHECK_STR(class_of("172.15.255.255"), "public");
    CHECK_STR(class_of("172.32.0.0"), "public");
    CHECK_STR(class_of("192.168.1.1"), "private");
    CHECK_STR(class_of("192.169.0.1"), "public");
    CHECK_STR(class_of("100.64.0.1"), "private");          /* carrier-grade NAT, 100.64/10 */
    CHECK_STR(class_of("100.127.255.255"), "private");
    CHECK_STR(class_of("100.63.255.255"), "public");
    CHECK_STR(class_of("100.128.0.0"), "public");
    CHECK_STR(class_of("169.254.169.254"), "link-local");  /* clouds' metadata service */
    CHECK_STR(class_of("169.253.0.1"), "public");
    CHECK_STR(class_of("224.0.0.1"), "multicast");
    CHECK_STR(class_of("239.255.255.255"), "multicast");
    CHECK_STR(class_of("255.255.255.255"), "broadcast");
    CHECK_STR(class_of("8.8.8.8"), "public");
    CHECK_STR(class_of("1.1.1.1"), "public");
    CHECK_STR(class_of("93.184.216.34"), "public");
    /* the rest of the IANA special-purpose registry */
    CHECK_STR(class_of("198.18.0.1"), "reserved");         /* benchmarking, 198.18/15 */
    CHECK_STR(class_of("198.19.255.255"), "reserved");
    CHECK_STR(class_of("198.20.0.0"), "public");
    CHECK_STR(class_of("192.0.0.8"), "reserved");          /* IETF protocol assignments */
    CHECK_STR(class_of("192.0.2.1"), "documentation");
    CHECK_STR(class_of("198.51.100.7"), "documentation");
    CHECK_STR(class_of("203.0.113.9"), "documentation");
    CHECK_STR(class_of("192.88.99.1"), "reserved");
    CHECK_STR(class_of("240.0.0.1"), "reserved");
    CHECK_STR(class_of("254.1.2.3"), "reserved");
    CHECK_STR(class_of("192.0.3.1"), "public");
}

static void ipv6_classes(void)
{
    CHECK_STR(class_of("::1"), "loopback");
    CHECK_STR(class_of("::"), "unspecified");
    CHECK_STR(class_of("fc00::1"), "private");
    CHECK_STR(class_of("fd12:3456:789a::1"), "private");
    CHECK_STR(class_of("fe80::1"), "link-local");
    CHECK_STR(class_of("febf:ffff::1"), "link-local");
    CHECK_STR(class_of("ff02::1"), "multicast");
    CHECK_STR(class_of("ff0e::101"), "multicast");
    CHECK_STR(class_of("2606:4700::1"), "public");
    CHECK_STR(class_of("2001:4860:4860::8888"), "public");
    CHECK_STR(class_of("fe00::1"), "public");   /* just past fc00::/7, before fe80::/10 */
    CHECK_STR(class_of("::7f00:1"), "reserved");   /* ::127.0.0.1, IPv4-compatible */
    CHECK_STR(class_of("::a00:1"), "reserved");
    CHECK_STR(class_of("2002:7f00:1::1"), "reserved");   /* 6to4 */
    CHECK_STR(class_of("2002:808:808::1"), "reserved");
    CHECK_STR(class_of("64:ff9b:1::a00:1"), "private");   /* NAT64 for local use */
    CHECK_STR(class_of("fec0::1"), "private");            /* site-local */
    CHECK_STR(class_of("feff::1"), "private");
    CHECK_STR(class_of("2001::1"), "reserved");           /* Teredo */
    CHECK_STR(class_of("2001:1ff::1"), "reserved");
    CHECK_STR(class_of("2001:200::1"), "public");
    CHECK_STR(class_of("2001:db8::1"), "documentation");
    CHECK_STR(class_of("3fff::1"), "documentation");
    CHECK_STR(class_of("100::1"), "reserved");            /* discard-only */
    CHECK_STR(class_of("100:0:0:1::1"), "public");
    CHECK_STR(class_of("5f00::1"), "reserved");
}

/* IPv4 inside IPv6 is judged by the IPv4 address: ::ffff:0:0/96 and NAT64's 64:ff9b::/96. */
static void mapped_forms_judged_by_ipv4(void)
{
    struct netaddr_net n;
    char err[128];

    CHECK_STR(class_of("::ffff:127.0.0.1"), "loopback");
    CHECK_STR(class_of("::ffff:10.0.0.1"), "private");
    CHECK_STR(class_of("::ffff:169.254.0.1"), "link-local");
    CHECK_STR(class_of("::ffff:8.8.8.8"), "public");
    CHECK_STR(class_of("64:ff9b::7f00:1"), "loopback");
    CHECK_STR(class_of("64:ff9b::10.0.0.1"), "private");
    CHECK_STR(class_of("64:ff9b::100.64.0.1"), "private");
    CHECK_STR(class_of("64:ff9b::169.254.169.254"), "link-local");
    CHECK_STR(class_of("64:ff9b::224.0.0.1"), "multicast");
    CHECK_STR(class_of("64:ff9b::8.8.8.8"), "public");
    CHECK_EQ_INT(netaddr_net_parse("::ffff:192.168.0.1", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.addr.v4, 1);
    CHECK_EQ_INT(n.prefix, 32);
    CHECK(memcmp(n.addr.b, "\xc0\xa8\x00\x01", 4) == 0);
}

static void from_socket_addresses(void)
{
    struct sockaddr_in in4 = { .sin_family = AF_INET };
    struct sockaddr_in6 in6 = { .sin6_family = AF_INET6 };
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    struct netaddr a;

    CHECK_EQ_INT(inet_pton(AF_INET, "192.168.0.1", &in4.sin_addr), 1);
    CHECK_EQ_INT(netaddr_of_sockaddr((struct sockaddr *)&in4, sizeof(in4), &a), 0);
    CHECK_EQ_INT(a.v4, 1);
    CHECK(memcmp(a.b, "\xc0\xa8\x00\x01", 4) == 0);
    CHECK_STR(netaddr_class(&a), "private");
    CHECK_EQ_INT(inet_pton(AF_INET6, "::ffff:192.168.0.1", &in6.sin6_addr), 1);
    CHECK_EQ_INT(netaddr_of_sockaddr((struct sockaddr *)&in6, sizeof(in6), &a), 0);
    CHECK_EQ_INT(a.v4, 1);
    CHECK(memcmp(a.b, "\xc0\xa8\x00\x01", 4) == 0);
    CHECK_EQ_INT(inet_pton(AF_INET6, "2606:4700::1", &in6.sin6_addr), 1);
    CHECK_EQ_INT(netaddr_of_sockaddr((struct sockaddr *)&in6, sizeof(in6), &a), 0);
    CHECK_EQ_INT(a.v4, 0);
    CHECK(memcmp(a.b, &in6.sin6_addr, 16) == 0);
    CHECK(netaddr_class(&a) == NULL);
    CHECK_EQ_INT(netaddr_of_sockaddr((struct sockaddr *)&un, sizeof(un), &a), -1);
    CHECK_EQ_INT(netaddr_of_sockaddr((struct sockaddr *)&in6, sizeof(in4), &a), -1);   /* short */
}

static void parses_networks(void)
{
    struct netaddr_net n;
    char err[128];

    CHECK_EQ_INT(netaddr_net_parse("10.1.0.0/16", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.addr.v4, 1);
    CHECK_EQ_INT(n.prefix, 16);
    CHECK_EQ_INT(netaddr_net_parse("fd00::/8", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.addr.v4, 0);
    CHECK_EQ_INT(n.prefix, 8);
    CHECK_EQ_INT(netaddr_net_parse("127.0.0.1", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.prefix, 32);
    CHECK_EQ_INT(netaddr_net_parse("::1", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.prefix, 128);
    CHECK_EQ_INT(netaddr_net_parse("0.0.0.0/0", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.prefix, 0);
    CHECK_EQ_INT(netaddr_net_parse("10.0.0.0/32", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(netaddr_net_parse("2001:db8::/128", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.prefix, 128);
    CHECK_EQ_INT(netaddr_net_parse("::ffff:10.0.0.0/104", &n, err, sizeof(err)), 0);
    CHECK_EQ_INT(n.addr.v4, 1);   /* the IPv4 network 10.0.0.0/8 */
    CHECK_EQ_INT(n.prefix, 8);
}

static void refuses_bad_networks(void)
{
    char long_text[100];

    memset(long_text, '1', sizeof(long_text) - 1);
    long_text[sizeof(long_text) - 1] = '\0';
    CHECK_HAS(parse_error("10.0.0.0/33"), "over 32");
    CHECK_HAS(parse_error("fd00::/129"), "over 128");
    CHECK_HAS(parse_error("::ffff:10.0.0.0/95"), "mapped");
    CHECK_HAS(parse_error("::ffff:10.0.0.0/129"), "over 32");
    CHECK_HAS(parse_error("10.0.0.0/"), "prefix length");
    CHECK_HAS(parse_error("10.0.0.0/x"), "prefix length");
    CHECK_HAS(parse_error("10.0.0.0/-1"), "prefix length");
    CHECK_HAS(parse_error("10.0.0.0/+8"), "prefix length");
    CHECK_HAS(parse_error("10.0.0.0/8x"), "prefix length");
    CHECK_HAS(parse_error("10.0.0.0/8/8"), "prefix length");
    CHECK_HAS(parse_error("10.0.0.0/99999999999999999999"), "prefix length");
    CHECK_HAS(parse_error("garbage"), "\"garbage\" is not an IPv4 or IPv6");
    CHECK_HAS(parse_error(""), "not an IPv4 or IPv6");
    CHECK_HAS(parse_error("/8"), "not an IPv4 or IPv6");
    CHECK_HAS(parse_error("10.0.0"), "not an IPv4 or IPv6");
    CHECK_HAS(parse_error("10.0.0.256/8"), "not an IPv4 or IPv6");
    CHECK_HAS(parse_error("fd00:::1/8"), "not an IPv4 or IPv6");
    CHECK_HAS(parse_error("example.com"), "not an IPv4 or IPv6");
    CHECK_HAS(parse_error(long_text), "too long");
}

/* The first and last address of a network are in it, their neighbours outside are not. */
static void contains_at_boundaries(void)
{
    CHECK_EQ_INT(in("10.1.0.0/16", "10.1.0.0"), 1);
    CHECK_EQ_INT(in("10.1.0.0/16", "10.1.255.255"), 1);
    CHECK_EQ_INT(in("10.1.0.0/16", "10.0.255.255"), 0);
    CHECK_EQ_INT(in("10.1.0.0/16", "10.2.0.0"), 0);
    CHECK_EQ_INT(in("172.16.0.0/12", "172.16.0.0"), 1);   /* a prefix inside a byte */
    CHECK_EQ_INT(in("172.16.0.0/12", "172.31.255.255"), 1);
    CHECK_EQ_INT(in("172.16.0.0/12", "172.15.255.255"), 0);
    CHECK_EQ_INT(in("172.16.0.0/12", "172.32.0.0"), 0);
    CHECK_EQ_INT(in("10.1.2.3/16", "10.1.200.1"), 1);     /* host bits ignored */
    CHECK_EQ_INT(in("127.0.0.1", "127.0.0.1"), 1);
    CHECK_EQ_INT(in("127.0.0.1", "127.0.0.2"), 0);
    CHECK_EQ_INT(in("10.0.0.0/31", "10.0.0.1"), 1);
    CHECK_EQ_INT(in("10.0.0.0/31", "10.0.0.2"), 0);
    CHECK_EQ_INT(in("0.0.0.0/0", "8.8.8.8"), 1);
    CHECK_EQ_INT(in("0.0.0.0/0", "2606:4700::1"), 0);     /* never across families */
    CHECK_EQ_INT(in("fd00::/8", "fd00::"), 1);
    CHECK_EQ_INT(in("fd00::/8", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), 1);
    CHECK_EQ_INT(in("fd00::/8", "fc00::1"), 0);
    CHECK_EQ_INT(in("fd00::/8", "fe00::"), 0);
    CHECK_EQ_INT(in("fc00::/7", "fdff::1"), 1);
    CHECK_EQ_INT(in("fc00::/7", "fe00::1"), 0);
    CHECK_EQ_INT(in("fe80::/10", "febf:ffff::1"), 1);
    CHECK_EQ_INT(in("fe80::/10", "fec0::"), 0);
    CHECK_EQ_INT(in("::1", "::1"), 1);
    CHECK_EQ_INT(in("::1", "::2"), 0);
    CHECK_EQ_INT(in("::/0", "2606:4700::1"), 1);
    CHECK_EQ_INT(in("::/0", "10.0.0.1"), 0);
    CHECK_EQ_INT(in("10.0.0.0/8", "::ffff:10.1.2.3"), 1);   /* mapped: the same hosts */
    CHECK_EQ_INT(in("::ffff:10.0.0.0/104", "10.255.0.1"), 1);
    CHECK_EQ_INT(in("::ffff:10.0.0.0/104", "11.0.0.1"), 0);
}

void unit_netaddr(void)
{
    RUN(ipv4_classes);
    RUN(ipv6_classes);
    RUN(mapped_forms_judged_by_ipv4);
    RUN(from_socket_addresses);
    RUN(parses_networks);
    RUN(refuses_bad_networks);
    RUN(contains_at_boundaries);
}
