/* The pipeline engine against a fake Redis Cluster: redirections, waits, per-node WAIT and
 * per-call outcomes, with a clock that moves only when the engine sleeps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/rpipe.h"
#include "unit.h"

#define FNODES 6
#define FQUEUE 64
#define FSCRIPTS 8

struct freply {
    int err;
    char text[96];
};

struct fnode {
    int down;               /* connecting fails */
    int wait_short;         /* WAIT answers too few replicas */
    int lose_at;            /* the link fails at this read of the round (0: never) */
    int lose_times;         /* ... in this many rounds (0: one) */
    int reads;
    struct freply q[FQUEUE];
    int qn, qr;
    int opened, drops, reloads, askings;
    int served;             /* calls answered OK */
};

/* An error node answers for slot, times times. */
struct fscript {
    int node, slot, times;
    const char *err;
};

static struct fake {
    struct slots_topo topo;
    int owner[SLOTS_COUNT];         /* the truth: which node serves each slot */
    int ask_to[SLOTS_COUNT];        /* a slot migrating from its owner to this node, or -1 */
    struct slots_range published[FNODES + 2];
    size_t npublished;              /* what a refresh reads (it may be older than the truth) */
    struct fnode n[FNODES];
    struct fscript script[FSCRIPTS];
    int64_t now, hold_until;
    int switched;
    int64_t waited;         /* ms the pipeline said it waited for a failover */
    int refreshes, sleeps;
} F;

static const char *const keys[] = { "a", "b", "c", "d", "e", "f", "g", "h" };

static int kslot(size_t j)
{
    return slots_of_key(keys[j], strlen(keys[j]));
}

static void fake_init(void)
{
    slots_topo_release(&F.topo);
    memset(&F, 0, sizeof(F));
    slots_topo_init(&F.topo);
    for (int i = 0; i < FNODES; i++)
        slots_node_id(&F.topo, "127.0.0.1", 7000 + i);   /* fake node i is number i */
    for (int s = 0; s < SLOTS_COUNT; s++) {
        F.owner[s] = s < 8192 ? 0 : 1;
        F.ask_to[s] = -1;
    }
    F.published[0] = (struct slots_range){ 0, 8191, "127.0.0.1", 7000 };
    F.published[1] = (struct slots_range){ 8192, 16383, "127.0.0.1", 7001 };
    F.npublished = 2;
}

/* The map the engine starts with: what is published now. */
static void fake_adopt(void)
{
    slots_adopt(&F.topo, F.published, F.npublished, F.now);
}

static struct freply *push(int node, int err, const char *text)
{
    struct fnode *n = &F.n[node];
    struct freply *r = &n->q[n->qn++ % FQUEUE];

    r->err = err;
    snprintf(r->text, sizeof(r->text), "%s", text);
    return r;
}

static void push_redirect(int node, const char *kind, int slot, int to)
{
    struct freply *r = push(node, 1, "");

    snprintf(r->text, sizeof(r->text), "%s %d 127.0.0.1:%d", kind, slot, 7000 + to);
}

static int f_open(void *t, int node, struct conn_fail *why, char *text, size_t textlen)
{
    (void)t;
    if (F.n[node].down) {
        snprintf(text, textlen, "connection refused");
        *why = (struct conn_fail){ CONN_E_CONN, text };
        slots_mark_stale(&F.topo);
        return -1;
    }
    F.n[node].opened++;
    F.n[node].reads = 0;
    return 0;
}

static int f_send(void *t, int node, const struct conn_call *call, int asking)
{
    int slot = slots_of_key(call->argv[1], strlen(call->argv[1]));

    (void)t;
    if (asking) {
        F.n[node].askings++;
        push(node, 0, "OK");   /* ASKING's */
        push(node, 0, "OK");
        return 0;
    }
    for (int i = 0; i < FSCRIPTS; i++) {
        struct fscript *s = &F.script[i];
        if (s->err && s->node == node && s->slot == slot && s->times > 0) {
            s->times--;
            push(node, 1, s->err);
            return 0;
        }
    }
    if (F.owner[slot] != node)
        push_redirect(node, "MOVED", slot, F.owner[slot]);
    else if (F.ask_to[slot] >= 0)
        push_redirect(node, "ASK", slot, F.ask_to[slot]);
    else
        push(node, 0, "OK");
    return 0;
}

