#include <string.h>

#include "slots.h"
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

static void slot_map(void)
{
    static struct slots_map m;   /* 32 KiB: off the stack */

    slots_map_init(&m);
    CHECK_EQ_INT(slots_map_missing(&m), SLOTS_COUNT);
    CHECK_EQ_INT(slots_map_add(&m, 0, 5460, "127.0.0.1", 7000), 0);
    CHECK_EQ_INT(slots_map_add(&m, 5461, 10922, "127.0.0.1", 7001), 1);
    CHECK_EQ_INT(slots_map_missing(&m), SLOTS_COUNT - 10923);
    CHECK_EQ_INT(slots_map_add(&m, 10923, 16383, "127.0.0.1", 7000), 0);   /* a node twice */
    CHECK_EQ_INT(slots_map_missing(&m), 0);
    CHECK_EQ_INT(m.nnodes, 2);
    CHECK_EQ_INT(m.node_of[slot("foo")], 0);
    CHECK_EQ_INT(m.node_of[slot("bar")], 0);
    CHECK_EQ_INT(m.node_of[slot("{user1000}.x")], 0);
    CHECK_EQ_INT(m.node_of[8000], 1);
    CHECK_EQ_INT(slots_map_add(&m, 100, 99, "h", 1), -1);
    CHECK_EQ_INT(slots_map_add(&m, -1, 5, "h", 1), -1);
    CHECK_EQ_INT(slots_map_add(&m, 0, 16384, "h", 1), -1);
    CHECK_EQ_INT(slots_map_add(&m, 0, 1, "h", 0), -1);
    for (int i = 0; i < SLOTS_NODES_MAX - 2; i++)
        CHECK(slots_map_add(&m, i, i, "10.0.0.1", 1000 + i) == 2 + i);
    CHECK_EQ_INT(slots_map_add(&m, 0, 0, "10.0.0.2", 1), -1);   /* full */
}

void unit_slots(void)
{
    RUN(crc16_and_slots);
    RUN(hash_tags);
    RUN(redirects);
    RUN(slot_map);
}
