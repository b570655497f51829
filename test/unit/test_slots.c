#include <stdio.h>
#include <string.h>

#include "redis/slots.h"
#include "unit.h"

static int slot(const char *key)
{
    return slots_of_key(key, strlen(key));
}

/* The specification's check value, and slots as redis-server 7.0 answers CLUSTER KEYSLOT. */
static void crc16_and_slots(void)
{
    CHECK_EQ_INT(slots_crc16("123456789", 9), 0x31C3);
    CHECK_EQ_INT(slot("123456789"), 0x31C3 & 16383);
    CHECK_EQ_INT(slot("foo"), 12182);
    CHECK_EQ_INT(slot("bar"), 5061);
    CHECK_EQ_INT(slot("hello"), 866);
    CHECK_EQ_INT(slot(""), 0);
}

static void hash_tags(void)
{
    CHECK_EQ_INT(slot("{user1000}.following"), 3443);
    CHECK_EQ_INT(slot("{user1000}.followers"), 3443);
    CHECK_EQ_INT(slot("foo{}{bar}"), 8363);       /* an empty tag: the whole key */
    CHECK_EQ_INT(slot("foo{{bar}}zap"), 4015);    /* the tag is "{bar" */
    CHECK_EQ_INT(slot("foo{bar}{zap}"), 5061);    /* the first tag, "bar" */
    CHECK_EQ_INT(slot("{}"), 15257);
    CHECK_EQ_INT(slot("a{b"), 13340);             /* no closing brace: the whole key */
    CHECK_EQ_INT(slot("dq:{ctl}:claim:3"), 11148);
    CHECK_EQ_INT(slots_of_key("{a}\0b", 5), slot("a"));   /* keys are binary */
}

