/* records: the job records a forwarder's messages claim and mark, each kind in one Redis
 * pipeline per flush, and the claim tokens that tell which instance and message claimed a
 * record. Part of the forwarder; the shared inside is include/delivery/forwarder_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callback/callout.h"
#include "redis/leases.h"
#include "lib/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "delivery/forwarder.h"
#include "delivery/groups.h"
#include "core/held.h"
#include "core/job.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/producer.h"
#include "pull/pullq.h"
#include "core/recur.h"
#include "core/timing.h"
#include "core/decide.h"
#include "redis/store.h"
#include "kafka/warm.h"
#include "delivery/forwarder_link.h"

#define LOG_MODULE "forwarder"

/* Copies the message's job id into out; the envelope checked it is present. */
void fw_id_of(const struct held *m, char out[JOB_ID_MAX + 1])
{
    size_t len = m->env.id_len > JOB_ID_MAX ? JOB_ID_MAX : m->env.id_len;

    memcpy(out, m->env.id, len);
    out[len] = '\0';
}

/* Copies the message's dq-tag into out ("" when it has none); the envelope checked its length. */
void fw_tag_of(const struct held *m, char out[ENVELOPE_TAG_MAX + 1])
{
    memcpy(out, m->env.tag ? m->env.tag : "", m->env.tag_len);
    out[m->env.tag_len] = '\0';
}


/* Makes room for n records in the scratch arrays. Returns 0 or -1 (out of memory). */
static int scratch_reserve(struct scratch *sc, size_t n)
{
    size_t cap = sc->cap ? sc->cap : 256;
    void *p;

    if (n <= sc->cap)
        return 0;
    while (cap < n)
        cap *= 2;
    if (!(p = realloc(sc->a, cap * sizeof(*sc->a))))
        return -1;
    sc->a = p;
    if (!(p = realloc(sc->ids, cap * sizeof(*sc->ids))))
        return -1;
    sc->ids = p;
    if (!(p = realloc(sc->args, 4 * cap * sizeof(*sc->args))))
        return -1;
    sc->args = p;
    if (!(p = realloc(sc->marks, cap * sizeof(*sc->marks))))
        return -1;
    sc->marks = p;
    if (!(p = realloc(sc->failed, cap)))
        return -1;
    sc->failed = p;
    sc->cap = cap;
    return 0;
}

void fw_scratch_release(struct scratch *sc)
{
    free(sc->a);
    free(sc->ids);
    free(sc->args);
    free(sc->marks);
    free(sc->failed);
}

/* FNV-1a, 64 bits, of text. */
uint64_t fw_fnv1a(const char *text)
{
    uint64_t h = 14695981039346656037ULL;

    for (; *text; text++)
        h = (h ^ (unsigned char)*text) * 1099511628211ULL;
    return h;
}

