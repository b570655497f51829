/* rdb: the connections to Redis, and (with watch.c) the one module that speaks hiredis. It
 * knows where the master is (the configured server, the one the Sentinels name, checked with
 * ROLE, or in a Redis Cluster the master of each slot, from CLUSTER SLOTS and redirections),
 * connects lazily, and drops the connection on a connection error or on a reply that
 * says this is not the master (sentinel_error_means_elsewhere), so that the next call looks
 * again, after a backoff when connecting failed. It loads the scripts it is given on every new
 * connection and loads them again when Redis has lost them (NOSCRIPT). It runs calls in
 * pipelines and, with redis.wait_replicas, confirms their writes with WAIT on the connection
 * that made them. With Sentinels it heeds their failover announcements (watch.h).
 * A struct rdb is one connection (in a cluster, one per master): use it from one thread at a
 * time. */
#ifndef DQ_RDB_H
#define DQ_RDB_H

#include <stddef.h>

#include "config.h"

struct rdb;

/* A reply, read through the accessors below. Status replies ("OK") read as strings. */
struct rdb_reply;

enum rdb_type { RDB_NIL, RDB_INT, RDB_STR, RDB_ARR, RDB_ERR };

enum rdb_type rdb_type(const struct rdb_reply *r);
long long rdb_int(const struct rdb_reply *r);                   /* RDB_INT's value, else 0 */
/* The text of RDB_STR and RDB_ERR (NUL-terminated; *len its length when len is not NULL),
 * else NULL. */
const char *rdb_str(const struct rdb_reply *r, size_t *len);
size_t rdb_count(const struct rdb_reply *r);                    /* RDB_ARR's elements, else 0 */
const struct rdb_reply *rdb_at(const struct rdb_reply *r, size_t i);   /* i < rdb_count */
/* 1 when r is the string (or status) s. */
int rdb_is(const struct rdb_reply *r, const char *s);
void rdb_reply_free(struct rdb_reply *r);

/* scripts: the Lua texts this connection's calls name by index (kept, not copied). NULL when
 * out of memory. */
struct rdb *rdb_new(const struct config *cfg, const char *const *scripts, int nscripts);
void rdb_free(struct rdb *db);

/* One call: script s (0 <= s < nscripts) with argv[0..nkeys) its keys and the rest its
 * arguments, or with script -1 the command argv[0] (its key, when it has one, is argv[1]).
 * In a cluster, all keys of a call must lie in one slot: the first one routes it. lens NULL:
 * the arguments are NUL-terminated text. */
struct rdb_call {
    int script;
    size_t nkeys;
    size_t argc;
    const char *const *argv;
    const size_t *lens;
};

/* What a pipeline's writes wait for, with redis.wait_replicas > 0 (else nothing is waited for):
 * RDB_WAIT_END  one WAIT after all calls; rdb_unconfirmed says afterwards whether it fell short.
 * RDB_WAIT_EACH a WAIT after each call: a call whose writes too few replicas confirmed is
 *               answered with NULL and the reason, so nothing acts on a write a failover could
 *               take back, while Redis already runs the next call. */
enum rdb_confirm { RDB_NO_WAIT, RDB_WAIT_END, RDB_WAIT_EACH };

/* Fills call j of a pipeline. The arrays it points to need to stay valid only until the next
 * build or the end of the pipeline: each call is queued (copied) at once. A call may be built
 * twice (sent again after NOSCRIPT). */
typedef void rdb_build_fn(void *ctx, size_t j, struct rdb_call *call);
/* Called once per call of a pipeline as its reply arrives (in order, except that calls to
 * different masters of a cluster are answered node by node): r is the reply (an error reply
 * too: the call's own answer), valid only during the call; or r is NULL and err says why the
 * call has no reply. */
typedef void rdb_reply_fn(void *ctx, size_t j, const struct rdb_reply *r, const char *err);

/* Sends n calls in one pipeline and hands each reply to fn while Redis computes the next ones.
 * Calls answered NOSCRIPT are sent once more after the scripts are loaded again, so a script
 * must give the same outcome when it runs twice. Returns 0, or -1 with err set when Redis could
 * not be reached or the connection failed (fn got NULL for each call not answered). */
int rdb_pipeline(struct rdb *db, size_t n, rdb_build_fn *build, rdb_reply_fn *fn, void *ctx,
                 enum rdb_confirm confirm, char *err, size_t errlen);

/* The Redis Cluster hash slot of key, whose records may share a call; -1 when Redis is no
 * cluster (any keys may). */
int rdb_slot_of(const struct rdb *db, const char *key, size_t len);

/* One call: its reply (caller frees), or NULL with err set when Redis could not be reached or
 * answered an error ("redis: <error>"). */
struct rdb_reply *rdb_call(struct rdb *db, const struct rdb_call *call, enum rdb_confirm confirm,
                           char *err, size_t errlen);

/* A command given as its words, ended by NULL: rdb_command(db, err, errlen, "GET", key, NULL).
 * As rdb_call without WAIT. */
struct rdb_reply *rdb_command(struct rdb *db, char *err, size_t errlen, const char *name, ...)
    __attribute__((sentinel));

/* After a pipeline or call with RDB_WAIT_END: NULL when its writes were confirmed (or none are
 * asked for), else why not: fewer than redis.wait_replicas replicas within wait_timeout_ms. */
const char *rdb_unconfirmed(const struct rdb *db);

/* PING: 0 when Redis answers. */
int rdb_ping(struct rdb *db, char *err, size_t errlen);

#endif
