/* leases: leases on partition groups in Redis, the heartbeat of live instances, hand-back
 * requests from operators, and the status each owner publishes for them. The keys share the
 * hash tag {ctl}, so they lie in one Redis Cluster slot and a script may touch several:
 *   <prefix>{ctl}:claim:<group>    owner token, PX = delay.claim_ttl_ms
 *   <prefix>{ctl}:instances        sorted set: token -> heartbeat expiry (epoch ms)
 *   <prefix>{ctl}:load             hash: token -> groups it holds (for the fair share)
 *   <prefix>{ctl}:release:<group>  an operator's request that the owner hand the group back
 *   <prefix>{ctl}:status:<group>   hash: owner, updated_ms, and "<topic>/<partition>" ->
 *                                  "<committed> <end> <head due ms, or -1>"
 * Nothing here overwrites or deletes another owner's lease: renew and release compare first,
 * atomically. One struct leases is used from one thread. */
#ifndef DQ_LEASES_H
#define DQ_LEASES_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/groupview.h"

/* An instance's token (groupview.h). */
#define LEASES_TOKEN_MAX GROUPVIEW_TOKEN_MAX
#define LEASES_TAG "{ctl}"   /* the hash tag of the control keys, after the prefix */

struct leases;

/* The token is "<host>/<http.listen>/<place>/<pid>.<random>", where place is a digest of the
 * kernel's boot id and the process's network namespace; the part before <pid>, its identity, is
 * the same after a restart on that host and namespace. Only one process at a time can listen at
 * that address there, so a lease held under this identity by another token is a dead
 * predecessor's, and claims_acquire takes it over at once instead of waiting for it to expire;
 * call it only once the HTTP server listens. NULL when out of memory. */
struct leases *leases_new(const struct config *cfg);
void leases_free(struct leases *c);
const char *leases_token(const struct leases *c);

/* Announces this instance, holding `held` groups, for two renew intervals. Returns
 * how many instances are live (at least 1) and in *least the fewest groups a live instance
 * holds, or -1 with err set. */
int leases_heartbeat(struct leases *c, int64_t now_ms, int held, int *least, char *err,
                     size_t errlen);
/* Logs an error when a group is leased under the key layout before {ctl} (<prefix>claim:<g>):
 * an older delayqd runs, which does not see this build's leases. */
void leases_check_old_layout(struct leases *c);

/* Leaves the live set (at shutdown). */
void leases_goodbye(struct leases *c);

/* Each returns 1 (done), 0 (the lease is someone else's, or free for release) or -1 (Redis did
 * not answer; err says why). With redis.wait_replicas, an acquisition or renewal counts only
 * once the replicas confirm it: else -1, and the lease's holder must not count on it. */
int leases_acquire(struct leases *c, int group, char *err, size_t errlen);
int leases_renew(struct leases *c, int group, char *err, size_t errlen);
int leases_release(struct leases *c, int group, char *err, size_t errlen);

/* Asks the owner of group to hand it back (as `delayq-claims release` does; who says who asked;
 * the request lasts 60 s): its token into owner, "" when nobody holds it (then nothing is
 * asked). 0, or -1 with err set. */
int leases_ask_release(struct leases *c, int group, const char *who, char *owner,
                       size_t ownerlen, char *err, size_t errlen);

/* 1 when an operator asked for the group back (the request is consumed), 0 when not, -1. */
int leases_release_requested(struct leases *c, int group, char *err, size_t errlen);

/* The token of whoever holds the group's lease into out ("" for nobody). 0, or -1 with err set
 * when Redis did not answer. */
int leases_owner(struct leases *c, int group, char *out, size_t outlen, char *err, size_t errlen);

/* Publishes the status of an owned group: n fields "<topic>/<partition>" with values
 * "<committed> <end> <head due>", STATUS_ROWS_PER_CALL to a call. Expires after three lease
 * times. */
int leases_publish(struct leases *c, int group, size_t n, const char *const *fields,
                   const char *const *values, char *err, size_t errlen);

/* Reads the view in one pipeline on c's connection into *out (lease_view_release frees it).
 * 0, or -1 with err set (out is left empty). */
int leases_read_view(struct leases *c, struct lease_view *out, char *err, size_t errlen);
void lease_view_release(struct lease_view *v);

#endif