static void f_send_wait(void *t, int node)
{
    (void)t;
    push(node, 0, "WAIT");
}

static void f_flush(void *t, int node)
{
    (void)t;
    (void)node;
}

static int f_read(void *t, int node, void **reply, struct conn_fail *why, char *text, size_t textlen)
{
    struct fnode *n = &F.n[node];

    (void)t;
    if (n->qr == n->qn || (n->lose_at && ++n->reads >= n->lose_at)) {
        n->qr = n->qn;
        if (n->lose_times-- <= 1)
            n->lose_at = 0;
        snprintf(text, textlen, "redis: connection reset");
        *why = (struct conn_fail){ CONN_E_CONN, text };
        return -1;
    }
    *reply = &n->q[n->qr++ % FQUEUE];
    if (!((struct freply *)*reply)->err && strcmp(((struct freply *)*reply)->text, "OK") == 0)
        n->served++;
    return 0;
}

static const char *f_error_of(const void *reply)
{
    const struct freply *r = reply;

    return r->err ? r->text : NULL;
}

static int f_read_wait(void *t, int node, struct conn_fail *why, char *text, size_t textlen)
{
    void *r;

    if (f_read(t, node, &r, why, text, textlen) < 0)
        return -1;
    if (!F.n[node].wait_short)
        return 0;
    snprintf(text, textlen, "0 of 1 replicas confirmed the write");
    *why = (struct conn_fail){ CONN_E_UNCONFIRMED, text };
    return 1;
}

static void f_reply_free(void *reply)
{
    (void)reply;   /* replies live in their node's queue */
}

static void f_reload(void *t, int node)
{
    (void)t;
    F.n[node].reloads++;
}

static void f_drop(void *t, int node)
{
    (void)t;
    F.n[node].drops++;
}

static void f_refresh(void *t)
{
    (void)t;
    F.refreshes++;
    if (slots_adopt(&F.topo, F.published, F.npublished, F.now) < 0)
        slots_refresh_failed(&F.topo);
}

static int f_holding(void *t)
{
    (void)t;
    return F.now < F.hold_until;
}

static void f_waited(void *t, int64_t ms)
{
    (void)t;
    F.waited += ms;
}

static int f_switched(void *t, int node)
{
    (void)t;
    (void)node;
    return F.switched;
}

static int64_t f_now(void *t)
{
    (void)t;
    return F.now;
}

static void f_sleep(void *t, int64_t ms)
{
    (void)t;
    F.now += ms;
    F.sleeps++;
}

static const struct rpipe_ops fake_ops = {
    f_open, f_send, f_send_wait, f_flush, f_read, f_error_of, f_read_wait, f_reply_free,
    f_reload, f_drop, f_refresh, f_holding, f_switched, f_now, f_sleep, f_waited,
};

static const char *set_argv[sizeof(keys) / sizeof(keys[0])][2];

static void build(void *ctx, size_t j, struct conn_call *call)
{
    (void)ctx;
    set_argv[j][0] = "SET";
    set_argv[j][1] = keys[j];
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 2, .argv = set_argv[j] };
}

/* Each call's outcome. */
static struct {
    int calls;
    int answered[8];
    int ok[8];
    enum conn_code code[8];
    char text[8][128];
    int reads_at[8];    /* replies read from every node when the outcome came */
} O;

static int reads_so_far(void)
{
    int n = 0;

    for (int i = 0; i < FNODES; i++)
        n += F.n[i].qr;
    return n;
}

