/* forwarder: the delivery path of a message whose time has come: claim its record, produce to
 * the business topic, mark the record, or move the message down a level, or dead-letter it.
 * Owns the refusal rules, claim tokens and the Redis pipelines of claims and marks; a callback
 * job's calls are made by callout.c, whose outcomes are acted on here. The contract is in
 * include/delivery/forwarder.h. */
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

#define LOG_MODULE "forwarder"
#define BACKOFF_MIN_MS 100       /* first retry after a Redis or Kafka failure */
#define BACKOFF_MAX_MS 5000      /* retries never wait longer than this */
#define WARN_INTERVAL_MS 5000    /* a repeating failure is logged once per interval, with a count */
#define WARM_TIMEOUT_MS 5000     /* start-up metadata fetch */
/* A job rescheduled to an earlier time whose new message may still be on its way to Kafka: its
 * old message asks again this often (the wait ends with Kafka's answer, within
 * kafka.produce_timeout_ms). */
#define MOVED_WAIT_MS 20
#define DELIVERY_TIMEOUT_MS 30000
/* A due job leaves within a millisecond, yet a burst still travels in batches. */
#define FORWARD_LINGER_MS 1
/* When the dead-letter topic refuses a message too, the letter goes without its body, which
 * stays where dq-body says: the record of a job (state failed) for job.retention_s, the delay
 * topic (dq-source) for the topic's retention. */
#define BODY_OMITTED_JOB "omitted: refused by the dead-letter topic; get the job by its dq-id"
#define BODY_OMITTED_DIRECT "omitted: refused by the dead-letter topic; the message is at dq-source"

enum stage {
    ST_NEW = 0,        /* to be acted on */
    ST_SEND_JOB,       /* produced a job's body; the record is marked delivered after the report */
    ST_SEND_DEAD_JOB,  /* produced a job's body to the dead-letter topic; marked failed after */
    ST_SEND_DIRECT,    /* produced a direct message to its business topic */
    ST_SEND_MOVE,      /* produced a move down a level */
    ST_SEND_DEAD,      /* produced a message that cannot be handled to the dead-letter topic */
    ST_MARK,           /* sent; marking the record (m->mark) is pending or retried */
    ST_READY,          /* a pull job, to be made ready in Redis (fw->ready) */
    ST_CALL,           /* a callback job, its call made (m->call) */
};

struct vec {
    struct held **v;
    size_t n, cap;
};

/* Each vector holds messages in flight only, and forwarder_submit made room for all of them. */
static void vec_push(struct vec *v, struct held *m)
{
    v->v[v->n++] = m;
}

/* A claim token, "<instance>:<message>", has as many characters as a stamp (13), so that a mark
 * puts the stamp where the token was and rewrites the record's head in place (store.c).
 * Each part is 36 bits in 6 characters: the instance's a hash of its lease token (so another
 * instance can tell whether it still holds a group), the message's 24 bits of a hash of its
 * topic, partition and offset and 12 of its group. Two messages of one job (a copy left by a
 * crash in a move) would have to collide in those 24 bits and their group to be taken for one. */
#define TOKEN_PART 6
#define CLAIM_TOKEN_LEN (2 * TOKEN_PART + 1)

struct rec_args;
struct store_mark;

/* Per-batch arrays for the Redis pipelines, kept and grown across flushes. */
struct scratch {
    struct rec_args *a;
    const char **ids;           /* n */
    const char **args;          /* 4 * n */
    struct store_mark *marks;   /* n */
    char *failed;               /* n: the marks that failed */
    size_t cap;
};

struct forwarder {
    const struct config *cfg;
    struct groups *groups;   /* consulted right before each send, and on another's claim */
    struct store *st;
    rd_kafka_t *rk;
    struct warm *warm;       /* business topics' metadata, fetched ahead for rk */
    char instance[TOKEN_PART + 2];   /* random, per process: "<6 characters>:" starts its tokens */
    struct log_gate redis_gate, kafka_gate;
    struct scratch sc;
    struct vec batch;        /* submitted since the last flush */
    struct vec claims;       /* scratch: jobs whose records are claimed in this flush */
    struct vec marks;        /* delivered jobs whose records are to be marked */
    struct pullq *pq;        /* the pull queues, for due pull jobs */
    struct ready_item *ready;   /* due pull jobs of this flush, nready of them */
    size_t nready, ready_cap;
    struct pullq_entry *entries;   /* scratch for ready, ready_cap of them */
    int64_t claim_now;       /* epoch ms: the flush's, while its claims are answered */
    size_t claim_failures;   /* of the claims being answered: not answered, with claim_err */
    char claim_err[256];
    struct callout *co;      /* callback jobs' calls (callout.c) */
    forwarder_occurrence_fn *occurred;   /* told of each schedule occurrence that comes due */
    void *occurred_ctx;
    size_t in_flight;
    struct fw_outcome *out;  /* messages handed back, out[out_next .. nout) not yet taken */
    size_t nout, out_next, out_cap;
};

/* Logs a failure that is retried, at most once per WARN_INTERVAL_MS for each gate. */
#define warn_retried(gate, ...)                                                              \
    do {                                                                                     \
        unsigned long held_;                                                                 \
        if (log_gate_open((gate), clock_mono_ms(), WARN_INTERVAL_MS, &held_)) {              \
            log_warn(__VA_ARGS__);                                                           \
            if (held_)                                                                       \
                log_warn("%lu more such failures in the last %d s", held_, WARN_INTERVAL_MS / 1000); \
        }                                                                                    \
    } while (0)

/* A due pull job on its way into its topic's ready set, with the record poppers will read. */
struct ready_item {
    struct held *m;
    char id[JOB_ID_MAX + 1];
    char topic[TOPIC_NAME_MAX + 1];
    msgpack_sbuffer rec;
    int64_t due_ms;
    int64_t ttr_ms;
};

/* The text arguments of one record's claim or mark. */
struct rec_args {
    char id[JOB_ID_MAX + 1];
    char due[24];
    char tag[ENVELOPE_TAG_MAX + 1];
    char token[CLAIM_TOKEN_LEN + 1];
    char *error;                /* a failed job's reason, owned; NULL for the others */
    msgpack_sbuffer tail;       /* a callback job's record, its tail written by the mark */
};

/* Room for n elements of elem bytes at arr, whose capacity is *cap: arr or its new place (*cap
 * updated), or NULL when out of memory (arr stays as it was). */
