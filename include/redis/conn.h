/* conn: the connections to Redis, and (with watch.c) the one module that speaks hiredis. It
 * knows where the master is (the configured server, the one the Sentinels name, checked with
 * ROLE, or in a Redis Cluster the master of each slot, from CLUSTER SLOTS and redirections),
 * connects lazily, and drops the connection on a connection error or on a reply that
 * says this is not the master (sentinel_error_means_elsewhere), so that the next call looks
 * again, after a backoff when connecting failed. It loads the scripts it is given on every new
 * connection and loads them again when Redis has lost them (NOSCRIPT). It runs calls in
 * pipelines and, with redis.wait_replicas, confirms their writes with WAIT on the connection
 * that made them. With Sentinels it heeds their failover announcements (watch.h).
 * A struct conn is one connection (in a cluster, one per master): use it from one thread at a
 * time. */
#ifndef DQ_CONN_H
#define DQ_CONN_H

#include <stddef.h>

#include "core/config.h"

struct conn;

/* A reply, read through the accessors below. Status replies ("OK") read as strings. */
struct conn_reply;

enum conn_type { CONN_NIL, CONN_INT, CONN_STR, CONN_ARR, CONN_ERR };

enum conn_type conn_type(const struct conn_reply *r);
long long conn_int(const struct conn_reply *r);                   /* CONN_INT's value, else 0 */
/* The text of CONN_STR and CONN_ERR (NUL-terminated; *len its length when len is not NULL),
 * else NULL. */
const char *conn_str(const struct conn_reply *r, size_t *len);
size_t conn_count(const struct conn_reply *r);                    /* CONN_ARR's elements, else 0 */
const struct conn_reply *conn_at(const struct conn_reply *r, size_t i);   /* i < conn_count */
/* 1 when r is the string (or status) s. */
int conn_is(const struct conn_reply *r, const char *s);
void conn_reply_free(struct conn_reply *r);

/* scripts: the Lua texts this connection's calls name by index (kept, not copied). NULL when
 * out of memory. */
struct conn *conn_new(const struct config *cfg, const char *const *scripts, int nscripts);
void conn_free(struct conn *db);

/* One call: script s (0 <= s < nscripts) with argv[0..nkeys) its keys and the rest its
 * arguments, or with script -1 the command argv[0] (its key, when it has one, is argv[1]).
 * In a cluster, all keys of a call must lie in one slot: the first one routes it. lens NULL:
 * the arguments are NUL-terminated text. */
struct conn_call {
    int script;
    size_t nkeys;
    size_t argc;
    const char *const *argv;
    const size_t *lens;
};

/* What a pipeline's writes wait for, with redis.wait_replicas > 0 (else nothing is waited for):
 * CONN_WAIT_END  one WAIT per node after its calls of a round: a short one makes that node's
 *               calls CONN_E_UNCONFIRMED, and no other node's.
 * CONN_WAIT_EACH a WAIT after each call, so that one short WAIT fails that call alone, while
 *               Redis already runs the next call. */
enum conn_confirm { CONN_NO_WAIT, CONN_WAIT_END, CONN_WAIT_EACH };

/* Why a call has no (confirmed) answer: a value to branch on, with text to log beside it. */
enum conn_code {
    CONN_OK,
    CONN_E_CONN,         /* Redis could not be reached, or the connection failed */
    CONN_E_TIMEOUT,      /* no answer within redis.timeout_ms */
    CONN_E_REPLY,        /* Redis answered an error (conn_call; a pipeline hands error replies on) */
    CONN_E_UNCONFIRMED,  /* fewer than redis.wait_replicas replicas confirmed the write */
    CONN_E_REDIRECTS,    /* redirected (MOVED, ASK) more often than a call may be */
    CONN_E_NO_MASTER,    /* no master serves the key's slot, or a failover outlasted
                         * redis.failover_wait_ms */
    CONN_E_MEMORY,       /* out of memory */
};

struct conn_fail {
    enum conn_code code;
    const char *text;   /* valid only during the callback */
};