static int got(void *ctx, size_t j, void *reply, const struct conn_fail *fail)
{
    (void)ctx;
    O.calls++;
    O.answered[j]++;
    O.ok[j] = reply && !fail && !f_error_of(reply);
    O.code[j] = fail ? fail->code : CONN_OK;
    O.reads_at[j] = reads_so_far();
    snprintf(O.text[j], sizeof(O.text[j]), "%s", fail ? fail->text : reply ? ((struct freply *)reply)->text : "");
    return 0;
}

static int run(size_t n, enum conn_confirm confirm)
{
    struct rpipe p = { &fake_ops, NULL, &F.topo, 5000, 1 };
    char err[256];

    memset(&O, 0, sizeof(O));
    return rpipe_run(&p, n, build, NULL, got, NULL, confirm, err, sizeof(err));
}

/* A reshard: "a" moved from node 0 to node 1, which migrates it on to node 2. The engine
 * learns the MOVED, reads the map (which is older and still names node 0), keeps the MOVED,
 * and follows the ASK with ASKING. */
static void moved_then_ask_with_a_stale_refresh_between(void)
{
    int s;

    fake_init();
    fake_adopt();
    s = kslot(0);
    F.owner[s] = 1 - F.owner[s];
    F.ask_to[s] = 2;
    F.now = 1000;
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), 0);
    CHECK(O.ok[0]);
    CHECK_EQ_INT(O.answered[0], 1);
    CHECK_EQ_INT(F.n[2].askings, 1);
    CHECK(F.refreshes >= 1);                 /* the MOVED made the map stale */
    CHECK_EQ_INT(slots_owner(&F.topo, s), F.owner[s]);   /* the older map did not undo the MOVED */
    CHECK_EQ_INT(F.sleeps, 0);               /* redirections are followed at once */
}

/* An ASK to a node the map does not know (an empty master joining the cluster): it is
 * registered and asked, and a map read meanwhile that names only the old masters changes
 * nothing about where the call goes. */
static void ask_to_a_node_not_in_the_map(void)
{
    char host[SLOTS_HOST_MAX];
    int s, port, id;

    fake_init();
    slots_topo_release(&F.topo);
    slots_topo_init(&F.topo);
    slots_node_id(&F.topo, "127.0.0.1", 7000);
    slots_node_id(&F.topo, "127.0.0.1", 7001);   /* nodes 2.. unknown */
    fake_adopt();
    s = kslot(1);
    F.ask_to[s] = 5;
    F.owner[s] = s < 8192 ? 0 : 1;
    slots_mark_stale(&F.topo);
    CHECK_EQ_INT(run(2, CONN_NO_WAIT), 0);
    CHECK(O.ok[0] && O.ok[1]);
    id = slots_node_id(&F.topo, "127.0.0.1", 7005);
    CHECK_EQ_INT(id, 2);   /* registered when the ASK named it */
    CHECK_EQ_INT(slots_node_addr(&F.topo, id, host, &port), 0);
    CHECK_EQ_INT(port, 7005);
}

/* TRYAGAIN (a multi-key call during a migration) is sent again after a pause. */
static void tryagain_waits_and_succeeds(void)
{
    fake_init();
    fake_adopt();
    F.script[0] = (struct fscript){ F.owner[kslot(0)], kslot(0), 3, "TRYAGAIN Multiple keys request during rehashing of slot" };
    CHECK_EQ_INT(run(2, CONN_NO_WAIT), 0);
    CHECK(O.ok[0] && O.ok[1]);
    CHECK_EQ_INT(F.sleeps, 3);
    CHECK(F.now > 0 && F.now < 5000);
}

/* CLUSTERDOWN that lasts: the call fails once redis.failover_wait_ms has passed, with the
 * kind that says no master serves it; the map is read again, a few times a second at most. */