static void *grow(void *arr, size_t *cap, size_t n, size_t elem)
{
    size_t c = *cap ? *cap : 256;
    void *na;

    while (c < n)
        c *= 2;
    if (c == *cap)
        return arr;
    if (!(na = realloc(arr, c * elem)))
        return NULL;
    *cap = c;
    return na;
}

/* Room for n messages in v. 0, or -1 when out of memory. */
static int vec_reserve(struct vec *v, size_t n)
{
    struct held **nv = grow(v->v, &v->cap, n, sizeof(*nv));

    if (!nv)
        return -1;
    v->v = nv;
    return 0;
}

static int claim_owner_gone(struct forwarder *fw, const char *claim, size_t len);
static void fw_claim_token(const struct forwarder *fw, const struct held *m,
                           char out[CLAIM_TOKEN_LEN + 1]);

/* Hands m back with its outcome; forwarder_submit made room for it. */
static void hand_back(struct forwarder *fw, struct held *m, enum fw_result result, int64_t at_ms)
{
    callout_call_free(m->call);
    m->call = NULL;
    fw->in_flight--;
    fw->out[fw->nout++] = (struct fw_outcome){ m, result, at_ms };
}

static void fw_done(struct forwarder *fw, struct held *m)
{
    hand_back(fw, m, FW_DONE, 0);
}

/* Not due yet: back to the holder until at_ms, without a failure counted. */
static void hold_back(struct forwarder *fw, struct held *m, int64_t at_ms)
{
    hand_back(fw, m, FW_RETRY, at_ms);
}

static void fw_retry(struct forwarder *fw, struct held *m)
{
    int64_t wait = BACKOFF_MIN_MS << (m->attempts < 6 ? m->attempts : 6);

    m->attempts++;
    m->take_over[0] = '\0';
    hand_back(fw, m, FW_RETRY, clock_now_ms() + (wait < BACKOFF_MAX_MS ? wait : BACKOFF_MAX_MS));
}

/* How Kafka refused a message. Every error that is no refusal, such as a timeout while Kafka is
 * unreachable, is retried for as long as it lasts. */
enum refusal {
    R_NONE = 0,
    R_FIXABLE,   /* the topic is missing or not ours to write: retried job.refused_retry_s, in
                    case an operator creates the topic or grants the right meanwhile */
    R_NEVER,     /* the message itself can never be written (too large, invalid): at once */
};

static enum refusal refusal_of(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
        return R_NEVER;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
        return R_FIXABLE;
    default:
        return R_NONE;
    }
}

/* A produce of m failed with e, right away or in its delivery report. A refused letter is sent
 * again without its body; a refused delivery or move is remembered, for refused_for_good. */
static void note_failure(struct held *m, rd_kafka_resp_err_t e)
{
    metrics_inc(M_KAFKA_ERRORS);
    if (refusal_of(e) == R_NONE)
        return;
    if (m->stage == ST_SEND_DEAD_JOB || m->stage == ST_SEND_DEAD) {
        m->dead_bare = 1;
        return;
    }
    m->last_err = e;
    m->refused_move = m->stage == ST_SEND_MOVE;
    if (!m->refused_since_ms)
        m->refused_since_ms = clock_now_ms();
}

/* 1 when the business topic has refused m for job.refused_retry_s: it goes to the dead letters. */
static int refused_for_good(const struct forwarder *fw, const struct held *m, int64_t now)
{
    return m->refused_since_ms &&
           (refusal_of((rd_kafka_resp_err_t)m->last_err) == R_NEVER ||
            now - m->refused_since_ms >= fw->cfg->job.refused_retry_s * 1000);
}

/* Why m goes to the dead letters after refused_for_good. */
static void refusal_reason(const struct held *m, char *out, size_t outlen)
{
    rd_kafka_resp_err_t e = (rd_kafka_resp_err_t)m->last_err;
    char what[TOPIC_NAME_MAX + 32];

    if (m->refused_move)
        snprintf(what, sizeof(what), "its move down the delay topics");
    else
        snprintf(what, sizeof(what), "delivery to topic %.*s", (int)m->env.topic_len, m->env.topic);
    if (refusal_of(e) == R_NEVER)
        snprintf(out, outlen, "%s refused: %s%s", what, rd_kafka_err2str(e),
                 e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? " (over message.max.bytes)" : "");
    else
        snprintf(out, outlen, "%s refused for %lld s: %s", what,
                 (long long)((clock_now_ms() - m->refused_since_ms) / 1000), rd_kafka_err2str(e));
}

static const char *fw_topic_of(const struct forwarder *fw, const struct held *m)
{
    return fw->cfg->delay.levels.topic[m->level];
}

/* Checked at the last moment before a send or a pull job made ready: a lease that ran out
 * while this instance was stopped must not let it pass on anything of a group another
 * instance took over. 1 when m's group is no longer surely ours: m is dropped (done). */
static int fw_dropped_if_not_ours(struct forwarder *fw, struct held *m)
{
    if (groups_may_send(fw->groups, m, clock_mono_ms()))
        return 0;
    log_debug("drop topic=%s offset=%lld: group no longer ours", fw_topic_of(fw, m),
              (long long)m->offset);
    fw_done(fw, m);
    return 1;
}

/* Produces with a copy of every buffer; takes hdrs. Returns 0 (sent), -1 (failed: the caller
 * retries) or 1 (m's group is no longer surely ours: m was dropped, nothing was sent). */
static int fw_produce(struct forwarder *fw, struct held *m, const char *topic, const void *key,
               size_t key_len, const void *value, size_t value_len, rd_kafka_headers_t *hdrs,
               int64_t timestamp_ms)
{
    rd_kafka_resp_err_t e;

    if (fw_dropped_if_not_ours(fw, m)) {
        rd_kafka_headers_destroy(hdrs);
        return 1;
    }
    e = rd_kafka_producev(
        fw->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *)(uintptr_t)value, value_len),
        RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_TIMESTAMP(timestamp_ms), RD_KAFKA_V_OPAQUE(m),
        RD_KAFKA_V_END);

    if (e) {
        rd_kafka_headers_destroy(hdrs);
        warn_retried(&fw->kafka_gate, "produce to topic=%s failed (retried): %s", topic,
                     rd_kafka_err2str(e));
        note_failure(m, e);
        return -1;
    }
    return 0;
}