static const char token_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Writes 36 bits of v as TOKEN_PART characters that are never '|' (the head's separator). */
void fw_token_part(uint64_t v, char *out)
{
    for (int i = 0; i < TOKEN_PART; i++, v >>= 6)
        out[i] = token_digits[v & 63];
}

/* The claim token of m: this instance's part (from its lease token), then its message's: 24
 * bits of a hash of where the message is, and 12 bits of its group. */
void fw_claim_token(const struct forwarder *fw, const struct held *m, char out[CLAIM_TOKEN_LEN + 1])
{
    char where[TOPIC_NAME_MAX + 48];

    snprintf(where, sizeof(where), "%s/%d/%lld", fw_topic_of(fw, m), m->partition,
             (long long)m->offset);
    memcpy(out, fw->instance, TOKEN_PART + 1);
    fw_token_part((fw_fnv1a(where) & 0xffffff) | (uint64_t)m->group << 24, out + TOKEN_PART + 1);
    out[CLAIM_TOKEN_LEN] = '\0';
}

/* The group a claim token's message part names, or -1 when it names none (a token of a delayqd
 * that wrote no group there). */
static int claim_group(const struct forwarder *fw, const char *claim, size_t len)
{
    const char *hi, *lo;
    int g;

    if (len != CLAIM_TOKEN_LEN || claim[TOKEN_PART] != ':' ||
        !(lo = memchr(token_digits, claim[CLAIM_TOKEN_LEN - 2], 64)) ||
        !(hi = memchr(token_digits, claim[CLAIM_TOKEN_LEN - 1], 64)))
        return -1;
    g = (int)(lo - token_digits) | (int)(hi - token_digits) << 6;
    return g < fw->cfg->delay.ngroups ? g : -1;
}

/* May m's claim take over the other instance's claim on its record? Only when that instance no
 * longer holds the group of the message it claimed with: while it does, it delivers the job (or,
 * fenced, leaves its lease, and then the record). 1 yes, 0 no, -1 Redis did not say. */
int fw_claim_owner_gone(struct forwarder *fw, const char *claim, size_t len)
{
    char owner[LEASES_TOKEN_MAX], part[TOKEN_PART], err[256];
    int g = claim_group(fw, claim, len);

    if (g < 0)
        return 1;
    if (groups_owner(fw->groups, g, owner, sizeof(owner), err, sizeof(err)) < 0) {
        warn_retried(&fw->redis_gate, "lease of group=%d: %s (retried)", g, err);
        return -1;
    }
    fw_token_part(fw_fnv1a(owner), part);
    return !owner[0] || memcmp(part, claim, TOKEN_PART) != 0;
}

/* Fills the claim arguments of m into slot i: its due time and its token. */
static void claim_args(struct forwarder *fw, const struct held *m, size_t i)
{
    struct rec_args *a = &fw->sc.a[i];

    fw_id_of(m, a->id);
    fw_tag_of(m, a->tag);
    a->due[0] = '\0';
    if (m->env.has_due)   /* its dq-due-ms, or the due time it moved on to (move_on) */
        snprintf(a->due, sizeof(a->due), "%lld", (long long)m->due_ms);
    fw_claim_token(fw, m, a->token);
    fw->sc.ids[i] = a->id;
    fw->sc.args[4 * i] = a->due;
    fw->sc.args[4 * i + 1] = a->tag;
    fw->sc.args[4 * i + 2] = a->token;
    fw->sc.args[4 * i + 3] = m->take_over;
}

static void retry_all(struct forwarder *fw, struct vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        fw_retry(fw, v->v[i]);
    v->n = 0;
}

/* A claim's answer: acted on at once, while Redis answers the next ones. */
static void on_claim(void *ctx, size_t i, const struct store_claim *c, const char *err)
{
    struct forwarder *fw = ctx;
    struct held *m = fw->claims.v[i];

    m->take_over[0] = '\0';   /* it was for this claim: a later one looks at the lease again */
    if (c) {
        fw_act_on_claim(fw, m, c, fw->claim_now);
        return;
    }
    if (!fw->claim_failures++)
        snprintf(fw->claim_err, sizeof(fw->claim_err), "%s", err);
    fw_retry(fw, m);
}

void fw_run_claims(struct forwarder *fw, int64_t now)
{
    size_t n = fw->claims.n;
    char err[256];

    if (scratch_reserve(&fw->sc, n) < 0) {
        log_error("out of memory claiming %zu records; retrying", n);
        retry_all(fw, &fw->claims);
        return;
    }
    for (size_t i = 0; i < n; i++)
        claim_args(fw, fw->claims.v[i], i);
    fw->claim_now = now;
    fw->claim_failures = 0;
    (void)fw_hold_sends(fw, n);   /* out of memory: each is sent as its claim is answered */
    store_claim_batch(fw->st, n, fw->sc.ids, fw->instance, fw->sc.args, on_claim, fw, err,
                      sizeof(err));
    fw_send_held(fw);
    if (fw->claim_failures) {
        metrics_inc(M_REDIS_ERRORS);
        warn_retried(&fw->redis_gate, "claiming %zu of %zu records failed (held, retried): %s",
                     fw->claim_failures, n, fw->claim_err);
    }
    fw->claims.n = 0;
}

/* Fills the mark of m into slot i: what its claim wrote, the state, a failed job's reason, and
 * a callback job's tail (how its calls went). */
static void mark_args(struct forwarder *fw, const struct held *m, size_t i)
{
    struct rec_args *a = &fw->sc.a[i];
    char reason[512];
    size_t head = 0;

    fw_id_of(m, a->id);
    fw_claim_token(fw, m, a->token);
    a->error = NULL;
    msgpack_sbuffer_init(&a->tail);
    if (m->mark == JOB_FAILED) {
        if (m->call)
            snprintf(reason, sizeof(reason), "callback: %.480s", callout_why(m->call));
        else
            fw_refusal_reason(m, reason, sizeof(reason));
        a->error = strdup(reason);   /* without it, the record is still marked */
    } else if (m->mark == JOB_CANCELLED) {
        a->error = strdup(recur_verdict_why((enum recur_verdict)m->skipped));
    }
    if (m->call && job_record_pack(callout_job_of(m->call), &a->tail) == 0)
        head = job_record_head_len(a->tail.data, a->tail.size);
    fw->sc.marks[i] = (struct store_mark){ a->id, m->claimed_due_ms, a->token,
                                           (enum job_state)m->mark, a->error,
                                           head ? a->tail.data + head : NULL,
                                           head ? a->tail.size - head : 0, m->kept };
}

void fw_run_marks(struct forwarder *fw)
{
    size_t n = fw->marks.n;
    char err[256];
    int rc;

    if (scratch_reserve(&fw->sc, n) < 0) {
        log_error("out of memory marking %zu records; retrying", n);
        retry_all(fw, &fw->marks);
        return;
    }
    for (size_t i = 0; i < n; i++)
        mark_args(fw, fw->marks.v[i], i);
    rc = store_mark_batch(fw->st, n, fw->sc.marks, clock_now_ms(), fw->cfg->job.retention_s * 1000,
                          fw->sc.failed, err, sizeof(err));
    for (size_t i = 0; i < n; i++) {
        free(fw->sc.a[i].error);
        fw->sc.a[i].error = NULL;
        msgpack_sbuffer_destroy(&fw->sc.a[i].tail);
    }
    if (rc < 0) {
        metrics_inc(M_REDIS_ERRORS);
        warn_retried(&fw->redis_gate, "marking %zu records failed (retried): %s", n, err);
    }
    for (size_t i = 0; i < n; i++) {   /* a record Redis did not mark: only its message again */
        if (fw->sc.failed[i])
            fw_retry(fw, fw->marks.v[i]);
        else
            fw_done(fw, fw->marks.v[i]);
    }
    fw->marks.n = 0;
}
