#include <stdio.h>

#include "redis/sentinel.h"
#include "unit.h"

static void split_addr(void)
{
    char host[SENTINEL_HOST_MAX];
    int port = 0;

    CHECK_EQ_INT(sentinel_split_addr("10.0.0.1:26379", host, &port), 0);
    CHECK_STR(host, "10.0.0.1");
    CHECK_EQ_INT(port, 26379);
    CHECK_EQ_INT(sentinel_split_addr("[::1]:26380", host, &port), 0);
    CHECK_STR(host, "::1");
    CHECK_EQ_INT(port, 26380);
    CHECK_EQ_INT(sentinel_split_addr("redis-a.internal:1", host, &port), 0);
    CHECK_STR(host, "redis-a.internal");
    CHECK_EQ_INT(sentinel_split_addr("host", host, &port), -1);
    CHECK_EQ_INT(sentinel_split_addr(":1", host, &port), -1);
    CHECK_EQ_INT(sentinel_split_addr("h:", host, &port), -1);
    CHECK_EQ_INT(sentinel_split_addr("h:0", host, &port), -1);
    CHECK_EQ_INT(sentinel_split_addr("h:65536", host, &port), -1);
    CHECK_EQ_INT(sentinel_split_addr("h:12a", host, &port), -1);
    CHECK_EQ_INT(sentinel_split_addr("[]:1", host, &port), -1);
}

static void master_addr(void)
{
    char host[SENTINEL_HOST_MAX], err[128];
    int port = 0;

    CHECK_EQ_INT(sentinel_master_addr("127.0.0.1", 9, "6380", 4, host, &port, err, sizeof(err)), 0);
    CHECK_STR(host, "127.0.0.1");
    CHECK_EQ_INT(port, 6380);
    CHECK_EQ_INT(sentinel_master_addr("127.0.0.1", 9, "63x0", 4, host, &port, err, sizeof(err)), -1);
    CHECK_STR(err, "Sentinel named the master's port \"63x0\", which is no port");
    CHECK_EQ_INT(sentinel_master_addr("127.0.0.1", 9, "70000", 5, host, &port, err, sizeof(err)), -1);
    CHECK_EQ_INT(sentinel_master_addr("127.0.0.1", 9, "", 0, host, &port, err, sizeof(err)), -1);
    CHECK_EQ_INT(sentinel_master_addr("", 0, "6379", 4, host, &port, err, sizeof(err)), -1);
    CHECK_STR(err, "Sentinel named no usable master host");
    CHECK_EQ_INT(sentinel_master_addr("a\0b", 3, "6379", 4, host, &port, err, sizeof(err)), -1);
}

static void errors_that_mean_elsewhere(void)
{
    CHECK_EQ_INT(sentinel_error_means_elsewhere("READONLY You can't write against a read only replica."), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("LOADING Redis is loading the dataset in memory"), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("NOREPLICAS Not enough good replicas to write."), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("MOVED 3999 127.0.0.1:6381"), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("ASK 3999 127.0.0.1:6381"), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("TRYAGAIN Multiple keys request during rehashing of slot"), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("CLUSTERDOWN The cluster is down"), 1);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("READONLY"), 1);
    /* the command's own answer: the connection is fine */
    CHECK_EQ_INT(sentinel_error_means_elsewhere("OOM command not allowed when used memory > 'maxmemory'."), 0);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("NOSCRIPT No matching script. Please use EVAL."), 0);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("WRONGTYPE Operation against a key holding the wrong kind of value"), 0);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("ERR Error running script"), 0);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("ASKING"), 0);
    CHECK_EQ_INT(sentinel_error_means_elsewhere("READONLYX"), 0);
    CHECK_EQ_INT(sentinel_error_means_elsewhere(""), 0);
}

static void prefer_moves_the_answering_one_first(void)
{
    int order[] = { 0, 1, 2, 3 };

    sentinel_prefer(order, 2);
    CHECK(order[0] == 2 && order[1] == 0 && order[2] == 1 && order[3] == 3);
    sentinel_prefer(order, 0);
    CHECK(order[0] == 2 && order[1] == 0 && order[2] == 1 && order[3] == 3);
    sentinel_prefer(order, 3);
    CHECK(order[0] == 3 && order[1] == 2 && order[2] == 0 && order[3] == 1);
}