/* Copies m's headers, leaving out control headers (all, or only the named one). */
static rd_kafka_headers_t *fw_copy_headers(const struct held *m, int drop_control, const char *drop)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(m->nhdrs + 4);

    for (size_t i = 0; i < m->nhdrs; i++) {
        const struct hdr *h = &m->hdrs[i];
        if ((drop_control && envelope_is_control(h->name)) || (drop && strcmp(h->name, drop) == 0))
            continue;
        rd_kafka_header_add(hdrs, h->name, -1, h->value, h->value ? (ssize_t)h->len : 0);
    }
    return hdrs;
}

static void fw_dead_letter(struct forwarder *fw, struct held *m, enum dlq_reason why, const char *reason)
{
    rd_kafka_headers_t *hdrs = fw_copy_headers(m, 0, NULL);
    char source[TOPIC_NAME_MAX + 48];

    log_warn("dead letter topic=%s partition=%d offset=%lld: %s", fw_topic_of(fw, m),
             m->partition, (long long)m->offset, reason);
    metrics_dead_letter(why);
    snprintf(source, sizeof(source), "%s/%d/%lld", fw_topic_of(fw, m), m->partition,
             (long long)m->offset);
    headers_add(hdrs, HDR_ERROR, reason, strlen(reason));
    headers_add(hdrs, "dq-source", source, strlen(source));
    if (m->call) {
        rd_kafka_header_remove(hdrs, HDR_CALL_ATTEMPTS);   /* a retry's count, now the total */
        callout_dead_headers(hdrs, m->call);
    }
    if (m->dead_bare)
        headers_add(hdrs, "dq-body", BODY_OMITTED_DIRECT, strlen(BODY_OMITTED_DIRECT));
    m->stage = ST_SEND_DEAD;
    if (fw_produce(fw, m, fw->cfg->delay.dlq_topic, m->key, m->key_len,
                   m->dead_bare ? NULL : m->value, m->dead_bare ? 0 : m->value_len, hdrs,
                   clock_now_ms()) < 0)
        fw_retry(fw, m);
}

/* The job's own body and headers go to the dead-letter topic, so nothing accepted is lost. */
static void fw_dead_letter_job(struct forwarder *fw, struct held *m, const struct job *job,
                        const char *reason)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(job->nheaders + 9);
    const char *key = job->key ? job->key : job->id;

    log_warn("dead letter job=%s: %s", job->id, reason);
    metrics_dead_letter(m->call ? DLQ_CALLBACK : DLQ_REFUSED);
    for (size_t i = 0; i < job->nheaders; i++)
        headers_add(hdrs, job->headers[i].name, job->headers[i].value, strlen(job->headers[i].value));
    if (job->topic[0])   /* a callback-only job has none */
        headers_add(hdrs, HDR_TOPIC, job->topic, strlen(job->topic));
    headers_add(hdrs, HDR_ID, job->id, strlen(job->id));
    headers_add_int(hdrs, HDR_DUE, job->due_ms);
    headers_add(hdrs, HDR_ERROR, reason, strlen(reason));
    if (m->call)
        callout_dead_headers(hdrs, m->call);
    if (m->dead_bare)
        headers_add(hdrs, "dq-body", BODY_OMITTED_JOB, strlen(BODY_OMITTED_JOB));
    m->stage = ST_SEND_DEAD_JOB;
    if (fw_produce(fw, m, fw->cfg->delay.dlq_topic, key, strlen(key),
                   m->dead_bare ? NULL : job->body, m->dead_bare ? 0 : job->body_len, hdrs,
                   clock_now_ms()) < 0)
        fw_retry(fw, m);
}

/* Not due yet: on to the largest level not above the remaining time. */
static void move_down(struct forwarder *fw, struct held *m, int64_t now)
{
    const struct levels *lv = &fw->cfg->delay.levels;
    int level = levels_route(lv, m->due_ms - now);
    rd_kafka_headers_t *hdrs = fw_copy_headers(m, 0, NULL);
    int rc;

    /* dq-due-ms is the due time: the message's own, the one its level gave it, or the one its
     * job was rescheduled to. */
    rd_kafka_header_remove(hdrs, HDR_DUE);
    rd_kafka_header_remove(hdrs, HDR_HOPS);
    headers_add_int(hdrs, HDR_DUE, m->due_ms);
    headers_add_int(hdrs, HDR_HOPS, m->env.hops + 1);
    log_debug("move topic=%s offset=%lld to=%s due=%lld", fw_topic_of(fw, m),
              (long long)m->offset, lv->topic[level], (long long)m->due_ms);
    m->stage = ST_SEND_MOVE;
    rc = fw_produce(fw, m, lv->topic[level], m->key, m->key_len, m->value, m->value_len, hdrs, now);
    if (rc < 0)
        fw_retry(fw, m);
    else if (rc == 0)
        metrics_inc(M_MOVES);
}

/* Counts a delivery sent to topic, and apart those to a topic whose metadata was not fetched
 * ahead: librdkafka fetches it then, up to a second late. */
static void note_forward(struct forwarder *fw, const char *topic)
{
    metrics_inc(M_FORWARDS);
    if (!warm_ready(fw->warm, topic, strlen(topic))) {
        metrics_inc(M_COLD_DELIVERIES);
        warm_topic(fw->warm, topic, strlen(topic));
    }
}

static void fw_deliver_direct(struct forwarder *fw, struct held *m, const char *topic, int64_t now)
{
    rd_kafka_headers_t *hdrs = fw_copy_headers(m, 1, NULL);
    int rc;

    m->sent_ms = now;
    headers_add_int(hdrs, HDR_DUE, m->due_ms);
    headers_add_int(hdrs, HDR_SENT, now);
    m->stage = ST_SEND_DIRECT;
    rc = fw_produce(fw, m, topic, m->key, m->key_len, m->value, m->value_len, hdrs, now);
    if (rc < 0)
        fw_retry(fw, m);
    else if (rc == 0)
        note_forward(fw, topic);
}

static void fw_deliver_job(struct forwarder *fw, struct held *m, const struct job *job, int64_t now)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(job->nheaders + 3);
    const char *key = job->key ? job->key : job->id;
    int rc;

    for (size_t i = 0; i < job->nheaders; i++)
        headers_add(hdrs, job->headers[i].name, job->headers[i].value, strlen(job->headers[i].value));
    headers_add(hdrs, HDR_ID, job->id, strlen(job->id));
    headers_add_int(hdrs, HDR_DUE, job->due_ms);
    headers_add_int(hdrs, HDR_SENT, now);
    m->stage = ST_SEND_JOB;
    m->due_ms = job->due_ms;   /* for the lateness of the delivery */
    m->sent_ms = now;
    /* go-delayqueue's consumers take the job id from the message and get the job by it. */
    if (fw->cfg->compat.go_delayqueue)
        rc = fw_produce(fw, m, job->topic, key, strlen(key), job->id, strlen(job->id), hdrs, now);
    else
        rc = fw_produce(fw, m, job->topic, key, strlen(key), job->body, job->body_len, hdrs, now);
    if (rc < 0)
        fw_retry(fw, m);
    else if (rc == 0)
        note_forward(fw, job->topic);
}

