/* rpipe: the rounds of a Redis pipeline, over a transport. The contract is in include/redis/rpipe.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/rpipe.h"
#include "redis/sentinel.h"

enum rpipe_verdict rpipe_verdict_of(const char *error, int cluster)
{
    char host[SLOTS_HOST_MAX];
    int slot, port;

    if (strncmp(error, "NOSCRIPT", 8) == 0)
        return RPIPE_NOSCRIPT;
    if (cluster) {
        switch (slots_parse_redirect(error, &slot, host, &port)) {
        case SLOTS_MOVED: return RPIPE_MOVED;
        case SLOTS_ASK:   return RPIPE_ASK;
        default:          break;
        }
        if (strncmp(error, "TRYAGAIN", 8) == 0)
            return RPIPE_TRYAGAIN;
        if (strncmp(error, "CLUSTERDOWN", 11) == 0)
            return RPIPE_CLUSTERDOWN;
    }
    if (sentinel_error_means_elsewhere(error) && strncmp(error, "MOVED", 5) != 0 &&
        strncmp(error, "ASK", 3) != 0 && strncmp(error, "TRYAGAIN", 8) != 0 &&
        strncmp(error, "CLUSTERDOWN", 11) != 0)
        return RPIPE_ELSEWHERE;
    return RPIPE_ANSWER;
}

/* A call on its way. */
struct pend {
    size_t j;
    int node;           /* this round's node */
    size_t nr;          /* its node_round in this round */
    int ask;            /* an ASK named this node: ASKING first; else -1 */
    int reloaded;       /* answered NOSCRIPT once already */
    int redirects;      /* MOVED and ASK followed */
    int relinked;       /* sent again once after its link was closed under it */
    int sent;
    void *reply;        /* read this round */
    int short_of;       /* CONN_WAIT_EACH: its WAIT fell short */
    int handed;         /* its answer was handed on as it was read (final_at_read) */
    struct conn_fail fail;   /* no reply this round: why (text in its node's buffer) */
};

/* A node of one round. */
struct node_round {
    int node;
    size_t first, end;  /* its calls: todo[first .. end) */
    int open;           /* its link took the calls */
    int lost;           /* its link failed while reading */
    int short_of;       /* CONN_WAIT_END: its WAIT fell short */
    int reload, drop;   /* after the round: load the scripts, close the link */
    struct conn_fail fail;
    char text[256];
};

/* The state of one run. */
struct run {
    const struct rpipe *p;
    rpipe_got_fn *got;
    void *gctx;
    enum conn_confirm confirm;
    int waits;          /* WAIT is asked for */
    int64_t deadline;   /* monotonic ms: no more waiting for a failover after it */
    int rc;
    char *err;
    size_t errlen;
    int pause;          /* a call waits for something: pause before the next round */
};

/* Orders calls by their node of the round, each node's in the pipeline's order. */
static int by_node(const void *a, const void *b)
{
    const struct pend *x = a, *y = b;

    if (x->nr != y->nr)
        return (x->nr > y->nr) - (x->nr < y->nr);
    return (x->j > y->j) - (x->j < y->j);
}

/* Orders calls as the pipeline gave them: calls on one key keep their order across rounds. */
static int by_call(const void *a, const void *b)
{
    const struct pend *x = a, *y = b;

    return (x->j > y->j) - (x->j < y->j);
}

/* Hands call p its outcome. */
static void deliver(struct run *run, struct pend *p, void *reply, const struct conn_fail *fail)
{
    if (fail && run->rc == 0)
        snprintf(run->err, run->errlen, "%s", fail->text);
    if (fail)
        run->rc = -1;
    if (!run->got(run->gctx, p->j, reply, fail) && reply)
        run->p->ops->reply_free(reply);
}

/* Waiting is still allowed. */
static int may_wait(const struct run *run)
{
    return run->p->ops->now(run->p->t) < run->deadline;
}