/* Payloads as Redis 7.0's Sentinel publishes them during SENTINEL FAILOVER of master "dq". */
static void events_of_a_failover(void)
{
    const char *r = "slave 127.0.0.1:33125 127.0.0.1 33125 @ dq 127.0.0.1 53675";
    const char *m = "master dq 127.0.0.1 53675";

    CHECK_EQ_INT(sentinel_event_of("+try-failover", m, "dq"), SENTINEL_EV_FAILOVER);
    CHECK_EQ_INT(sentinel_event_of("+elected-leader", m, "dq"), SENTINEL_EV_FAILOVER);
    CHECK_EQ_INT(sentinel_event_of("+selected-slave", r, "dq"), SENTINEL_EV_FAILOVER);
    CHECK_EQ_INT(sentinel_event_of("+failover-state-send-slaveof-noone", r, "dq"), SENTINEL_EV_FAILOVER);
    CHECK_EQ_INT(sentinel_event_of("+failover-state-wait-promotion", r, "dq"), SENTINEL_EV_FAILOVER);
    CHECK_EQ_INT(sentinel_event_of("+promoted-slave", r, "dq"), SENTINEL_EV_PROMOTED);
    CHECK_EQ_INT(sentinel_event_of("+failover-state-reconf-slaves", m, "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+failover-end", m, "dq"), SENTINEL_EV_OVER);
    CHECK_EQ_INT(sentinel_event_of("+failover-end-for-timeout", m, "dq"), SENTINEL_EV_OVER);
    CHECK_EQ_INT(sentinel_event_of("-failover-abort-not-elected", m, "dq"), SENTINEL_EV_OVER);
    CHECK_EQ_INT(sentinel_event_of("-failover-abort-no-good-slave", m, "dq"), SENTINEL_EV_OVER);
    CHECK_EQ_INT(sentinel_event_of("+switch-master", "dq 127.0.0.1 53675 127.0.0.1 33125", "dq"),
                 SENTINEL_EV_SWITCH);
    /* what is no failover, or another master's */
    CHECK_EQ_INT(sentinel_event_of("+slave-reconf-done", r, "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("-role-change", r, "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+new-epoch", "1", "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+try-failover", "master dq2 127.0.0.1 1", "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+try-failover", "master d 127.0.0.1 1", "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+selected-slave", "slave 1:2 1 2 @ other 1 2", "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+switch-master", "dqx 1 2 3 4", "dq"), SENTINEL_EV_NONE);
    CHECK_EQ_INT(sentinel_event_of("+switch-master", "", "dq"), SENTINEL_EV_NONE);
}

/* The new master an event names: the promoted replica, the switch's new address. */
static void addresses_of_events(void)
{
    char host[SENTINEL_HOST_MAX];
    int port = 0;

    CHECK_EQ_INT(sentinel_event_addr(SENTINEL_EV_PROMOTED,
                                     "slave 127.0.0.1:33125 127.0.0.1 33125 @ dq 127.0.0.1 53675",
                                     host, &port), 0);
    CHECK_STR(host, "127.0.0.1");
    CHECK_EQ_INT(port, 33125);
    CHECK_EQ_INT(sentinel_event_addr(SENTINEL_EV_SWITCH, "dq 127.0.0.1 53675 10.0.0.2 33126",
                                     host, &port), 0);
    CHECK_STR(host, "10.0.0.2");
    CHECK_EQ_INT(port, 33126);
    CHECK_EQ_INT(sentinel_event_addr(SENTINEL_EV_SWITCH, "dq 127.0.0.1 53675", host, &port), -1);
    CHECK_EQ_INT(sentinel_event_addr(SENTINEL_EV_PROMOTED, "slave 1:2 1 x @ dq 1 2", host, &port), -1);
    CHECK_EQ_INT(sentinel_event_addr(SENTINEL_EV_PROMOTED, "slave", host, &port), -1);
    CHECK_EQ_INT(sentinel_event_addr(SENTINEL_EV_OVER, "master dq 1 2", host, &port), -1);
}

void unit_sentinel(void)
{
    RUN(addresses_of_events);
    RUN(events_of_a_failover);
    RUN(split_addr);
    RUN(master_addr);
    RUN(errors_that_mean_elsewhere);
    RUN(prefer_moves_the_answering_one_first);
}