static void clusterdown_outlasting_the_wait_fails_its_call(void)
{
    fake_init();
    fake_adopt();
    F.script[0] = (struct fscript){ F.owner[kslot(0)], kslot(0), 1000, "CLUSTERDOWN The cluster is down" };
    CHECK_EQ_INT(run(2, CONN_NO_WAIT), -1);
    CHECK_EQ_INT(O.code[0], CONN_E_NO_MASTER);
    CHECK_HAS(O.text[0], "CLUSTERDOWN");
    CHECK(O.ok[1]);
    CHECK_EQ_INT(O.answered[0], 1);
    CHECK(F.now >= 5000);
    CHECK(F.refreshes <= F.now / SLOTS_REFRESH_MIN_MS + 1);
}

/* LOADING on one call of a round: the link's other calls of that round keep their answers; the
 * link is opened again after the round, and the refused call sent again. */
static void loading_mid_round_keeps_the_other_answers(void)
{
    int node;

    fake_init();
    fake_adopt();
    node = F.owner[kslot(0)];
    CHECK_EQ_INT(F.owner[kslot(3)], node);   /* "a" and "d" share a node */
    F.script[0] = (struct fscript){ node, kslot(0), 1, "LOADING Redis is loading the dataset in memory" };
    CHECK_EQ_INT(run(4, CONN_NO_WAIT), 0);
    CHECK(O.ok[0] && O.ok[1] && O.ok[2] && O.ok[3]);
    CHECK_EQ_INT(F.n[node].drops, 1);
    CHECK_EQ_INT(F.n[node].opened, 2);
}

/* NOREPLICAS (min-replicas-to-write) and READONLY (a replica now) wait and go again. */
static void noreplicas_and_readonly_are_sent_again(void)
{
    fake_init();
    fake_adopt();
    F.script[0] = (struct fscript){ F.owner[kslot(0)], kslot(0), 2, "NOREPLICAS Not enough good replicas to write." };
    F.script[1] = (struct fscript){ F.owner[kslot(1)], kslot(1), 1, "READONLY You can't write against a read only replica." };
    CHECK_EQ_INT(run(2, CONN_NO_WAIT), 0);
    CHECK(O.ok[0] && O.ok[1]);
    CHECK(F.sleeps >= 2);
}

/* One node's WAIT falls short: its calls alone are unconfirmed (with their answers), the
 * other node's succeed. */
static void wait_is_per_node(void)
{
    int a, other = -1;

    fake_init();
    fake_adopt();
    a = F.owner[kslot(0)];
    for (size_t j = 1; j < 8 && other < 0; j++)
        if (F.owner[kslot(j)] != a)
            other = (int)j;
    CHECK(other > 0);
    F.n[a].wait_short = 1;
    CHECK_EQ_INT(run((size_t)other + 1, CONN_WAIT_END), -1);
    for (int j = 0; j <= other; j++) {
        if (F.owner[kslot((size_t)j)] == a) {
            CHECK_EQ_INT(O.code[j], CONN_E_UNCONFIRMED);
        } else {
            CHECK_EQ_INT(O.code[j], CONN_OK);
            CHECK(O.ok[j]);
        }
        CHECK_EQ_INT(O.answered[j], 1);
    }
}

/* An answer that nothing later can change is handed on as soon as it is read, while the
 * pipeline's later answers are still to come (the caller acts on it while Redis runs the next
 * calls): without WAIT, and with a WAIT per call once that WAIT is read. With one WAIT per node,
 * no answer is handed on before its node's WAIT. */
static void final_answers_are_handed_on_as_read(void)
{
    enum conn_confirm confirm[] = { CONN_NO_WAIT, CONN_WAIT_EACH, CONN_WAIT_END };

    for (size_t c = 0; c < sizeof(confirm) / sizeof(confirm[0]); c++) {
        int first = 1 << 30, last = 0;
        fake_init();
        fake_adopt();
        CHECK_EQ_INT(run(8, confirm[c]), 0);
        for (int j = 0; j < 8; j++) {
            CHECK(O.ok[j]);
            CHECK_EQ_INT(O.answered[j], 1);
            first = O.reads_at[j] < first ? O.reads_at[j] : first;
            last = O.reads_at[j] > last ? O.reads_at[j] : last;
        }
        CHECK_EQ_INT(last, reads_so_far());
        if (confirm[c] == CONN_NO_WAIT)
            CHECK_EQ_INT(first, 1);
        else if (confirm[c] == CONN_WAIT_EACH)
            CHECK_EQ_INT(first, 2);   /* the call's answer and its WAIT */
        else
            CHECK_EQ_INT(first, last);   /* after every node's answers and WAIT */
    }
}