/* Where call goes this round: the node an ASK named, the master of its key's slot, any node
 * for a keyless call, -1 for the one server; -2 when no node serves its slot. */
static int route(const struct rpipe *p, const struct conn_call *call, const struct pend *pd)
{
    size_t k = call->script >= 0 ? 0 : 1;
    int slot, node;

    if (!p->topo)
        return -1;   /* call is not read */
    if (pd->ask >= 0)
        return pd->ask;
    if ((call->script >= 0 && !call->nkeys) || call->argc <= k) {
        node = slots_any(p->topo);
    } else {
        slot = slots_of_key(call->argv[k], call->lens ? call->lens[k] : strlen(call->argv[k]));
        node = slots_owner(p->topo, slot);
    }
    return node >= 0 ? node : -2;
}

/* The nodes of one round, in the order of their first call. */
struct round {
    struct node_round *nodes;
    size_t nn, cap;
    size_t *at;         /* at[node + 2]: its place in nodes plus one, or 0 (node -2: no node) */
    size_t nat;
};

/* The node_round of node, added at its first call, its link opened then. NULL out of memory. */
static struct node_round *node_round_of(struct run *run, struct round *rd, int node)
{
    const struct rpipe_ops *ops = run->p->ops;
    size_t a = (size_t)(node + 2);
    struct node_round *nr;

    if (a >= rd->nat) {
        size_t nat = a + 16;
        size_t *at = realloc(rd->at, nat * sizeof(*at));
        if (!at)
            return NULL;
        memset(at + rd->nat, 0, (nat - rd->nat) * sizeof(*at));
        rd->at = at, rd->nat = nat;
    }
    if (rd->at[a])
        return &rd->nodes[rd->at[a] - 1];
    if (rd->nn == rd->cap) {
        size_t cap = rd->cap ? 2 * rd->cap : 4;
        struct node_round *nodes = realloc(rd->nodes, cap * sizeof(*nodes));
        if (!nodes)
            return NULL;
        rd->nodes = nodes, rd->cap = cap;
    }
    nr = &rd->nodes[rd->nn];
    *nr = (struct node_round){ .node = node };
    rd->at[a] = ++rd->nn;
    if (node == -2) {
        slots_mark_stale(run->p->topo);
        snprintf(nr->text, sizeof(nr->text), "redis cluster: no master serves the key's slot");
        nr->fail = (struct conn_fail){ CONN_E_NO_MASTER, nr->text };
    } else {
        nr->open = ops->open(run->p->t, node, &nr->fail, nr->text, sizeof(nr->text)) == 0;
    }
    return nr;
}

/* Builds call p once: routes it, and queues it on its node's link (after ASKING when an ASK
 * sent it there; with its own WAIT for CONN_WAIT_EACH). -1 out of memory. */
static int send_call(struct run *run, struct round *rd, struct pend *p, conn_build_fn *build,
                     void *bctx)
{
    const struct rpipe_ops *ops = run->p->ops;
    struct node_round *nr;
    struct conn_call call;

    build(bctx, p->j, &call);
    p->node = route(run->p, &call, p);
    p->sent = 0;
    p->reply = NULL;
    if (!(nr = node_round_of(run, rd, p->node)))
        return -1;
    p->nr = (size_t)(nr - rd->nodes);
    if (!nr->open)
        return 0;
    p->sent = ops->send(run->p->t, p->node, &call, p->ask >= 0) == 0;
    if (p->sent && run->waits && run->confirm == CONN_WAIT_EACH)
        ops->send_wait(run->p->t, p->node);
    return 0;
}

/* Is call p's answer, just read, final? Yes when nothing read after it can change it: no WAIT
 * of its node is still to come (its own WAIT, read already, or none asked for), and it asks
 * for no other round (a redirection, NOSCRIPT, a master elsewhere). Such an answer is handed on
 * at once, so that the caller acts on it while Redis runs the pipeline's next calls. */
