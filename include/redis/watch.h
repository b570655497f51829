/* watch: the failover announcements of the Sentinels (redis.sentinels), heard by one thread
 * per process subscribed to each of them.
 *
 * The Sentinel that runs a failover announces the replica it chose (+selected-slave) at least
 * one of its timer ticks (50-100 ms) before it sends it REPLICAOF NO ONE, +promoted-slave once
 * the replica answers as a master (its INFO, within a second), and +switch-master once the other
 * replicas follow the new master (a second or two more; the other Sentinels announce the switch
 * as soon as they hear of the promotion). Until the promotion, the old master still takes writes
 * and its other replicas still confirm them (WAIT), though they will resync from the new master
 * and drop them. So from the beginning of a failover of our master to the promotion, conn sends
 * no call (for redis.failover_wait_ms at most), a write whose WAIT answered after a failover
 * began counts as unconfirmed; at the promotion every connection moves to the promoted replica
 * (checked with ROLE), where the Sentinels would name the old master until the switch; after a
 * switch it looks for the master again, asking first the Sentinel that announced it. The
 * announcements only hasten and guard: asking the Sentinels and ROLE still decide where the
 * master is. Each step is logged at info level with the time since the failover began. */
#ifndef DQ_WATCH_H
#define DQ_WATCH_H

#include <stddef.h>

#include "core/config.h"
#include "redis/sentinel.h"

/* Starts the watch when cfg has Sentinels (else does nothing). 0, or -1 with err set. The
 * thread never blocks on one Sentinel: connects are non-blocking and polled with the others. */
int watch_start(const struct config *cfg, char *err, size_t errlen);
void watch_stop(void);

/* 1 while the watch runs. */
int watch_running(void);
/* 1 while a Sentinel runs a failover of the master and has not promoted a replica yet (at most
 * 15 s after it was last heard to begin one). */
int watch_failing(void);
/* Bumped when a failover begins, when a replica is promoted and when the master moved to
 * another address than the one promoted (once, however many Sentinels announce the move). */
unsigned watch_gen(void);
/* Bumped when a replica is promoted and when the master moved to another address than the one
 * promoted. */
unsigned watch_moves(void);
/* The Sentinel (its index in redis.sentinels) that announced the last move, or -1. */
int watch_announcer(void);

/* 1 with the address of the replica a failover promoted, from the promotion to the switch (the
 * Sentinels name the old master until then), else 0. */
int watch_promoted(char host[SENTINEL_HOST_MAX], int *port);
/* ms since the failover under way began (its first announcement), or -1 when none runs. */
long long watch_since_began(void);
/* A pipeline waited ms for the failover under way: the longest is logged at its switch. */
void watch_waited(int64_t ms);

#endif