static void redirects(void)
{
    char host[SLOTS_HOST_MAX];
    int s = -1, port = 0;

    CHECK_EQ_INT(slots_parse_redirect("MOVED 3999 127.0.0.1:6381", &s, host, &port), SLOTS_MOVED);
    CHECK_EQ_INT(s, 3999);
    CHECK_STR(host, "127.0.0.1");
    CHECK_EQ_INT(port, 6381);
    CHECK_EQ_INT(slots_parse_redirect("ASK 16383 redis-b.internal:7000", &s, host, &port), SLOTS_ASK);
    CHECK_EQ_INT(s, 16383);
    CHECK_STR(host, "redis-b.internal");
    CHECK_EQ_INT(port, 7000);
    CHECK_EQ_INT(slots_parse_redirect("MOVED 0 ::1:7001", &s, host, &port), SLOTS_MOVED);
    CHECK_STR(host, "::1");
    CHECK_EQ_INT(port, 7001);
    CHECK_EQ_INT(slots_parse_redirect("MOVED 12 :7002", &s, host, &port), SLOTS_MOVED);
    CHECK_STR(host, "");   /* the node that answered */
    CHECK_EQ_INT(slots_parse_redirect("MOVED 16384 127.0.0.1:1", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("MOVED 1 127.0.0.1:0", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("MOVED 1 127.0.0.1:65536", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("MOVED 1 127.0.0.1", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("MOVED x 127.0.0.1:1", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("MOVED  1 h:1", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("MOVED 1 h:1x", &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot",
                                      &s, host, &port), SLOTS_NO_REDIRECT);
    CHECK_EQ_INT(slots_parse_redirect("ERR unknown command", &s, host, &port), SLOTS_NO_REDIRECT);
}

static struct slots_topo topo;   /* 192 KiB: off the stack */

static struct slots_range range(int first, int last, const char *host, int port)
{
    struct slots_range r = { first, last, "", port };

    snprintf(r.host, sizeof(r.host), "%s", host);
    return r;
}

/* A map read from CLUSTER SLOTS; nodes keep their numbers whatever the order of later maps. */
static void slot_map(void)
{
    struct slots_range r[3] = { range(0, 5460, "127.0.0.1", 7000), range(5461, 10922, "127.0.0.1", 7001),
                                range(10923, 16383, "127.0.0.1", 7002) };
    struct slots_range again[3] = { r[2], r[0], r[1] };
    char host[SLOTS_HOST_MAX];
    int port;

    CHECK_EQ_INT(slots_topo_init(&topo), 0);
    CHECK_EQ_INT(slots_missing(&topo), SLOTS_COUNT);
    CHECK_EQ_INT(slots_owner(&topo, 0), -1);
    CHECK_EQ_INT(slots_any(&topo), -1);
    CHECK_EQ_INT(slots_adopt(&topo, r, 2, 1000), 0);
    CHECK_EQ_INT(slots_missing(&topo), SLOTS_COUNT - 10923);   /* a partial map is kept */
    CHECK_EQ_INT(slots_owner(&topo, slot("foo")), -1);
    CHECK_EQ_INT(slots_owner(&topo, slot("bar")), 0);
    CHECK_EQ_INT(slots_owner(&topo, 8000), 1);
    CHECK_EQ_INT(slots_adopt(&topo, again, 3, 2000), 0);
    CHECK_EQ_INT(slots_missing(&topo), 0);
    CHECK_EQ_INT(slots_owner(&topo, 8000), 1);   /* the same node, the same number */
    CHECK_EQ_INT(slots_owner(&topo, slot("foo")), 2);
    CHECK_EQ_INT(slots_node_addr(&topo, 2, host, &port), 0);
    CHECK_STR(host, "127.0.0.1");
    CHECK_EQ_INT(port, 7002);
    CHECK_EQ_INT(slots_node_addr(&topo, 3, host, &port), -1);
    again[0] = range(100, 99, "h", 1);
    CHECK_EQ_INT(slots_adopt(&topo, again, 3, 3000), -1);   /* the old map stays */
    CHECK_EQ_INT(slots_owner(&topo, slot("foo")), 2);
    again[0] = range(0, 16384, "h", 1);
    CHECK_EQ_INT(slots_adopt(&topo, again, 1, 3000), -1);
    again[0] = range(0, 1, "h", 0);
    CHECK_EQ_INT(slots_adopt(&topo, again, 1, 3000), -1);
    slots_topo_release(&topo);
}

/* 200 masters (a map one range per master), and the registry's limit. */
static void many_masters(void)
{
    static struct slots_range r[200];

    CHECK_EQ_INT(slots_topo_init(&topo), 0);
    for (int i = 0; i < 200; i++)
        r[i] = range(i * 80, i == 199 ? 16383 : i * 80 + 79, "10.0.0.1", 7000 + i);
    CHECK_EQ_INT(slots_adopt(&topo, r, 200, 1), 0);
    CHECK_EQ_INT(slots_missing(&topo), 0);
    CHECK_EQ_INT(slots_nodes(&topo), 200);
    CHECK_EQ_INT(slots_owner(&topo, 16383), 199);
    CHECK_EQ_INT(slots_owner(&topo, 80 * 150 + 3), 150);
    for (int i = 200; i < SLOTS_NODES_MAX; i++)
        CHECK(slots_node_id(&topo, "10.0.0.2", 1 + i) == i);
    CHECK_EQ_INT(slots_node_id(&topo, "10.0.0.3", 1), -1);   /* full */
    CHECK_EQ_INT(slots_node_id(&topo, "10.0.0.1", 7005), 5);   /* known ones still answer */
    slots_topo_release(&topo);
}

/* A MOVED is not undone by a map read shortly after it that does not know of it yet; the map
 * is read again meanwhile, at most every SLOTS_REFRESH_MIN_MS. */
static void moved_outweighs_an_older_map(void)
{
    struct slots_range r[2] = { range(0, 8191, "a", 1), range(8192, 16383, "b", 2) };

    CHECK_EQ_INT(slots_topo_init(&topo), 0);
    CHECK_EQ_INT(slots_refresh_begin(&topo, 10000), 1);
    CHECK_EQ_INT(slots_refresh_begin(&topo, 10000), 0);   /* one reader at a time */
    CHECK_EQ_INT(slots_adopt(&topo, r, 2, 10000), 0);
    CHECK_EQ_INT(slots_refresh_begin(&topo, 10001), 0);   /* not stale */
    slots_moved(&topo, 5, 1, 10100);
    CHECK_EQ_INT(slots_owner(&topo, 5), 1);
    CHECK_EQ_INT(slots_refresh_begin(&topo, 10200), 0);   /* too soon after the last */
    CHECK_EQ_INT(slots_refresh_begin(&topo, 10000 + SLOTS_REFRESH_MIN_MS), 1);
    CHECK_EQ_INT(slots_adopt(&topo, r, 2, 10300), 0);     /* an older map */
    CHECK_EQ_INT(slots_owner(&topo, 5), 1);
    CHECK_EQ_INT(slots_owner(&topo, 6), 0);
    CHECK_EQ_INT(slots_refresh_begin(&topo, 10600), 1);   /* still stale: it disagreed */
    r[0] = range(0, 5, "a", 1);
    r[1] = range(6, 16383, "b", 2);
    r[1].first = 6;
    {
        struct slots_range r3[3] = { range(0, 4, "a", 1), range(5, 5, "b", 2), range(6, 16383, "a", 1) };
        CHECK_EQ_INT(slots_adopt(&topo, r3, 3, 10600), 0);   /* agrees with the MOVED */
    }
    CHECK_EQ_INT(slots_owner(&topo, 5), 1);
    CHECK_EQ_INT(slots_owner(&topo, 6), 0);
    CHECK_EQ_INT(slots_refresh_begin(&topo, 20000), 0);   /* not stale any more */
    slots_moved(&topo, 7, 1, 20000);
    {
        struct slots_range whole = range(0, 16383, "a", 1);
        CHECK_EQ_INT(slots_refresh_begin(&topo, 20000 + SLOTS_REFRESH_MIN_MS), 1);
        CHECK_EQ_INT(slots_adopt(&topo, &whole, 1, 20000 + SLOTS_MOVED_TRUST_MS), 0);   /* long after */
    }
    CHECK_EQ_INT(slots_owner(&topo, 7), 0);   /* the map wins */
    slots_refresh_failed(&topo);
    slots_topo_release(&topo);
}

void unit_slots(void)
{
    RUN(crc16_and_slots);
    RUN(hash_tags);
    RUN(redirects);
    RUN(slot_map);
    RUN(many_masters);
    RUN(moved_outweighs_an_older_map);
}