static int final_at_read(const struct run *run, const struct pend *p)
{
    const char *error;

    if ((run->waits && run->confirm != CONN_WAIT_EACH) || p->short_of)
        return 0;
    error = run->p->ops->error_of(p->reply);
    return !error || rpipe_verdict_of(error, run->p->topo != NULL) == RPIPE_ANSWER;
}

/* Reads one node's answers of the round into its calls, handing on each final one at once. */
static void read_node(struct run *run, struct node_round *nr, struct pend *todo)
{
    const struct rpipe_ops *ops = run->p->ops;
    void *t = run->p->t;
    int each = run->waits && run->confirm == CONN_WAIT_EACH;

    for (size_t i = nr->first; i < nr->end && nr->open && !nr->lost; i++) {
        struct pend *p = &todo[i];
        void *r = NULL;
        if (!p->sent)
            continue;
        if (p->ask >= 0) {
            if (ops->read(t, nr->node, &r, &nr->fail, nr->text, sizeof(nr->text)) < 0) {
                nr->lost = 1;
                break;
            }
            ops->reply_free(r);   /* ASKING's OK */
        }
        if (ops->read(t, nr->node, &p->reply, &nr->fail, nr->text, sizeof(nr->text)) < 0) {
            nr->lost = 1;
            break;
        }
        if (each) {
            int w = ops->read_wait(t, nr->node, &p->fail, nr->text, sizeof(nr->text));
            if (w < 0) {
                nr->fail = p->fail;
                nr->lost = 1;
                break;
            }
            p->short_of = w;
        }
        if (final_at_read(run, p)) {
            p->handed = 1;
            deliver(run, p, p->reply, NULL);
            p->reply = NULL;
        }
    }
    if (nr->open && !nr->lost && run->waits && !each) {
        int w = ops->read_wait(t, nr->node, &nr->fail, nr->text, sizeof(nr->text));
        nr->lost = w < 0;
        nr->short_of = w > 0;
    }
}

/* Call p goes to the next round (*next); 0 when it may not (it then keeps its outcome to
 * deliver). pause: it waits for something to end. */
static int retry(struct run *run, struct pend *p, struct pend *next, size_t *nnext, int pause)
{
    if (pause && !may_wait(run))
        return 0;
    run->pause |= pause;
    next[(*nnext)++] = *p;
    next[*nnext - 1].reply = NULL;
    next[*nnext - 1].short_of = 0;
    return 1;
}

/* What an error reply r of call p asks for: 1 when p goes to the next round. */
static int follow(struct run *run, struct node_round *nr, struct pend *p, const char *error,
                  struct pend *next, size_t *nnext)
{
    const struct rpipe *rp = run->p;
    char host[SLOTS_HOST_MAX];
    int slot, port, id;

    switch (rpipe_verdict_of(error, rp->topo != NULL)) {
    case RPIPE_NOSCRIPT:
        if (p->reloaded)
            return 0;
        p->reloaded = nr->reload = 1;
        return retry(run, p, next, nnext, 0);
    case RPIPE_MOVED:
    case RPIPE_ASK:
        if (p->redirects++ == RPIPE_REDIRECTS_MAX)
            return 0;
        slots_parse_redirect(error, &slot, host, &port);
        if (!host[0] && slots_node_addr(rp->topo, nr->node, host, &port) < 0)
            return 0;
        if ((id = slots_node_id(rp->topo, host, port)) < 0)
            return 0;
        if (error[0] == 'M') {
            slots_moved(rp->topo, slot, id, rp->ops->now(rp->t));
            p->ask = -1;
        } else {
            p->ask = id;
        }
        return retry(run, p, next, nnext, 0);
    case RPIPE_TRYAGAIN:
        return retry(run, p, next, nnext, 1);
    case RPIPE_CLUSTERDOWN:
        slots_mark_stale(rp->topo);
        return retry(run, p, next, nnext, 1);
    case RPIPE_ELSEWHERE:
        nr->drop = 1;
        if (rp->topo)
            slots_mark_stale(rp->topo);
        return retry(run, p, next, nnext, 1);
    case RPIPE_ANSWER:
        break;
    }
    return 0;
}

