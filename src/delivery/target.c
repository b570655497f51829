/* target: where a due message goes. decide_dest names the one target of a due job or direct
 * message; each target (Kafka in send.c, pull topics in ready.c, callbacks in calls.c) takes
 * it through the same small interface and reports what came of it here, where the one set of
 * rules acts on the report: marks, retries, moves on and dead letters. A fourth target is one
 * more struct target and one more dest. Part of the forwarder; the shared inside is
 * include/delivery/forwarder_link.h. */
#include <string.h>

#include "delivery/forwarder_link.h"

#define LOG_MODULE "forwarder"

static const struct target *const targets[] = {
    [DEST_CALLBACK] = &fw_callback_target,
    [DEST_PULL] = &fw_pull_target,
    [DEST_KAFKA] = &fw_kafka_target,
};

/* To dest: a target takes m (and job), or, with nothing left to do, it is delivered. */
static void hand_to(struct forwarder *fw, enum dest dest, struct held *m, struct job *job)
{
    if (dest == DEST_DONE) {
        fw_target_report(fw, m, job, &(struct target_report){ .says = TARGET_DELIVERED });
        return;
    }
    targets[dest]->take(fw, m, job);
}

void fw_deliver(struct forwarder *fw, struct held *m, struct job *job)
{
    if (job)
        hand_to(fw, decide_dest(fw->cfg, job->topic, strlen(job->topic), job->deliver,
                                job->callback != NULL,
                                job->callback && job_called_back(job->callback)), m, job);
    else
        hand_to(fw, decide_dest(fw->cfg, m->env.topic, m->env.topic ? m->env.topic_len : 0,
                                m->env.deliver, m->env.callback != NULL, m->called), m, NULL);
}

void fw_target_report(struct forwarder *fw, struct held *m, struct job *job,
                      const struct target_report *r)
{
    switch (r->says) {
    case TARGET_DELIVERED:
        if (m->env.id) {   /* a job's message: its record marked delivered, then it is done */
            m->mark = JOB_DELIVERED;
            m->stage = ST_MARK;
            vec_push(&fw->marks, m);
        } else {
            m->stage = ST_NEW;
            fw_done(fw, m);
        }
        break;
    case TARGET_ONWARD:
        m->stage = ST_NEW;
        if (job) {
            hand_to(fw, decide_dest(fw->cfg, job->topic, strlen(job->topic), job->deliver, 0, 1),
                    m, job);
        } else {
            m->called = 1;
            fw_deliver(fw, m, NULL);
        }
        break;
    case TARGET_RETRY:
        m->stage = ST_NEW;
        fw_retry(fw, m);
        break;
    case TARGET_LATER:
        m->stage = ST_NEW;
        fw_move_on(fw, m, r->at_ms, clock_now_ms());
        break;
    case TARGET_DEAD:
        m->stage = ST_NEW;
        if (job)
            fw_dead_letter_job(fw, m, job, r->why);
        else
            fw_dead_letter(fw, m, r->dlq, r->why);
        break;
    case TARGET_GONE:
        m->stage = ST_NEW;
        fw_done(fw, m);
        break;
    }
}