/* Fills call j of a pipeline. The arrays it points to need to stay valid only until the next
 * build or the end of the pipeline: each call is queued (copied) at once. A call may be built
 * several times (sent again after NOSCRIPT, a redirection or a failover). */
typedef void conn_build_fn(void *ctx, size_t j, struct conn_call *call);
/* Called exactly once per call of a pipeline with its outcome, node by node (calls to one node
 * in their order): fail NULL: r is the call's answer (an error reply too), its writes
 * confirmed when that was asked for; fail->code CONN_E_UNCONFIRMED: r is the answer but too few
 * replicas confirmed its writes (a failover could take them back); any other fail: r is NULL
 * and the call has no answer (it may or may not have run). r is valid only during the call.
 * An answer is handed on as soon as it is read when nothing later can change it (no WAIT
 * asked for, or CONN_WAIT_EACH), while the pipeline's later answers are still being read: the
 * callback must not use the pipeline's struct conn. */
typedef void conn_reply_fn(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail);

/* Sends n calls in one pipeline, rounds of them per node, and hands each outcome to fn. A call
 * is sent again when Redis asks for it (NOSCRIPT after the scripts are loaded again, MOVED,
 * ASK) and, within redis.failover_wait_ms, while a failover or a slot migration runs (TRYAGAIN,
 * CLUSTERDOWN, LOADING, READONLY, MASTERDOWN, a connection closed by the switch): so a script
 * must give the same outcome when it runs twice. Each node's writes are confirmed on their own
 * (WAIT per node). Returns 0 when every call got a confirmed answer, else -1 with err the
 * first failure's text (fn was told of each). */
int conn_pipeline(struct conn *db, size_t n, conn_build_fn *build, conn_reply_fn *fn, void *ctx,
                 enum conn_confirm confirm, char *err, size_t errlen);

/* The Redis Cluster hash slot of key, whose records may share a call; -1 when Redis is no
 * cluster (any keys may). */
int conn_slot_of(const struct conn *db, const char *key, size_t len);

/* One call: its reply (caller frees), or NULL with err set when Redis could not be reached or
 * answered an error ("redis: <error>"); conn_code then says which. A reply whose writes too few
 * replicas confirmed (CONN_WAIT_END) is returned, and conn_unconfirmed says so. */
struct conn_reply *conn_call(struct conn *db, const struct conn_call *call, enum conn_confirm confirm,
                           char *err, size_t errlen);

/* A command given as its words, ended by NULL: conn_command(db, err, errlen, "GET", key, NULL).
 * As conn_call without WAIT. */
struct conn_reply *conn_command(struct conn *db, char *err, size_t errlen, const char *name, ...)
    __attribute__((sentinel));

/* After conn_call with CONN_WAIT_END: NULL when its writes were confirmed (or none are asked
 * for), else why not: fewer than redis.wait_replicas replicas within wait_timeout_ms. */
const char *conn_unconfirmed(const struct conn *db);

/* The kind of the last failure of conn_call or conn_command on db (CONN_OK after a success). */
enum conn_code conn_code(const struct conn *db);

/* 1 when the Redis last connected to may evict keys (its maxmemory-policy, into policy, is not
 * noeviction), else 0 (policy "" when it was not known). Every new connection reads it again. */
int conn_eviction(char *policy, size_t len);

/* Bumped whenever the master moved as the Sentinels announced it (a replica promoted, a switch
 * elsewhere); 0 without Sentinels. */
unsigned conn_master_moves(void);

/* PING: 0 when Redis answers. */
int conn_ping(struct conn *db, char *err, size_t errlen);

/* Subscribes db, a conn used for nothing else from then on, to channel: on the one server or
 * the master the Sentinels name (a replica hears the PUBLISH of its master too), or on any node
 * of a Redis Cluster (every node hears every PUBLISH). 0, or -1 with err set. */
int conn_subscribe(struct conn *db, const char *channel, char *err, size_t errlen);
/* Waits up to timeout_ms for a message of the subscription: 1 with its payload in out, 0 when
 * none came, or -1 with err set when the connection failed (subscribe again). */
int conn_message(struct conn *db, int timeout_ms, char *out, size_t outlen, char *err,
                 size_t errlen);

#endif