/* The failure an error reply that asked for another round stands for, when there is none. */
static enum conn_code code_of(enum rpipe_verdict v)
{
    return v == RPIPE_MOVED || v == RPIPE_ASK ? CONN_E_REDIRECTS : CONN_E_NO_MASTER;
}

/* Decides call p of node nr after the round's reads. */
static void decide(struct run *run, struct node_round *nr, struct pend *p, struct pend *next,
                   size_t *nnext)
{
    const struct rpipe_ops *ops = run->p->ops;
    void *t = run->p->t;
    struct conn_fail fail = nr->fail;
    enum rpipe_verdict v;
    const char *error;
    int in_switch;

    if (p->handed)
        return;
    in_switch = ops->holding(t) || ops->switched(t, nr->node);
    if (!p->reply) {
        if (nr->open && !p->sent && !nr->lost)
            fail = (struct conn_fail){ CONN_E_MEMORY, "out of memory queueing a redis call" };
        else if (in_switch && retry(run, p, next, nnext, 1))
            return;   /* the switch closed the link, or the old master refused it */
        else if (nr->lost && fail.code == CONN_E_CONN && !p->relinked++ && retry(run, p, next, nnext, 0))
            return;   /* closed under it (a restart, an idle timeout): once more, on a new link */
        deliver(run, p, NULL, &fail);
        return;
    }
    p->ask = -1;   /* an ASK holds for one answer */
    error = ops->error_of(p->reply);
    v = error ? rpipe_verdict_of(error, run->p->topo != NULL) : RPIPE_ANSWER;
    if (v != RPIPE_ANSWER && follow(run, nr, p, error, next, nnext)) {
        ops->reply_free(p->reply);
        return;
    }
    if (v != RPIPE_ANSWER && v != RPIPE_NOSCRIPT) {
        fail = (struct conn_fail){ code_of(v), error };
        deliver(run, p, NULL, &fail);
        ops->reply_free(p->reply);
        return;
    }
    if (p->short_of || nr->short_of) {
        if (in_switch && retry(run, p, next, nnext, 1)) {
            ops->reply_free(p->reply);
            return;   /* running it again on the new master is safe, losing it is not */
        }
        fail = (struct conn_fail){ CONN_E_UNCONFIRMED, p->short_of ? p->fail.text : nr->fail.text };
        deliver(run, p, p->reply, &fail);
        return;
    }
    deliver(run, p, p->reply, NULL);
}

/* One round over todo[0 .. ntodo): every call built and queued on its node's link, every
 * node's answers read, then each call decided; the calls to send again go to next. */
static void round_of(struct run *run, struct pend *todo, size_t ntodo, struct pend *next,
                     size_t *nnext, conn_build_fn *build, void *bctx)
{
    const struct rpipe *rp = run->p;
    struct round rd = { 0 };
    static const struct conn_fail no_memory = { CONN_E_MEMORY, "out of memory" };
    size_t i;

    qsort(todo, ntodo, sizeof(*todo), by_call);
    for (i = 0; i < ntodo && send_call(run, &rd, &todo[i], build, bctx) == 0; i++)
        ;
    if (i < ntodo) {   /* out of memory: nothing of the round is read */
        for (size_t k = 0; k < ntodo; k++)
            deliver(run, &todo[k], NULL, &no_memory);
        for (size_t k = 0; k < rd.nn; k++)
            if (rd.nodes[k].open)
                rp->ops->drop(rp->t, rd.nodes[k].node);
        goto out;
    }
    for (size_t k = 0; k < rd.nn; k++) {
        struct node_round *nr = &rd.nodes[k];
        nr->fail.text = nr->text;   /* rd.nodes may have moved since open wrote it there */
        if (nr->open && run->waits && run->confirm != CONN_WAIT_EACH)
            rp->ops->send_wait(rp->t, nr->node);
        if (nr->open)
            rp->ops->flush(rp->t, nr->node);
    }
    qsort(todo, ntodo, sizeof(*todo), by_node);
    for (i = 0; i < ntodo; i++) {
        if (i == 0 || todo[i].nr != todo[i - 1].nr)
            rd.nodes[todo[i].nr].first = i;
        rd.nodes[todo[i].nr].end = i + 1;
    }
    for (size_t k = 0; k < rd.nn; k++)
        read_node(run, &rd.nodes[k], todo);
    for (size_t k = 0; k < rd.nn; k++) {
        struct node_round *nr = &rd.nodes[k];
        for (i = nr->first; i < nr->end; i++)
            decide(run, nr, &todo[i], next, nnext);
        if (nr->reload && nr->open && !nr->lost)
            rp->ops->reload(rp->t, nr->node);
        if (nr->drop)
            rp->ops->drop(rp->t, nr->node);
    }
out:
    free(rd.nodes);
    free(rd.at);
}

