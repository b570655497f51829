/* watch: the failover announcements of the Sentinels (redis.sentinels), heard by one thread
 * per process subscribed to each of them.
 *
 * The Sentinel that runs a failover announces the replica it chose (+selected-slave) at least
 * one of its timer ticks (50-100 ms) before it sends it REPLICAOF NO ONE, and +switch-master once
 * the other replicas follow the new master. In between, the old master still takes writes and
 * its other replicas still confirm them (WAIT), though they will resync from the new master and
 * drop them. So while any Sentinel runs a failover of our master, conn sends no call (for
 * redis.failover_wait_ms at most), a write
 * whose WAIT answered after a failover began counts as unconfirmed, and after the master moved
 * each connection looks for it again, asking first the Sentinel that announced the move. The
 * announcements only hasten and guard: asking the Sentinels and ROLE still decide where the
 * master is. */
#ifndef DQ_WATCH_H
#define DQ_WATCH_H

#include <stddef.h>

#include "core/config.h"

/* Starts the watch when cfg has Sentinels (else does nothing). 0, or -1 with err set. The
 * thread never blocks on one Sentinel: connects are non-blocking and polled with the others. */
int watch_start(const struct config *cfg, char *err, size_t errlen);
void watch_stop(void);

/* 1 while the watch runs. */
int watch_running(void);
/* 1 while a Sentinel runs a failover of the master (at most 15 s after it was last heard to
 * begin one). */
int watch_failing(void);
/* Bumped when a failover begins and when the master moved to a new address (once, however
 * many Sentinels announce the move). */
unsigned watch_gen(void);
/* The Sentinel (its index in redis.sentinels) that announced the last move, or -1. */
int watch_announcer(void);

#endif