/* Queues job (a due pull job, m its message) to be made ready by run_ready. */
static void ready_job(struct forwarder *fw, struct held *m, const struct job *job)
{
    struct ready_item *it;

    if (fw->nready == fw->ready_cap) {
        size_t cap = fw->ready_cap ? 2 * fw->ready_cap : 64;
        struct ready_item *r = realloc(fw->ready, cap * sizeof(*r));
        struct pullq_entry *e = realloc(fw->entries, cap * sizeof(*e));
        if (r)
            fw->ready = r;
        if (e)
            fw->entries = e;
        if (!r || !e) {
            log_error("out of memory making job=%s ready; retrying", job->id);
            fw_retry(fw, m);
            return;
        }
        fw->ready_cap = cap;
    }
    it = &fw->ready[fw->nready];
    it->m = m;
    snprintf(it->id, sizeof(it->id), "%s", job->id);
    snprintf(it->topic, sizeof(it->topic), "%s", job->topic);
    it->due_ms = job->due_ms;
    it->ttr_ms = job->ttr_ms;
    msgpack_sbuffer_init(&it->rec);
    if (job_record_pack(job, &it->rec) < 0) {
        msgpack_sbuffer_destroy(&it->rec);
        log_error("out of memory making job=%s ready; retrying", job->id);
        fw_retry(fw, m);
        return;
    }
    m->stage = ST_READY;
    m->due_ms = job->due_ms;
    fw->nready++;
}

/* A direct message to a pull topic becomes a job whose id names its message, so that a copy
 * read again after a crash finds it made ready already. */
static void ready_direct(struct forwarder *fw, struct held *m)
{
    struct job job = { .delay_ms = 0, .due_ms = m->due_ms, .created_ms = m->due_ms,
                       .deliver = JOB_DELIVER_PULL, .ttr_ms = m->env.ttr_ms };
    struct job_header hdrs[JOB_HEADERS_MAX];
    char topic[TOPIC_NAME_MAX + 1], key[1024];

    snprintf(job.id, sizeof(job.id), "%s-%d-%lld", fw_topic_of(fw, m), m->partition,
             (long long)m->offset);
    snprintf(topic, sizeof(topic), "%.*s", (int)m->env.topic_len, m->env.topic);
    job.topic = topic;
    job.body = (char *)(uintptr_t)(m->value ? m->value : "");
    job.body_len = m->value ? m->value_len : 0;
    if (m->key && m->key_len < sizeof(key) && !memchr(m->key, '\0', m->key_len)) {
        snprintf(key, sizeof(key), "%.*s", (int)m->key_len, m->key);
        job.key = key;
    }
    job.headers = hdrs;
    for (size_t i = 0; i < m->nhdrs && job.nheaders < JOB_HEADERS_MAX; i++) {
        const struct hdr *h = &m->hdrs[i];
        if (envelope_is_control(h->name) || !h->value || memchr(h->value, '\0', h->len))
            continue;   /* the record keeps text headers, as an add's */
        hdrs[job.nheaders].name = (char *)(uintptr_t)h->name;
        hdrs[job.nheaders].value = strndup(h->value, h->len);
        if (hdrs[job.nheaders].value)
            job.nheaders++;
    }
    ready_job(fw, m, &job);
    for (size_t i = 0; i < job.nheaders; i++)
        free(hdrs[i].value);
}

/* Copies the message's job id into out; the envelope checked it is present. */
static void id_of(const struct held *m, char out[JOB_ID_MAX + 1])
{
    size_t len = m->env.id_len > JOB_ID_MAX ? JOB_ID_MAX : m->env.id_len;

    memcpy(out, m->env.id, len);
    out[len] = '\0';
}

/* Copies the message's dq-tag into out ("" when it has none); the envelope checked its length. */
static void fw_tag_of(const struct held *m, char out[ENVELOPE_TAG_MAX + 1])
{
    memcpy(out, m->env.tag ? m->env.tag : "", m->env.tag_len);
    out[m->env.tag_len] = '\0';
}

/* Why a claim did not claim: pure, from the claim's answer and the message's due time. A
 * record is kept until due + retention at least (a removed one for retention after the remove),
 * so none before then means it was lost, not removed. */
static enum skip_reason skip_reason_of(const struct store_claim *c, int64_t due_ms,
                                       int64_t retention_ms, int64_t now)
{
    if (!c->found)
        return now >= due_ms + retention_ms ? SKIP_EXPIRED : SKIP_MISSING;
    if (c->stale)
        return SKIP_EARLIER_JOB;
    if (c->busy)
        return SKIP_COPY;
    if (c->foreign)
        return SKIP_FOREIGN;
    return c->before == JOB_CANCELLED ? SKIP_CANCELLED
         : c->before == JOB_FAILED    ? SKIP_FAILED : SKIP_DELIVERED;
}

static void skip(struct forwarder *fw, struct held *m, const char *id, enum skip_reason why)
{
    static const char *const text[SKIP_REASONS] = {
        [SKIP_EXPIRED] = "no record (expired)",
        [SKIP_MISSING] = "no record, though it should be there until due + job.retention_s: "
                         "lost in Redis (a failover without its replica, or a Redis crash)",
        [SKIP_CANCELLED] = "removed",
        [SKIP_DELIVERED] = "delivered already",
        [SKIP_FAILED] = "dead-lettered already",
        [SKIP_EARLIER_JOB] = "its due time is not the record's (a message of an earlier job with "
                             "this id, or of this job before it was rescheduled)",
        [SKIP_COPY] = "another copy of its message is in flight",
        [SKIP_FOREIGN] = "the message is not the job's own (its " HDR_TAG " is not the record's)",
        [SKIP_ELSEWHERE] = "another copy is being delivered by an instance that holds its group",
    };

    metrics_skipped(why);
    if (why == SKIP_MISSING)
        log_warn("skip job=%s topic=%s partition=%d offset=%lld: %s", id, fw_topic_of(fw, m),
                 m->partition, (long long)m->offset, text[why]);
    else
        log_info("skip job=%s: %s", id, text[why]);
    fw_done(fw, m);
}

