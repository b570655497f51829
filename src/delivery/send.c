/* send: what the forwarder produces to Kafka (deliveries to business topics, moves down the
 * levels, dead letters) and their delivery reports; how Kafka refused a message, and when a
 * refusal is for good. Part of the forwarder; the shared inside is
 * include/delivery/forwarder_link.h. */
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
#include "kafka/letter.h"

#define LOG_MODULE "forwarder"

/* A produce of m failed with e, right away or in its delivery report. A refused letter is sent
 * again without its body; a refused delivery or move is remembered, for refused_for_good. */
void fw_note_failure(struct held *m, rd_kafka_resp_err_t e)
{
    metrics_inc(M_KAFKA_ERRORS);
    if (letter_refusal_of(e) == LETTER_NOT_REFUSED)
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
int fw_refused_for_good(const struct forwarder *fw, const struct held *m, int64_t now)
{
    return m->refused_since_ms &&
           (letter_refusal_of((rd_kafka_resp_err_t)m->last_err) == LETTER_REFUSED_NEVER ||
            now - m->refused_since_ms >= fw->cfg->job.refused_retry_s * 1000);
}

/* Why m goes to the dead letters after refused_for_good. */
void fw_refusal_reason(const struct held *m, char *out, size_t outlen)
{
    rd_kafka_resp_err_t e = (rd_kafka_resp_err_t)m->last_err;
    char what[TOPIC_NAME_MAX + 32];

    if (m->refused_move)
        snprintf(what, sizeof(what), "its move down the delay topics");
    else
        snprintf(what, sizeof(what), "delivery to topic %.*s", (int)m->env.topic_len, m->env.topic);
    if (letter_refusal_of(e) == LETTER_REFUSED_NEVER)
        snprintf(out, outlen, "%s refused: %s%s", what, rd_kafka_err2str(e),
                 e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? " (over message.max.bytes)" : "");
    else
        snprintf(out, outlen, "%s refused for %lld s: %s", what,
                 (long long)((clock_now_ms() - m->refused_since_ms) / 1000), rd_kafka_err2str(e));
}


/* Produces with a copy of every buffer; takes hdrs. Returns 0 (sent), -1 (failed: the caller
 * retries) or 1 (m's group is no longer surely ours: m was dropped, nothing was sent). */
int fw_produce(struct forwarder *fw, struct held *m, const char *topic, const void *key,
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
        fw_note_failure(m, e);
        return -1;
    }
    return 0;
}

/* Copies m's headers, leaving out control headers (all, or only the named one). */
rd_kafka_headers_t *fw_copy_headers(const struct held *m, int drop_control, const char *drop)
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

void fw_dead_letter(struct forwarder *fw, struct held *m, enum dlq_reason why, const char *reason)
{
    rd_kafka_headers_t *hdrs = fw_copy_headers(m, 0, NULL);
    char source[TOPIC_NAME_MAX + 48];

    log_warn("dead letter topic=%s partition=%d offset=%lld: %s", fw_topic_of(fw, m),
             m->partition, (long long)m->offset, reason);
    metrics_dead_letter(why);
    snprintf(source, sizeof(source), "%s/%d/%lld", fw_topic_of(fw, m), m->partition,
             (long long)m->offset);
    letter_message_headers(hdrs, reason, source, m->dead_bare);
    if (m->call) {
        rd_kafka_header_remove(hdrs, HDR_CALL_ATTEMPTS);   /* a retry's count, now the total */
        callout_dead_headers(hdrs, m->call);
    }
    m->stage = ST_SEND_DEAD;
    if (fw_produce(fw, m, fw->cfg->delay.dlq_topic, m->key, m->key_len,
                   m->dead_bare ? NULL : m->value, m->dead_bare ? 0 : m->value_len, hdrs,
                   clock_now_ms()) < 0)
        fw_retry(fw, m);
}

/* The job's own body and headers go to the dead-letter topic, so nothing accepted is lost. */
void fw_dead_letter_job(struct forwarder *fw, struct held *m, const struct job *job,
                        const char *reason)
{
    /* a callback's calls are counted by callout_dead_headers */
    rd_kafka_headers_t *hdrs = letter_job_headers(job, reason, 0, m->dead_bare);
    const char *key = job->key ? job->key : job->id;

    log_warn("dead letter job=%s: %s", job->id, reason);
    metrics_dead_letter(m->call ? DLQ_CALLBACK : DLQ_REFUSED);
    if (m->call)
        callout_dead_headers(hdrs, m->call);
    m->stage = ST_SEND_DEAD_JOB;
    if (fw_produce(fw, m, fw->cfg->delay.dlq_topic, key, strlen(key),
                   m->dead_bare ? NULL : job->body, m->dead_bare ? 0 : job->body_len, hdrs,
                   clock_now_ms()) < 0)
        fw_retry(fw, m);
}

/* Not due yet: on to the largest level not above the remaining time. */
void fw_move_down(struct forwarder *fw, struct held *m, int64_t now)
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

