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
 * RDB_WAIT_END  one WAIT per node after its calls of a round: a short one makes that node's
 *               calls RDB_E_UNCONFIRMED, and no other node's.
 * RDB_WAIT_EACH a WAIT after each call, so that one short WAIT fails that call alone, while
 *               Redis already runs the next call. */
enum rdb_confirm { RDB_NO_WAIT, RDB_WAIT_END, RDB_WAIT_EACH };

/* Why a call has no (confirmed) answer: a value to branch on, with text to log beside it. */
enum rdb_code {
    RDB_OK,
    RDB_E_CONN,         /* Redis could not be reached, or the connection failed */
    RDB_E_TIMEOUT,      /* no answer within redis.timeout_ms */
    RDB_E_REPLY,        /* Redis answered an error (rdb_call; a pipeline hands error replies on) */
    RDB_E_UNCONFIRMED,  /* fewer than redis.wait_replicas replicas confirmed the write */
    RDB_E_REDIRECTS,    /* redirected (MOVED, ASK) more often than a call may be */
    RDB_E_NO_MASTER,    /* no master serves the key's slot, or a failover outlasted
                         * redis.failover_wait_ms */
    RDB_E_MEMORY,       /* out of memory */
};

struct rdb_fail {
    enum rdb_code code;
    const char *text;   /* valid only during the callback */
};

/* Fills call j of a pipeline. The arrays it points to need to stay valid only until the next
 * build or the end of the pipeline: each call is queued (copied) at once. A call may be built
 * several times (sent again after NOSCRIPT, a redirection or a failover). */
typedef void rdb_build_fn(void *ctx, size_t j, struct rdb_call *call);
/* Called exactly once per call of a pipeline with its outcome, node by node (calls to one node
 * in their order): fail NULL: r is the call's answer (an error reply too), its writes
 * confirmed when that was asked for; fail->code RDB_E_UNCONFIRMED: r is the answer but too few
 * replicas confirmed its writes (a failover could take them back); any other fail: r is NULL
 * and the call has no answer (it may or may not have run). r is valid only during the call. */
typedef void rdb_reply_fn(void *ctx, size_t j, const struct rdb_reply *r, const struct rdb_fail *fail);

/* Sends n calls in one pipeline, rounds of them per node, and hands each outcome to fn. A call
 * is sent again when Redis asks for it (NOSCRIPT after the scripts are loaded again, MOVED,
 * ASK) and, within redis.failover_wait_ms, while a failover or a slot migration runs (TRYAGAIN,
 * CLUSTERDOWN, LOADING, READONLY, MASTERDOWN, a connection closed by the switch): so a script
 * must give the same outcome when it runs twice. Each node's writes are confirmed on their own
 * (WAIT per node). Returns 0 when every call got a confirmed answer, else -1 with err the
 * first failure's text (fn was told of each). */
int rdb_pipeline(struct rdb *db, size_t n, rdb_build_fn *build, rdb_reply_fn *fn, void *ctx,
                 enum rdb_confirm confirm, char *err, size_t errlen);

/* The Redis Cluster hash slot of key, whose records may share a call; -1 when Redis is no
 * cluster (any keys may). */
int rdb_slot_of(const struct rdb *db, const char *key, size_t len);

/* One call: its reply (caller frees), or NULL with err set when Redis could not be reached or
 * answered an error ("redis: <error>"); rdb_code then says which. A reply whose writes too few
 * replicas confirmed (RDB_WAIT_END) is returned, and rdb_unconfirmed says so. */
struct rdb_reply *rdb_call(struct rdb *db, const struct rdb_call *call, enum rdb_confirm confirm,
                           char *err, size_t errlen);

/* A command given as its words, ended by NULL: rdb_command(db, err, errlen, "GET", key, NULL).
 * As rdb_call without WAIT. */
struct rdb_reply *rdb_command(struct rdb *db, char *err, size_t errlen, const char *name, ...)
    __attribute__((sentinel));

/* After rdb_call with RDB_WAIT_END: NULL when its writes were confirmed (or none are asked
 * for), else why not: fewer than redis.wait_replicas replicas within wait_timeout_ms. */
const char *rdb_unconfirmed(const struct rdb *db);

/* The kind of the last failure of rdb_call or rdb_command on db (RDB_OK after a success). */
enum rdb_code rdb_code(const struct rdb *db);

/* 1 when the Redis last connected to may evict keys (its maxmemory-policy, into policy, is not
 * noeviction), else 0 (policy "" when it was not known). Every new connection reads it again. */
int rdb_eviction(char *policy, size_t len);

/* PING: 0 when Redis answers. */
int rdb_ping(struct rdb *db, char *err, size_t errlen);

#endif
