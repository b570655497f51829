/* groups: which partition groups this instance forwards. It holds their leases (claims),
 * renews them every third of delay.claim_ttl_ms, fences a group whose lease it could not renew
 * in time (before the lease can expire), hands groups back gracefully for the fair share or
 * when an operator asks, and takes free ones: a dead owner's within the TTL and a renew interval.
 * Runs on the holder's thread and calls nothing of it: groups_run returns the changes the holder
 * is to make (assign a group won, drop one lost, quiesce one handed back, publish status), and
 * the holder tells it when a hand-back is committed (groups_let_go). */
#ifndef DQ_GROUPS_H
#define DQ_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/held.h"
#include "core/levels.h"

struct groups;

/* One partition's line in the status an owner publishes (leases.h). */
struct part_status {
    char field[TOPIC_NAME_MAX + 16];   /* "<topic>/<partition>" */
    char value[64];                    /* "<committed> <end> <head due ms, or -1>" */
};

enum group_change_kind {
    GROUP_WON,          /* its lease is ours now: assign its partitions (groups_let_go if that fails) */
    GROUP_HAND_BACK,    /* take no more of its messages; once those taken are done, commit and
                         * groups_let_go */
    GROUP_LOST,         /* its lease was not renewed in time, or is someone else's: drop its
                         * messages at once, commit nothing more */
    GROUP_STATUS,       /* time to publish its status: groups_publish */
};

struct group_change {
    int group;
    enum group_change_kind kind;
};

/* NULL when out of memory. Owns no partitions until groups_run takes some. */
struct groups *groups_new(const struct config *cfg);
void groups_free(struct groups *gs);

/* Every loop turn: fences groups whose lease ran out, and every renew interval heartbeats,
 * renews, rebalances and asks for status. Returns how many changes the holder is to apply, in
 * order, in *changes (valid until the next call). now_ms is monotonic. */
size_t groups_run(struct groups *gs, int64_t now_ms, const struct group_change **changes);

/* 1 while the group is being handed back. */
int groups_handing_back(const struct groups *gs, int group);

/* Releases the lease of a group handed back (its messages done and committed), or of one won
 * whose partitions could not be assigned; the log says "<why> group=<group>". */
void groups_let_go(struct groups *gs, int group, const char *why);

/* Publishes the n status lines of a group held (errors are logged, at debug level). */
void groups_publish(struct groups *gs, int group, const struct part_status *rows, size_t n);

/* Monotonic time by which groups_run wants to run again. */
int64_t groups_next_ms(const struct groups *gs);

/* 1 when messages of the group may be taken and acted on (owned, not being handed back). */
int groups_usable(const struct groups *gs, int group);

/* 1 while this instance's lease on the group is surely valid (also while handing it back):
 * only then may a message of it be sent or its offsets committed. now_ms is monotonic. */
int groups_may_forward(const struct groups *gs, int group, int64_t now_ms);

/* This instance's lease token (leases.h). */
const char *groups_token(const struct groups *gs);

/* Whose lease the group is under now, read from Redis: its token into out, "" for nobody. 0, or
 * -1 with err set when Redis did not answer. */
int groups_owner(struct groups *gs, int group, char *out, size_t outlen, char *err, size_t errlen);

/* The group's ownership epoch, which changes whenever this instance wins or lets go of it; a
 * message records it when taken (held.epoch). */
uint32_t groups_epoch(const struct groups *gs, int group);

/* Right before m is sent: 1 when the ownership it was taken under still holds, surely. */
int groups_may_send(const struct groups *gs, const struct held *m, int64_t now_ms);

/* At shutdown, after the final commit: releases every lease held and leaves the live set. */
void groups_release_all(struct groups *gs);

#endif
