/* groups: which partition groups this instance forwards. It holds their leases (claims),
 * renews them every third of delay.claim_ttl_ms, fences a group whose lease it could not renew
 * in time (before the lease can expire), hands groups back gracefully for the fair share or
 * when an operator asks, and takes free ones: a dead owner's within the TTL and a renew interval.
 * Runs on the holder's thread; drives the holder through its holder_group_* verbs. */
#ifndef DQ_GROUPS_H
#define DQ_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct groups;
struct holder;

/* NULL when out of memory. Owns no partitions until groups_run takes some. */
struct groups *groups_new(const struct config *cfg, struct holder *h);
void groups_free(struct groups *gs);

/* Every loop turn: fences groups whose lease ran out, finishes hand-backs whose messages are
 * done, and every renew interval heartbeats, renews, rebalances and publishes status.
 * now_ms is monotonic. */
void groups_run(struct groups *gs, int64_t now_ms);

/* Monotonic time by which groups_run wants to run again. */
int64_t groups_next_ms(const struct groups *gs);

/* 1 when messages of the group may be taken and acted on (owned, not being handed back). */
int groups_usable(const struct groups *gs, int group);

/* 1 while this instance's lease on the group is surely valid (also while handing it back):
 * only then may a message of it be sent or its offsets committed. now_ms is monotonic. */
int groups_may_forward(const struct groups *gs, int group, int64_t now_ms);

/* At shutdown, after the final commit: releases every lease held and leaves the live set. */
void groups_release_all(struct groups *gs);

#endif
