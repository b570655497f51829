/* decide: the decision of what a due delay-topic message becomes. The contract is in
 * include/core/decide.h. */
#include <fnmatch.h>
#include <stdio.h>

#include "core/decide.h"

static enum decision dead(enum dlq_reason reason, enum dlq_reason *why)
{
    *why = reason;
    return DECIDE_DEAD;
}

enum decision decide_message(const struct decide_facts *f, enum dlq_reason *why)
{
    static const enum dlq_reason target_reason[] = {
        [TARGET_INVALID] = DLQ_TOPIC, [TARGET_DELAY_TOPIC] = DLQ_LOOP,
        [TARGET_DEAD_LETTER] = DLQ_DEAD_LETTER_TOPIC,
    };
    int64_t left = f->due_ms - f->now_ms;

    if (!f->envelope_ok)
        return dead(DLQ_ENVELOPE, why);
    if (f->target != TARGET_OK)
        return dead(target_reason[f->target], why);
    if (left > f->max_delay_ms)
        return dead(DLQ_TOO_FAR, why);
    if (!f->has_id && f->refused_for_good)
        return dead(DLQ_REFUSED, why);
    if (left >= f->smallest_level_ms)
        return DECIDE_MOVE;
    /* Less than the smallest level left: it waits here, not another trip through Kafka, which
     * can take longer than what remains. */
    if (left > 0)
        return DECIDE_WAIT;
    if (f->has_id && !f->id_valid)
        return dead(DLQ_ID, why);
    return f->has_id ? DECIDE_CLAIM : DECIDE_DELIVER;
}

int decide_pulls(const struct config *cfg, const char *topic, size_t len, enum job_deliver deliver)
{
    char name[TOPIC_NAME_MAX + 1];

    if (deliver != JOB_DELIVER_AUTO)
        return deliver == JOB_DELIVER_PULL;
    snprintf(name, sizeof(name), "%.*s", (int)len, topic);
    for (int i = 0; i < cfg->pull.ntopics; i++)
        if (fnmatch(cfg->pull.topics[i], name, 0) == 0)
            return 1;
    return 0;
}

enum dest decide_dest(const struct config *cfg, const char *topic, size_t len,
                      enum job_deliver deliver, int has_callback, int called_back)
{
    if (has_callback && !called_back)
        return DEST_CALLBACK;
    if (!len)
        return DEST_DONE;
    return decide_pulls(cfg, topic, len, deliver) ? DEST_PULL : DEST_KAFKA;
}