void fw_deliver_direct(struct forwarder *fw, struct held *m, const char *topic)
{
    rd_kafka_headers_t *hdrs = fw_copy_headers(m, 1, NULL);
    int64_t now = clock_now_ms();   /* when it is sent, not when its batch began */
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

/* Produces a job's message, stamped dq-sent-ms now; takes hdrs. */
static void send_job(struct forwarder *fw, struct held *m, const char *topic, const char *key,
                     size_t key_len, const char *value, size_t value_len, rd_kafka_headers_t *hdrs)
{
    int64_t now = clock_now_ms();   /* when it is sent, not when its batch began */
    int rc;

    headers_add_int(hdrs, HDR_SENT, now);
    m->stage = ST_SEND_JOB;
    m->sent_ms = now;
    rc = fw_produce(fw, m, topic, key, key_len, value, value_len, hdrs, now);
    if (rc < 0)
        fw_retry(fw, m);
    else if (rc == 0)
        note_forward(fw, topic);
}

/* Keeps a job's message to send with fw_send_held: 0, or -1 when out of memory. */
static int hold_send(struct forwarder *fw, struct held *m, const char *topic, const char *key,
                     size_t key_len, const char *value, size_t value_len, rd_kafka_headers_t *hdrs)
{
    size_t topic_len = strlen(topic);
    struct held_send *hs;
    char *copy;

    if (fw->nsends == fw->sends_cap || !(copy = malloc(topic_len + 1 + key_len + value_len + 1)))
        return -1;
    hs = &fw->sends[fw->nsends++];
    memcpy(copy, topic, topic_len + 1);
    memcpy(copy + topic_len + 1, key, key_len);
    memcpy(copy + topic_len + 1 + key_len, value, value_len);
    *hs = (struct held_send){ m, hdrs, copy, copy + topic_len + 1, key_len,
                              copy + topic_len + 1 + key_len, value_len };
    return 0;
}

void fw_deliver_job(struct forwarder *fw, struct held *m, const struct job *job)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(job->nheaders + 3);
    const char *key = job->key ? job->key : job->id;
    /* go-delayqueue's consumers take the job id from the message and get the job by it. */
    const char *value = fw->cfg->compat.go_delayqueue ? job->id : job->body;
    size_t value_len = fw->cfg->compat.go_delayqueue ? strlen(job->id) : job->body_len;

    for (size_t i = 0; i < job->nheaders; i++)
        headers_add(hdrs, job->headers[i].name, job->headers[i].value, strlen(job->headers[i].value));
    headers_add(hdrs, HDR_ID, job->id, strlen(job->id));
    headers_add_int(hdrs, HDR_DUE, job->due_ms);
    m->due_ms = job->due_ms;   /* for the lateness of the delivery */
    if (fw->hold_sends &&
        hold_send(fw, m, job->topic, key, strlen(key), value, value_len, hdrs) == 0)
        return;
    send_job(fw, m, job->topic, key, strlen(key), value, value_len, hdrs);
}

int fw_hold_sends(struct forwarder *fw, size_t n)
{
    struct held_send *hs;

    if (n > fw->sends_cap) {
        if (!(hs = realloc(fw->sends, n * sizeof(*hs))))
            return -1;
        fw->sends = hs;
        fw->sends_cap = n;
    }
    fw->hold_sends = 1;
    return 0;
}

void fw_send_held(struct forwarder *fw)
{
    fw->hold_sends = 0;
    for (size_t i = 0; i < fw->nsends; i++) {
        struct held_send *hs = &fw->sends[i];
        send_job(fw, hs->m, hs->topic, hs->key, hs->key_len, hs->value, hs->value_len, hs->hdrs);
        free(hs->topic);
    }
    fw->nsends = 0;
}

/* When Kafka acknowledged m: its send plus librdkafka's latency from the produce call to the
 * broker's answer, so that how often this thread polls does not count. */
static int64_t acked_ms(const struct held *m, const rd_kafka_message_t *rkm)
{
    int64_t us = rd_kafka_message_latency(rkm);

    return us >= 0 ? m->sent_ms + us / 1000 : clock_now_ms();
}

void fw_report(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque)
{
    struct forwarder *fw = opaque;
    struct held *m = rkm->_private;

    (void)rk;
    if (rkm->err) {
        warn_retried(&fw->kafka_gate, "delivery to topic=%s failed (retried): %s",
                     rd_kafka_topic_name(rkm->rkt), rd_kafka_err2str(rkm->err));
        fw_note_failure(m, rkm->err);
        fw_target_report(fw, m, NULL, &(struct target_report){ .says = TARGET_RETRY });
        return;
    }
    if (m->stage == ST_SEND_JOB || m->stage == ST_SEND_DIRECT) {
        metrics_inc(M_JOBS_DELIVERED);
        metrics_lateness(acked_ms(m, rkm) - m->due_ms);
        fw_target_report(fw, m, NULL, &(struct target_report){ .says = TARGET_DELIVERED });
    } else if (m->stage == ST_SEND_DEAD_JOB) {
        m->mark = JOB_FAILED;
        m->stage = ST_MARK;
        vec_push(&fw->marks, m);
    } else {
        fw_done(fw, m);
    }
}

/* The Kafka target: a due job's body, or a direct message itself, to its business topic. */
static void take_kafka(struct forwarder *fw, struct held *m, struct job *job)
{
    char topic[TOPIC_NAME_MAX + 1];

    if (job) {
        fw_deliver_job(fw, m, job);
        return;
    }
    snprintf(topic, sizeof(topic), "%.*s", (int)m->env.topic_len, m->env.topic);
    fw_deliver_direct(fw, m, topic);
}

const struct target fw_kafka_target = { "kafka", take_kafka };