/* The job of m was rescheduled to the later due_ms: its message goes on to that time, down the
 * levels or, with less than the smallest level left, waiting here; then it claims the record
 * with that due time. */
static void fw_move_on(struct forwarder *fw, struct held *m, int64_t due_ms, int64_t now)
{
    m->due_ms = due_ms;
    if (due_ms - now >= fw->cfg->delay.levels.ms[0])
        move_down(fw, m, now);
    else
        hold_back(fw, m, due_ms);
}

/* A direct message's failed call, made again at at_ms: a copy of the message goes into the
 * delay topics due then, carrying its webhook-id and the calls made so far; the message is
 * done once Kafka has the copy. */
static void call_again_direct(struct forwarder *fw, struct held *m, int64_t at_ms, int64_t now)
{
    const struct levels *lv = &fw->cfg->delay.levels;
    rd_kafka_headers_t *hdrs = fw_copy_headers(m, 0, NULL);

    callout_again_headers(hdrs, m->call, at_ms);
    m->stage = ST_SEND_MOVE;
    if (fw_produce(fw, m, lv->topic[levels_route(lv, at_ms - now)], m->key, m->key_len,
                   m->value, m->value_len, hdrs, now) < 0)
        fw_retry(fw, m);   /* called again sooner than planned: never lost */
}

/* Acts on what callout.c reports of a callback's message. After a next attempt was (or was
 * not) written, m is new again: retried sooner than planned on a failure, never lost. */
static void act_on_call(struct forwarder *fw, const struct call_outcome *o)
{
    struct held *m = o->m;

    switch (o->act) {
    case CO_MADE:
        m->stage = ST_CALL;
        break;
    case CO_RETRY:
        fw_retry(fw, m);
        break;
    case CO_WRITE_FAILED:
        m->stage = ST_NEW;
        metrics_inc(M_REDIS_ERRORS);
        warn_retried(&fw->redis_gate, "job=%s: writing its next attempt failed (retried): %s",
                     o->job->id, o->why);
        fw_retry(fw, m);
        break;
    case CO_GONE:
        m->stage = ST_NEW;
        fw_done(fw, m);
        break;
    case CO_AGAIN:
        m->stage = ST_NEW;
        fw_move_on(fw, m, o->at_ms, o->now_ms);
        break;
    case CO_AGAIN_DIRECT:
        call_again_direct(fw, m, o->at_ms, o->now_ms);
        break;
    case CO_DELIVERED:
        fw_done(fw, m);
        break;
    case CO_DELIVER_DIRECT:
        fw_deliver_direct(fw, m, o->topic, o->now_ms);
        break;
    case CO_DELIVER_JOB:
        fw_deliver_job(fw, m, o->job, o->now_ms);
        break;
    case CO_MARK:
        m->mark = JOB_DELIVERED;
        m->stage = ST_MARK;
        vec_push(&fw->marks, m);
        break;
    case CO_DEAD:
        fw_dead_letter(fw, m, o->dlq, o->why);
        break;
    case CO_DEAD_JOB:
        fw_dead_letter_job(fw, m, o->job, o->why);
        break;
    }
}

/* A due callback job, m its message: its call made by callout.c, which takes job, under the
 * record's head as claimed and m's tag (its next attempt is written under them). */
static void call_job(struct forwarder *fw, struct held *m, struct job *job)
{
    char head[CALL_HEAD_MAX], token[CLAIM_TOKEN_LEN + 1], tag[ENVELOPE_TAG_MAX + 1];
    struct call_outcome o;

    if (fw_dropped_if_not_ours(fw, m))
        return;
    fw_claim_token(fw, m, token);
    snprintf(head, sizeof(head), "%c%lld||%s|", job_state_letter(JOB_DELIVERING),
             (long long)m->claimed_due_ms, token);
    fw_tag_of(m, tag);
    callout_job(fw->co, m, job, head, tag, &o);
    act_on_call(fw, &o);
}

/* A due direct message with dq-callback: its call made by callout.c. */
static void call_direct(struct forwarder *fw, struct held *m)
{
    struct call_outcome o;

    if (fw_dropped_if_not_ours(fw, m))
        return;
    callout_direct(fw->co, m, fw_topic_of(fw, m), &o);
    act_on_call(fw, &o);
}

/* The fire time of an occurrence: its id is "<schedule id>@<fire time, epoch ms>". */
static int64_t fire_of(const char *id)
{
    const char *at = strrchr(id, '@');

    return at ? strtoll(at + 1, NULL, 10) : -1;
}

/* A due occurrence of a schedule: planned, its schedule told, and 1 when it runs; a missed one
 * that catch_up skips is marked cancelled (0), and not delivered. again: it was being delivered
 * when claimed (a delivery tried again, or taken over): planned to run before. */
static int occurrence_runs(struct forwarder *fw, struct held *m, const struct job *job,
                           int again, int64_t now)
{
    struct recur_timing t;
    struct recur_plan plan;
    char err[256];
    int64_t fire = fire_of(job->id);

    if (fire < 0 || timing_parse(job->sched->timing, strlen(job->sched->timing), &t,
                                           err, sizeof(err)) < 0) {
        log_warn("job=%s: its schedule's timing does not read (%s): delivered, the schedule "
                 "goes on from its sweep", job->id, fire < 0 ? "no fire time in the id" : err);
        return 1;
    }
    recur_plan(&t, job->sched->id, fire, job->sched->runs, now, &plan);
    /* Delivered again, rescheduled by hand, its callback called again after a failure (the
     * record's due time moved), or its message moved on (a call deferred): it was planned when
     * it first came due, and runs now, whatever passed meanwhile. */
    if (!plan.run && (again || m->due_ms > job->due_ms ||
                      job->due_ms != fire + recur_jitter(job->sched->id, fire, t.jitter_ms))) {
        plan.run = 1;
        if (t.max_runs > 0 && job->sched->runs + 1 >= t.max_runs)
            plan.next_ms = -1;
    }
    if (fw->occurred)
        fw->occurred(fw->occurred_ctx, job, fire, &t, &plan);
    if (plan.run) {
        metrics_inc(M_SCHED_RUN);
        metrics_sched_lateness(now - job->due_ms);
        return 1;
    }
    metrics_inc(M_SCHED_SKIPPED);
    log_info("job=%s skipped: missed, a later fire time passed too (catch_up %s)", job->id,
             recur_catch_up_name(t.catch_up));
    m->mark = JOB_CANCELLED;
    m->stage = ST_MARK;
    vec_push(&fw->marks, m);
    return 0;
}