/* Before a round: reads the slot map when it is due, and waits while a failover runs. 0, or
 * -1 when the failover outlasted the wait (text in why). */
static int before_round(struct run *run, char *why, size_t whylen)
{
    const struct rpipe *rp = run->p;

    if (rp->topo && slots_refresh_begin(rp->topo, rp->ops->now(rp->t)))
        rp->ops->refresh(rp->t);
    int64_t began = -1;

    while (rp->ops->holding(rp->t)) {
        int64_t now = rp->ops->now(rp->t), left = run->deadline - now;
        if (began < 0)
            began = now;
        if (left <= 0) {
            rp->ops->waited(rp->t, now - began);
            snprintf(why, whylen, "redis: a failover of the master has run longer than "
                     "redis.failover_wait_ms (%lld ms)", (long long)rp->wait_ms);
            return -1;
        }
        rp->ops->sleep(rp->t, left < RPIPE_PAUSE_STEP_MS ? left : RPIPE_PAUSE_STEP_MS);
    }
    if (began >= 0)
        rp->ops->waited(rp->t, rp->ops->now(rp->t) - began);
    return 0;
}

int rpipe_run(const struct rpipe *p, size_t n, conn_build_fn *build, void *bctx, rpipe_got_fn *got,
              void *gctx, enum conn_confirm confirm, char *err, size_t errlen)
{
    struct pend *todo = malloc((n ? n : 1) * sizeof(*todo)), *next = malloc((n ? n : 1) * sizeof(*next));
    struct run run = { p, got, gctx, confirm, confirm != CONN_NO_WAIT && p->replicas > 0,
                       p->ops->now(p->t) + p->wait_ms, 0, err, errlen, 0 };
    size_t ntodo = n;
    char why[256];

    if (!todo || !next) {
        struct conn_fail fail = { CONN_E_MEMORY, "out of memory" };
        for (size_t j = 0; j < n; j++)
            deliver(&run, &(struct pend){ .j = j }, NULL, &fail);
        free(todo);
        free(next);
        return -1;
    }
    for (size_t j = 0; j < n; j++)
        todo[j] = (struct pend){ .j = j, .ask = -1 };
    for (int round = 0; ntodo; round++) {
        size_t nnext = 0;
        int64_t pause = RPIPE_PAUSE_STEP_MS * (round + 1);
        if (before_round(&run, why, sizeof(why)) < 0) {
            struct conn_fail fail = { CONN_E_NO_MASTER, why };
            for (size_t i = 0; i < ntodo; i++)
                deliver(&run, &todo[i], NULL, &fail);
            break;
        }
        run.pause = 0;
        round_of(&run, todo, ntodo, next, &nnext, build, bctx);
        memcpy(todo, next, nnext * sizeof(*todo));
        ntodo = nnext;
        if (run.pause && ntodo)
            p->ops->sleep(p->t, pause < RPIPE_PAUSE_MAX_MS ? pause : RPIPE_PAUSE_MAX_MS);
    }
    free(todo);
    free(next);
    return run.rc;
}
