/* rpipe: the rounds of a Redis pipeline as pure logic, over a transport that conn.c implements
 * with hiredis (and the unit tests with a fake cluster). Each round sends the calls still to
 * go, grouped by node, reads every node's answers, and decides for each call: its answer, its
 * failure, or another round (NOSCRIPT, MOVED, ASK, and while a failover or a slot migration
 * runs, TRYAGAIN, CLUSTERDOWN, LOADING, READONLY, MASTERDOWN, NOREPLICAS, a connection the
 * switch closed, a write the replicas did not confirm in the switch; and once, on a new link,
 * a call whose link was closed under it without a timeout). An answer that nothing read after
 * it can change (no WAIT of its node still to come, no other round asked for) is handed on as
 * soon as it is read, so that the caller acts on it while Redis runs the next calls. Waiting is
 * bounded by redis.failover_wait_ms from the start of the pipeline. No network library. */
#ifndef DQ_RPIPE_H
#define DQ_RPIPE_H

#include <stddef.h>
#include <stdint.h>

#include "redis/conn.h"
#include "redis/slots.h"

/* A redirection followed this many times for one call is one too many: the cluster's nodes
 * disagree (CONN_E_REDIRECTS). */
#define RPIPE_REDIRECTS_MAX 5
/* The pause before a round that follows a wait-and-retry answer grows by this much up to the
 * most. */
#define RPIPE_PAUSE_STEP_MS 20
#define RPIPE_PAUSE_MAX_MS 100

/* A node: -1 is the one server (or the master Sentinel names); 0 and up a cluster node's
 * number (slots.h). */
struct rpipe_ops {
    /* Makes node's link usable (connects, looks for the master): 0, or -1 with why. */
    int (*open)(void *t, int node, struct conn_fail *why, char *text, size_t textlen);
    /* Queues call on node, after ASKING when asking: 0, or -1 (out of memory). */
    int (*send)(void *t, int node, const struct conn_call *call, int asking);
    void (*send_wait)(void *t, int node);       /* queues WAIT for the replicas */
    void (*flush)(void *t, int node);           /* sends what is queued */
    /* The next reply of node: 0 with *reply (error replies too), or -1 with why when the link
     * failed (it is closed; later reads of the round fail too). */
    int (*read)(void *t, int node, void **reply, struct conn_fail *why, char *text, size_t textlen);
    /* An error reply's text, else NULL. */
    const char *(*error_of)(const void *reply);
    /* WAIT's answer: 0 enough replicas, 1 too few, -1 the link failed; why when not 0. */
    int (*read_wait)(void *t, int node, struct conn_fail *why, char *text, size_t textlen);
    void (*reply_free)(void *reply);
    void (*reload)(void *t, int node);          /* loads the scripts again (after NOSCRIPT) */
    void (*drop)(void *t, int node);            /* closes the link: look again before its next use */
    void (*refresh)(void *t);                   /* cluster: reads the slot map (slots_adopt) */
    int (*holding)(void *t);                    /* 1 while a failover is known to run */
    int (*switched)(void *t, int node);         /* 1 when node's link predates a switch of master */
    int64_t (*now)(void *t);                    /* monotonic ms */
    void (*sleep)(void *t, int64_t ms);
    void (*waited)(void *t, int64_t ms);        /* a round waited ms for a failover to promote */
};

struct rpipe {
    const struct rpipe_ops *ops;
    void *t;
    struct slots_topo *topo;    /* a cluster's map; NULL: one server */
    int64_t wait_ms;            /* redis.failover_wait_ms */
    int replicas;               /* redis.wait_replicas */
};

/* The outcome of call j: reply (NULL when none) and fail (NULL when reply is the confirmed
 * answer). Returns 1 when it keeps reply (and frees it with ops->reply_free), else 0. */
typedef int rpipe_got_fn(void *ctx, size_t j, void *reply, const struct conn_fail *fail);

/* Runs n calls (see conn_pipeline). Returns 0 when every call got a confirmed answer, else -1
 * with err the first failure's text. */
int rpipe_run(const struct rpipe *p, size_t n, conn_build_fn *build, void *bctx, rpipe_got_fn *got,
              void *gctx, enum conn_confirm confirm, char *err, size_t errlen);

/* What an error reply asks of the pipeline. */
enum rpipe_verdict {
    RPIPE_ANSWER,       /* the call's own answer (a script's error, OOM, a wrong type) */
    RPIPE_NOSCRIPT,     /* load the scripts, send it again */
    RPIPE_MOVED,        /* the slot has another master: learn it, send it there */
    RPIPE_ASK,          /* the key is being migrated: send it once to the node named, ASKING */
    RPIPE_TRYAGAIN,     /* a slot migration: send it again shortly */
    RPIPE_CLUSTERDOWN,  /* the cluster is reconfiguring: read the map, send it again shortly */
    RPIPE_ELSEWHERE,    /* not the master (yet): READONLY, LOADING, MASTERDOWN, NOREPLICAS */
};
/* cluster: 1 when the redirections of a Redis Cluster apply. */
enum rpipe_verdict rpipe_verdict_of(const char *error, int cluster);

#endif