/* A map with unserved slots (cluster-require-full-coverage no, a slot without master): the
 * calls of those slots fail at once, the others are answered. */
static void unserved_slots_fail_only_their_calls(void)
{
    fake_init();
    F.published[0] = (struct slots_range){ 0, 8191, "127.0.0.1", 7000 };
    F.npublished = 1;
    fake_adopt();
    CHECK_EQ_INT(run(8, CONN_NO_WAIT), -1);
    for (size_t j = 0; j < 8; j++) {
        if (kslot(j) < 8192) {
            CHECK(O.ok[j]);
        } else {
            CHECK_EQ_INT(O.code[j], CONN_E_NO_MASTER);
        }
    }
    CHECK_EQ_INT(F.sleeps, 0);
}

/* A dead master (no replica): its calls fail at once with a connection error, the others are
 * answered; the map is read at most once per SLOTS_REFRESH_MIN_MS however often it fails. */
static void dead_master_fails_fast_and_reads_the_map_seldom(void)
{
    int dead;

    fake_init();
    fake_adopt();
    dead = F.owner[kslot(0)];
    F.n[dead].down = 1;
    for (int i = 0; i < 50; i++) {
        F.now += 10;
        run(8, CONN_NO_WAIT);
        for (size_t j = 0; j < 8; j++)
            CHECK(F.owner[kslot(j)] == dead ? O.code[j] == CONN_E_CONN : O.ok[j]);
    }
    CHECK(F.refreshes <= 500 / SLOTS_REFRESH_MIN_MS + 1);
    CHECK_EQ_INT(F.sleeps, 0);
}

/* While a failover is known to run, nothing is sent; afterwards the calls go. One that lasts
 * longer than the wait fails its calls with CONN_E_NO_MASTER. */
static void calls_wait_while_a_failover_runs(void)
{
    fake_init();
    fake_adopt();
    F.hold_until = 1200;
    CHECK_EQ_INT(run(2, CONN_NO_WAIT), 0);
    CHECK(O.ok[0] && O.ok[1]);
    CHECK(F.now >= 1200);
    CHECK_EQ_INT(F.waited, 1200);   /* told, for the failover's timeline */
    F.hold_until = F.now + 60000;
    CHECK_EQ_INT(run(2, CONN_NO_WAIT), -1);
    CHECK_EQ_INT(O.code[0], CONN_E_NO_MASTER);
    CHECK_HAS(O.text[0], "failover_wait_ms");
    CHECK_EQ_INT(O.answered[1], 1);
}

/* A link closed under a call (a restart, an idle timeout): the call goes once more on a new
 * link; closed again, it fails. In a switch of master it goes again until the wait ends. */
static void lost_link_retried_once_or_through_a_switch(void)
{
    int node;

    fake_init();
    fake_adopt();
    node = F.owner[kslot(0)];
    F.n[node].lose_at = 1;
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), 0);
    CHECK(O.ok[0]);
    CHECK_EQ_INT(F.sleeps, 0);
    F.n[node].lose_at = 1;
    F.n[node].lose_times = 2;
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), -1);
    CHECK_EQ_INT(O.code[0], CONN_E_CONN);
    F.n[node].lose_at = 1;
    F.n[node].lose_times = 4;
    F.switched = 1;
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), 0);
    CHECK(O.ok[0]);
}

