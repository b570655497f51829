/* calls: the callback target. A due callback job or direct message is handed to callout.c,
 * which makes its call on the callbacks thread; what callout.c reports of it is turned into
 * the targets' common report (target.c), except a direct message's next attempt, which goes
 * back into the delay topics as a copy carrying its calls so far. Part of the forwarder; the
 * shared inside is include/delivery/forwarder_link.h. */
#include <stdio.h>

#include "delivery/forwarder_link.h"

#define LOG_MODULE "forwarder"

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

void fw_act_on_call(struct forwarder *fw, const struct call_outcome *o)
{
    struct target_report r = { .says = TARGET_GONE };
    struct held *m = o->m;
    struct job *job = NULL;

    switch (o->act) {
    case CO_MADE:
        m->stage = ST_CALL;
        return;
    case CO_AGAIN_DIRECT:
        call_again_direct(fw, m, o->at_ms, o->now_ms);
        return;
    case CO_WRITE_FAILED:
        metrics_inc(M_REDIS_ERRORS);
        warn_retried(&fw->redis_gate, "job=%s: writing its next attempt failed (retried): %s",
                     o->job->id, o->why);
        r.says = TARGET_RETRY;
        break;
    case CO_RETRY:
        r.says = TARGET_RETRY;
        break;
    case CO_GONE:
        break;
    case CO_AGAIN:
        r = (struct target_report){ .says = TARGET_LATER, .at_ms = o->at_ms };
        break;
    case CO_DELIVERED: case CO_MARK:
        r.says = TARGET_DELIVERED;
        break;
    case CO_DELIVER_DIRECT:
        r.says = TARGET_ONWARD;
        break;
    case CO_DELIVER_JOB:
        r.says = TARGET_ONWARD;
        job = o->job;
        break;
    case CO_DEAD:
        r = (struct target_report){ .says = TARGET_DEAD, .dlq = o->dlq, .why = o->why };
        break;
    case CO_DEAD_JOB:
        r = (struct target_report){ .says = TARGET_DEAD, .why = o->why };
        job = o->job;
        break;
    }
    fw_target_report(fw, m, job, &r);
}

/* A due callback job (m its message; job, which callout.c takes) or direct message with
 * dq-callback (job NULL): its call made by callout.c, a job's under the record's head as
 * claimed and m's tag (its next attempt is written under them). */
static void take_call(struct forwarder *fw, struct held *m, struct job *job)
{
    char head[CALL_HEAD_MAX], token[CLAIM_TOKEN_LEN + 1], tag[ENVELOPE_TAG_MAX + 1];
    struct call_outcome o;

    if (fw_dropped_if_not_ours(fw, m))
        return;
    if (!job) {
        callout_direct(fw->co, m, fw_topic_of(fw, m), &o);
    } else {
        fw_claim_token(fw, m, token);
        snprintf(head, sizeof(head), "%c%lld||%s|", job_state_letter(JOB_DELIVERING),
                 (long long)m->claimed_due_ms, token);
        fw_tag_of(m, tag);
        callout_job(fw->co, m, job, head, tag, &o);
    }
    fw_act_on_call(fw, &o);
}

const struct target fw_callback_target = { "callback", take_call };
