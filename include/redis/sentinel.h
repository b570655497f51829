/* sentinel: where the Redis master is, as pure logic: Sentinel's answers, the error replies that
 * mean "this is not (or not yet) the master: look again", and the order in which Sentinels are
 * asked. No network library: conn.c does the talking. */
#ifndef DQ_SENTINEL_H
#define DQ_SENTINEL_H

#include <stddef.h>

#define SENTINEL_HOST_MAX 256

/* Splits "host:port" or "[v6]:port" (checked by the config) into host and port. 0, or -1. */
int sentinel_split_addr(const char *addr, char host[SENTINEL_HOST_MAX], int *port);

/* Reads Sentinel's answer to SENTINEL get-master-addr-by-name: the host and port texts (len
 * bytes each). 0 with host and port set, or -1 with why in err (a port that is no number). */
int sentinel_master_addr(const char *h, size_t hlen, const char *p, size_t plen,
                         char host[SENTINEL_HOST_MAX], int *port, char *err, size_t errlen);

/* 1 when an error reply (its text) says the connection is to a server that cannot take the
 * command now: a replica (READONLY), one still loading its data (LOADING), one whose master is
 * down (MASTERDOWN), one short of replicas (NOREPLICAS), or a cluster node that is not the
 * key's (MOVED, ASK, TRYAGAIN, CLUSTERDOWN). The connection is then dropped and the master
 * looked for again. 0 for any other error (a script's, OOM, a wrong type), which is the
 * command's answer. */
int sentinel_error_means_elsewhere(const char *errstr);

/* After the Sentinel at position i of order[] answered, it is asked first from then on (Redis's
 * Sentinel client guidelines): the ones before it move down one place. */
void sentinel_prefer(int *order, int i);

/* What a message a Sentinel published (PSUBSCRIBE) says about the master named master_name:
 * SENTINEL_EV_FAILOVER  a failover of it has begun or goes on (+try-failover, +selected-slave,
 *                       ... +failover-state-wait-promotion): a replica is about to be promoted
 *                       while the old master may still take writes;
 * SENTINEL_EV_PROMOTED  the replica chosen answers as a master (+promoted-slave): the failover
 *                       can no longer be given up, and the new master takes writes, though the
 *                       Sentinels name the old one until the switch;
 * SENTINEL_EV_OVER      that Sentinel's failover ended or was given up (+failover-end*,
 *                       -failover-abort-*);
 * SENTINEL_EV_SWITCH    the master has moved (+switch-master): its failover is over too;
 * SENTINEL_EV_NONE      anything else, or about another master. */
enum sentinel_event {
    SENTINEL_EV_NONE, SENTINEL_EV_FAILOVER, SENTINEL_EV_PROMOTED, SENTINEL_EV_OVER,
    SENTINEL_EV_SWITCH
};
enum sentinel_event sentinel_event_of(const char *channel, const char *payload,
                                      const char *master_name);

/* The new master's address an event names: the promoted replica of +promoted-slave ("slave
 * <ip:port> <ip> <port> @ ..."), the new address of +switch-master ("<name> <old ip> <old
 * port> <new ip> <new port>"). 0 with host and port, or -1 when the payload names none. */
int sentinel_event_addr(enum sentinel_event ev, const char *payload,
                        char host[SENTINEL_HOST_MAX], int *port);

#endif