/* What a claimed record says to do with its message. */
static void act_on_claim(struct forwarder *fw, struct held *m, const struct store_claim *c,
                         int64_t now)
{
    char id[JOB_ID_MAX + 1], err[256], reason[512];
    struct job_record rec;
    struct job job;

    id_of(m, id);
    if (c->other) {
        int gone = claim_owner_gone(fw, c->other, c->other_len);
        if (gone > 0) {   /* claimed again at once, taking that claim over */
            if (c->other_len < sizeof(m->take_over))
                snprintf(m->take_over, sizeof(m->take_over), "%.*s", (int)c->other_len, c->other);
            else
                snprintf(m->take_over, sizeof(m->take_over), "*");
            hold_back(fw, m, now);
        } else if (gone < 0) {
            fw_retry(fw, m);
        } else {
            skip(fw, m, id, SKIP_ELSEWHERE);
        }
        return;
    }
    if (c->moved_due_ms > 0) {
        fw_move_on(fw, m, c->moved_due_ms, now);
        return;
    }
    if (c->wait) {
        hold_back(fw, m, now + MOVED_WAIT_MS);
        return;
    }
    if (!c->found || !c->claimed) {
        skip(fw, m, id, skip_reason_of(c, m->due_ms, fw->cfg->job.retention_s * 1000, now));
        return;
    }
    if (job_record_read(id, c->data, c->len, &job, &rec, err, sizeof(err)) < 0) {
        snprintf(reason, sizeof(reason), "record of job %s does not decode: %s", id, err);
        fw_dead_letter(fw, m, DLQ_RECORD, reason);
        job_release(&job);
        return;
    }
    m->claimed_due_ms = job.due_ms;   /* the claim wrote it into the head, with the token */
    if (refused_for_good(fw, m, now)) {
        refusal_reason(m, reason, sizeof(reason));
        fw_dead_letter_job(fw, m, &job, reason);
    } else if (job.due_ms > now) {
        hold_back(fw, m, job.due_ms);   /* the record is the authority on the due time */
    } else if (job.sched && !occurrence_runs(fw, m, &job, c->before == JOB_DELIVERING, now)) {
        ;   /* skipped: marked */
    } else if (job.callback) {
        call_job(fw, m, &job);
    } else if (decide_pulls(fw->cfg, job.topic, strlen(job.topic), job.deliver)) {
        ready_job(fw, m, &job);
    } else {
        fw_deliver_job(fw, m, &job, now);
    }
    job_release(&job);
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

static void scratch_release(struct scratch *sc)
{
    free(sc->a);
    free(sc->ids);
    free(sc->args);
    free(sc->marks);
    free(sc->failed);
}

/* FNV-1a, 64 bits, of text. */
static uint64_t fnv1a(const char *text)
{
    uint64_t h = 14695981039346656037ULL;

    for (; *text; text++)
        h = (h ^ (unsigned char)*text) * 1099511628211ULL;
    return h;
}

static const char token_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Writes 36 bits of v as TOKEN_PART characters that are never '|' (the head's separator). */
static void token_part(uint64_t v, char *out)
{
    for (int i = 0; i < TOKEN_PART; i++, v >>= 6)
        out[i] = token_digits[v & 63];
}

/* The claim token of m: this instance's part (from its lease token), then its message's: 24
 * bits of a hash of where the message is, and 12 bits of its group. */
static void fw_claim_token(const struct forwarder *fw, const struct held *m, char out[CLAIM_TOKEN_LEN + 1])
{
    char where[TOPIC_NAME_MAX + 48];

    snprintf(where, sizeof(where), "%s/%d/%lld", fw_topic_of(fw, m), m->partition,
             (long long)m->offset);
    memcpy(out, fw->instance, TOKEN_PART + 1);
    token_part((fnv1a(where) & 0xffffff) | (uint64_t)m->group << 24, out + TOKEN_PART + 1);
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
static int claim_owner_gone(struct forwarder *fw, const char *claim, size_t len)
{
    char owner[LEASES_TOKEN_MAX], part[TOKEN_PART], err[256];
    int g = claim_group(fw, claim, len);

    if (g < 0)
        return 1;
    if (groups_owner(fw->groups, g, owner, sizeof(owner), err, sizeof(err)) < 0) {
        warn_retried(&fw->redis_gate, "lease of group=%d: %s (retried)", g, err);
        return -1;
    }
    token_part(fnv1a(owner), part);
    return !owner[0] || memcmp(part, claim, TOKEN_PART) != 0;
}

/* Fills the claim arguments of m into slot i: its due time and its token. */
static void claim_args(struct forwarder *fw, const struct held *m, size_t i)
{
    struct rec_args *a = &fw->sc.a[i];

    id_of(m, a->id);
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
        act_on_claim(fw, m, c, fw->claim_now);
        return;
    }
    if (!fw->claim_failures++)
        snprintf(fw->claim_err, sizeof(fw->claim_err), "%s", err);
    fw_retry(fw, m);
}

static void run_claims(struct forwarder *fw, int64_t now)
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
    store_claim_batch(fw->st, n, fw->sc.ids, fw->instance, fw->sc.args, on_claim, fw, err,
                      sizeof(err));
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

    id_of(m, a->id);
    fw_claim_token(fw, m, a->token);
    a->error = NULL;
    msgpack_sbuffer_init(&a->tail);
    if (m->mark == JOB_FAILED) {
        if (m->call)
            snprintf(reason, sizeof(reason), "callback: %.480s", callout_why(m->call));
        else
            refusal_reason(m, reason, sizeof(reason));
        a->error = strdup(reason);   /* without it, the record is still marked */
    } else if (m->mark == JOB_CANCELLED) {
        a->error = strdup("skipped: a later fire time of its schedule had passed too when it "
                          "came due (catch_up)");
    }
    if (m->call && job_record_pack(callout_job_of(m->call), &a->tail) == 0)
        head = job_record_head_len(a->tail.data, a->tail.size);
    fw->sc.marks[i] = (struct store_mark){ a->id, m->claimed_due_ms, a->token,
                                           (enum job_state)m->mark, a->error,
                                           head ? a->tail.data + head : NULL,
                                           head ? a->tail.size - head : 0 };
}

static void run_marks(struct forwarder *fw)
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

/* With pull.also_kafka: a job made ready goes to its Kafka topic as well, as any delivery. */
static void deliver_too(struct forwarder *fw, struct ready_item *it)
{
    char topic[TOPIC_NAME_MAX + 1], err[256];
    struct job_record rec;
    struct job job = { .id = "" };
    int64_t now = clock_now_ms();

    it->m->stage = ST_NEW;
    if (!it->m->env.id) {
        snprintf(topic, sizeof(topic), "%.*s", (int)it->m->env.topic_len, it->m->env.topic);
        fw_deliver_direct(fw, it->m, topic, now);
    } else if (job_record_read(it->id, it->rec.data, it->rec.size, &job, &rec, err,
                               sizeof(err)) == 0) {
        fw_deliver_job(fw, it->m, &job, now);
    } else {   /* it packed the record itself: out of memory at most */
        log_error("job=%s: reading back its record failed (%s); retrying", it->id, err);
        fw_retry(fw, it->m);
    }
    job_release(&job);
}

/* What becomes of a due pull job once Redis answered e: marked (or done), sent to Kafka too, or
 * retried (counted in *failed, why it failed in *why). */
static void act_on_ready(struct forwarder *fw, struct ready_item *it, const struct pullq_entry *e,
                         size_t *failed, const char **why)
{
    if (e->failed || e->res == PULLQ_ID_BUSY) {
        (*failed)++;
        *why = e->failed ? e->err : "another job of its id is still ready or reserved";
        it->m->stage = ST_NEW;
        fw_retry(fw, it->m);
        return;
    }
    if (e->res == PULLQ_MADE_READY)
        metrics_inc(M_PULL_READY);
    if (fw->cfg->pull.also_kafka) {
        deliver_too(fw, it);
    } else if (it->m->env.id) {
        it->m->mark = JOB_DELIVERED;
        it->m->stage = ST_MARK;
        vec_push(&fw->marks, it->m);
    } else {
        fw_done(fw, it->m);
    }
}

/* Makes the due pull jobs of this flush ready, in one pipeline; a job's record is then marked
 * delivered (its message committed after), a direct message is done. */
static void run_ready(struct forwarder *fw)
{
    size_t n = 0, failed = 0;
    const char *why = "";

    for (size_t i = 0; i < fw->nready; i++) {
        struct ready_item *it = &fw->ready[i];
        if (fw_dropped_if_not_ours(fw, it->m)) {
            it->m = NULL;
            continue;
        }
        fw->entries[n++] = (struct pullq_entry){ .topic = it->topic, .id = it->id,
                                                 .rec = it->rec.data, .rec_len = it->rec.size,
                                                 .due_ms = it->due_ms, .ttr_ms = it->ttr_ms };
    }
    pullq_ready_many(fw->pq, n, fw->entries);
    for (size_t i = 0, k = 0; i < fw->nready; i++) {
        struct ready_item *it = &fw->ready[i];
        if (it->m)
            act_on_ready(fw, it, &fw->entries[k++], &failed, &why);
        msgpack_sbuffer_destroy(&it->rec);
    }
    if (failed) {
        metrics_inc(M_REDIS_ERRORS);
        warn_retried(&fw->redis_gate, "making %zu of %zu pull jobs ready failed (retried): %s",
                     failed, fw->nready, why);
    }
    fw->nready = 0;
}

/* Why decide_message dead-letters m, in words. */
static void dead_reason(const struct forwarder *fw, const struct held *m, enum dlq_reason r,
                        char *out, size_t outlen)
{
    char why[TOPIC_NAME_MAX + 128];

    switch (r) {
    case DLQ_ENVELOPE:
        snprintf(out, outlen, "%s", m->env_err);
        break;
    case DLQ_TOPIC: case DLQ_LOOP: case DLQ_DEAD_LETTER_TOPIC:
        levels_check_target(&fw->cfg->delay.levels, fw->cfg->delay.dlq_topic, m->env.topic,
                            m->env.topic_len, why, sizeof(why));
        snprintf(out, outlen, "header %s %s: %s", HDR_TOPIC,
                 r == DLQ_TOPIC ? "is not a valid topic" : "names no business topic", why);
        break;
    case DLQ_TOO_FAR:
        snprintf(out, outlen, "header %s is more than job.max_delay_s (%lld s) away", HDR_DUE,
                 (long long)fw->cfg->job.max_delay_s);
        break;
    case DLQ_REFUSED:
        refusal_reason(m, out, outlen);
        break;
    case DLQ_ID:
        job_id_valid(m->env.id, m->env.id_len, why, sizeof(why));
        snprintf(out, outlen, "header %s is not a valid job id: %s", HDR_ID, why);
        break;
    default:
        snprintf(out, outlen, "cannot be handled");
    }
}

/* Sorts one message of a flush: at once, or into the claim and mark pipelines, as
 * decide_message says. */
static void route(struct forwarder *fw, struct held *m, int64_t now)
{
    char topic[TOPIC_NAME_MAX + 1], why[TOPIC_NAME_MAX + 128], reason[512];
    struct decide_facts f = { .envelope_ok = m->env_ok, .target = TARGET_OK, .due_ms = m->due_ms,
                             .now_ms = now, .max_delay_ms = fw->cfg->job.max_delay_s * 1000,
                             .smallest_level_ms = fw->cfg->delay.levels.ms[0] };
    enum dlq_reason r;

    if (m->stage == ST_MARK) {
        vec_push(&fw->marks, m);
        return;
    }
    if (m->env_ok && !m->env.topic) {
        /* a job's message without dq-topic (its record names the target), or a direct
         * callback without one */
        f.target = TARGET_OK;
        f.has_id = m->env.id != NULL;
        f.id_valid = f.has_id && job_id_valid(m->env.id, m->env.id_len, why, sizeof(why)) == 0;
    } else if (m->env_ok) {
        f.target = levels_check_target(&fw->cfg->delay.levels, fw->cfg->delay.dlq_topic,
                                       m->env.topic, m->env.topic_len, why, sizeof(why));
        f.has_id = m->env.id != NULL;
        f.id_valid = f.has_id && job_id_valid(m->env.id, m->env.id_len, why, sizeof(why)) == 0;
        f.refused_for_good = !f.has_id && refused_for_good(fw, m, now);
    }
    switch (decide_message(&f, &r)) {
    case DECIDE_DEAD:
        dead_reason(fw, m, r, reason, sizeof(reason));
        fw_dead_letter(fw, m, r, reason);
        break;
    case DECIDE_MOVE:
        move_down(fw, m, now);
        break;
    case DECIDE_WAIT:
        hold_back(fw, m, m->due_ms);   /* its offset stays unfinished meanwhile */
        break;
    case DECIDE_CLAIM:
        vec_push(&fw->claims, m);
        break;
    case DECIDE_DELIVER:
        if (m->env.callback) {
            call_direct(fw, m);
            break;
        }
        if (decide_pulls(fw->cfg, m->env.topic, m->env.topic_len, m->env.deliver)) {
            ready_direct(fw, m);
            break;
        }
        snprintf(topic, sizeof(topic), "%.*s", (int)m->env.topic_len, m->env.topic);
        fw_deliver_direct(fw, m, topic, now);
        break;
    }
}

/* Room for n outcomes. 0, or -1 when out of memory. */
static int out_reserve(struct forwarder *fw, size_t n)
{
    struct fw_outcome *no = grow(fw->out, &fw->out_cap, n, sizeof(*no));

    if (!no)
        return -1;
    fw->out = no;
    return 0;
}

int forwarder_submit(struct forwarder *fw, struct held *m)
{
    size_t n = fw->in_flight + 1;

    /* every message in flight may be in each batch at once, and each leaves with an outcome */
    if (vec_reserve(&fw->batch, n) < 0 || vec_reserve(&fw->claims, n) < 0 ||
        vec_reserve(&fw->marks, n) < 0 || out_reserve(fw, n + fw->nout) < 0) {
        log_error("out of memory taking topic=%s offset=%lld", fw_topic_of(fw, m),
                  (long long)m->offset);
        return -1;
    }
    fw->in_flight++;
    vec_push(&fw->batch, m);
    return 0;
}

int forwarder_outcome(struct forwarder *fw, struct fw_outcome *out)
{
    if (fw->out_next == fw->nout) {
        fw->out_next = fw->nout = 0;
        return 0;
    }
    *out = fw->out[fw->out_next++];
    return 1;
}

void forwarder_flush(struct forwarder *fw)
{
    int64_t now = clock_now_ms();

    for (size_t i = 0; i < fw->batch.n; i++)
        route(fw, fw->batch.v[i], now);
    fw->batch.n = 0;
    if (fw->claims.n)
        run_claims(fw, now);
    if (fw->nready)
        run_ready(fw);
    if (fw->marks.n)
        run_marks(fw);
}

/* When Kafka acknowledged m: its send plus librdkafka's latency from the produce call to the
 * broker's answer, so that how often this thread polls does not count. */
static int64_t acked_ms(const struct held *m, const rd_kafka_message_t *rkm)
{
    int64_t us = rd_kafka_message_latency(rkm);

    return us >= 0 ? m->sent_ms + us / 1000 : clock_now_ms();
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    struct forwarder *fw = opaque;
    struct held *m = rkm->_private;

    (void)rk;
    if (rkm->err) {
        warn_retried(&fw->kafka_gate, "delivery to topic=%s failed (retried): %s",
                     rd_kafka_topic_name(rkm->rkt), rd_kafka_err2str(rkm->err));
        note_failure(m, rkm->err);
        m->stage = ST_NEW;
        fw_retry(fw, m);
        return;
    }
    if (m->stage == ST_SEND_JOB || m->stage == ST_SEND_DIRECT) {
        metrics_inc(M_JOBS_DELIVERED);
        metrics_lateness(acked_ms(m, rkm) - m->due_ms);
    }
    if (m->stage == ST_SEND_JOB || m->stage == ST_SEND_DEAD_JOB) {
        m->mark = m->stage == ST_SEND_JOB ? JOB_DELIVERED : JOB_FAILED;
        m->stage = ST_MARK;
        vec_push(&fw->marks, m);
    } else {
        fw_done(fw, m);
    }
}

void forwarder_poll(struct forwarder *fw)
{
    struct call_outcome o;

    rd_kafka_poll(fw->rk, 0);
    while (callout_outcome(fw->co, &o))
        act_on_call(fw, &o);
    if (fw->marks.n)
        run_marks(fw);
}

size_t forwarder_in_flight(const struct forwarder *fw)
{
    return fw->in_flight;
}

rd_kafka_t *forwarder_producer(struct forwarder *fw)
{
    return fw->rk;
}

struct forwarder *forwarder_new(const struct config *cfg, struct groups *gs, int wake_fd,
                                char *err, size_t errlen)
{
    struct forwarder *fw = calloc(1, sizeof(*fw));

    if (!fw || !(fw->st = store_new(cfg)) || !(fw->pq = pullq_new(cfg))) {
        snprintf(err, errlen, "out of memory");
        if (fw)
            store_free(fw->st);
        free(fw);
        return NULL;
    }
    fw->cfg = cfg;
    fw->groups = gs;
    token_part(fnv1a(groups_token(gs)), fw->instance);   /* so another can tell its lease */
    fw->instance[TOKEN_PART] = ':';
    fw->instance[TOKEN_PART + 1] = '\0';
    if (!(fw->rk = producer_new(cfg, "forwarder", DELIVERY_TIMEOUT_MS, FORWARD_LINGER_MS, dr_cb, fw,
                                err, errlen))) {
        store_free(fw->st);
        pullq_free(fw->pq);
        free(fw);
        return NULL;
    }
    if (!(fw->warm = warm_new(fw->rk, err, errlen)) ||
        !(fw->co = callout_new(cfg, fw->st, wake_fd, err, errlen))) {
        warm_free(fw->warm);
        rd_kafka_destroy(fw->rk);
        store_free(fw->st);
        pullq_free(fw->pq);
        free(fw);
        return NULL;
    }
    producer_warm(fw->rk, cfg, WARM_TIMEOUT_MS);
    return fw;
}

void forwarder_on_occurrence(struct forwarder *fw, forwarder_occurrence_fn *fn, void *ctx)
{
    fw->occurred = fn;
    fw->occurred_ctx = ctx;
}

struct warm *forwarder_warm(struct forwarder *fw)
{
    return fw->warm;
}

void forwarder_free(struct forwarder *fw)
{
    if (!fw)
        return;
    callout_free(fw->co);   /* calls unanswered: made again after a restart */
    rd_kafka_flush(fw->rk, 5000);
    if (fw->marks.n)
        run_marks(fw);
    warm_free(fw->warm);
    rd_kafka_destroy(fw->rk);
    store_free(fw->st);
    pullq_free(fw->pq);
    free(fw->ready);
    free(fw->entries);
    scratch_release(&fw->sc);
    for (size_t i = fw->out_next; i < fw->nout; i++)
        free(fw->out[i].m);   /* finished after the holder's last commit: nothing to record */
    free(fw->out);
    free(fw->batch.v);
    free(fw->claims.v);
    free(fw->marks.v);
    free(fw);
}