/* Nodes that send a call back and forth: given up after RPIPE_REDIRECTS_MAX. */
static void redirect_loop_gives_up(void)
{
    static char to1[64], to0[64];
    int s;

    fake_init();
    fake_adopt();
    s = kslot(0);
    snprintf(to1, sizeof(to1), "MOVED %d 127.0.0.1:7001", s);
    snprintf(to0, sizeof(to0), "MOVED %d 127.0.0.1:7000", s);
    F.script[0] = (struct fscript){ 0, s, 100, to1 };
    F.script[1] = (struct fscript){ 1, s, 100, to0 };
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), -1);
    CHECK_EQ_INT(O.code[0], CONN_E_REDIRECTS);
    CHECK_EQ_INT(O.answered[0], 1);
}

/* NOSCRIPT: the scripts are loaded again once, the call sent again. */
static void noscript_reloads_once(void)
{
    int node;

    fake_init();
    fake_adopt();
    node = F.owner[kslot(0)];
    F.script[0] = (struct fscript){ node, kslot(0), 1, "NOSCRIPT No matching script." };
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), 0);
    CHECK(O.ok[0]);
    CHECK_EQ_INT(F.n[node].reloads, 1);
    F.script[0] = (struct fscript){ node, kslot(0), 2, "NOSCRIPT No matching script." };
    CHECK_EQ_INT(run(1, CONN_NO_WAIT), 0);   /* an error reply is an answer */
    CHECK(!O.ok[0]);
    CHECK_HAS(O.text[0], "NOSCRIPT");
}

static void verdicts(void)
{
    CHECK_EQ_INT(rpipe_verdict_of("MOVED 1 h:1", 1), RPIPE_MOVED);
    CHECK_EQ_INT(rpipe_verdict_of("MOVED 1 h:1", 0), RPIPE_ANSWER);
    CHECK_EQ_INT(rpipe_verdict_of("ASK 1 h:1", 1), RPIPE_ASK);
    CHECK_EQ_INT(rpipe_verdict_of("TRYAGAIN x", 1), RPIPE_TRYAGAIN);
    CHECK_EQ_INT(rpipe_verdict_of("CLUSTERDOWN x", 1), RPIPE_CLUSTERDOWN);
    CHECK_EQ_INT(rpipe_verdict_of("READONLY x", 0), RPIPE_ELSEWHERE);
    CHECK_EQ_INT(rpipe_verdict_of("LOADING x", 1), RPIPE_ELSEWHERE);
    CHECK_EQ_INT(rpipe_verdict_of("MASTERDOWN x", 0), RPIPE_ELSEWHERE);
    CHECK_EQ_INT(rpipe_verdict_of("NOREPLICAS x", 0), RPIPE_ELSEWHERE);
    CHECK_EQ_INT(rpipe_verdict_of("NOSCRIPT x", 0), RPIPE_NOSCRIPT);
    CHECK_EQ_INT(rpipe_verdict_of("ERR wrong number", 1), RPIPE_ANSWER);
    CHECK_EQ_INT(rpipe_verdict_of("OOM command not allowed", 0), RPIPE_ANSWER);
}

void unit_rpipe(void)
{
    RUN(verdicts);
    RUN(final_answers_are_handed_on_as_read);
    RUN(moved_then_ask_with_a_stale_refresh_between);
    RUN(ask_to_a_node_not_in_the_map);
    RUN(tryagain_waits_and_succeeds);
    RUN(clusterdown_outlasting_the_wait_fails_its_call);
    RUN(loading_mid_round_keeps_the_other_answers);
    RUN(noreplicas_and_readonly_are_sent_again);
    RUN(wait_is_per_node);
    RUN(unserved_slots_fail_only_their_calls);
    RUN(dead_master_fails_fast_and_reads_the_map_seldom);
    RUN(calls_wait_while_a_failover_runs);
    RUN(lost_link_retried_once_or_through_a_switch);
    RUN(redirect_loop_gives_up);
    RUN(noscript_reloads_once);
    slots_topo_release(&F.topo);
}
