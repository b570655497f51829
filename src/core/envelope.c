/* envelope: the dq-* control headers of a delay-topic message (parsed from a neutral header
 * array), the due and act times they imply, and the size a job's delivered message will have.
 * The contract is in include/core/envelope.h. */
#include <stdio.h>
#include <string.h>

#include "core/envelope.h"

int parse_int64(const char *s, size_t len, int64_t *out)
{
    int64_t v = 0;

    if (!s || len == 0 || len > 19)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (v > (INT64_MAX - (s[i] - '0')) / 10)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int envelope_is_control(const char *name)
{
    return strncmp(name, HDR_PREFIX, sizeof(HDR_PREFIX) - 1) == 0;
}

static int set_once(const char **dst, size_t *dst_len, const struct hdr *h, char *err, size_t errlen)
{
    if (*dst) {
        snprintf(err, errlen, "header %s is repeated", h->name);
        return -1;
    }
    if (!h->value || h->len == 0) {
        snprintf(err, errlen, "header %s is empty", h->name);
        return -1;
    }
    *dst = h->value;
    *dst_len = h->len;
    return 0;
}

int envelope_parse(const struct hdr *hdrs, size_t n, struct envelope *env, char *err, size_t errlen)
{
    const char *due = NULL, *hops = NULL, *deliver = NULL, *ttr = NULL, *att = NULL, *first = NULL;
    size_t due_len = 0, hops_len = 0, deliver_len = 0, ttr_len = 0, att_len = 0, first_len = 0;
    int64_t v;

    memset(env, 0, sizeof(*env));
    for (size_t i = 0; i < n; i++) {
        const struct hdr *h = &hdrs[i];
        int rc = 0;

        if (strcmp(h->name, HDR_TOPIC) == 0)
            rc = set_once(&env->topic, &env->topic_len, h, err, errlen);
        else if (strcmp(h->name, HDR_ID) == 0)
            rc = set_once(&env->id, &env->id_len, h, err, errlen);
        else if (strcmp(h->name, HDR_DUE) == 0)
            rc = set_once(&due, &due_len, h, err, errlen);
        else if (strcmp(h->name, HDR_TAG) == 0)
            rc = set_once(&env->tag, &env->tag_len, h, err, errlen);
        else if (strcmp(h->name, HDR_HOPS) == 0)
            rc = set_once(&hops, &hops_len, h, err, errlen);
        else if (strcmp(h->name, HDR_DELIVER) == 0)
            rc = set_once(&deliver, &deliver_len, h, err, errlen);
        else if (strcmp(h->name, HDR_TTR) == 0)
            rc = set_once(&ttr, &ttr_len, h, err, errlen);
        else if (strcmp(h->name, HDR_CALLBACK) == 0)
            rc = set_once(&env->callback, &env->callback_len, h, err, errlen);
        else if (strcmp(h->name, HDR_CALL_ID) == 0)
            rc = set_once(&env->call_id, &env->call_id_len, h, err, errlen);
        else if (strcmp(h->name, HDR_CALL_ATTEMPTS) == 0)
            rc = set_once(&att, &att_len, h, err, errlen);
        else if (strcmp(h->name, HDR_CALL_FIRST) == 0)
            rc = set_once(&first, &first_len, h, err, errlen);
        if (rc < 0)
            return -1;
    }
    if (!env->topic && !env->id && !env->callback) {   /* a job's record names its target */
        snprintf(err, errlen, "header %s is missing", HDR_TOPIC);
        return -1;
    }
    if (env->call_id) {   /* it becomes the webhook-id header line: a job id, or nothing */
        char why[128];
        if (job_id_valid(env->call_id, env->call_id_len, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "header %s is not a job id: %s", HDR_CALL_ID, why);
            return -1;
        }
    }
    if (env->tag_len > ENVELOPE_TAG_MAX) {
        snprintf(err, errlen, "header %s is longer than %d characters", HDR_TAG, ENVELOPE_TAG_MAX);
        return -1;
    }
    if (due) {
        if (parse_int64(due, due_len, &env->due_ms) < 0) {
            snprintf(err, errlen, "header %s is not a decimal epoch-ms time: \"%.*s\"", HDR_DUE,
                     (int)(due_len > 40 ? 40 : due_len), due);
            return -1;
        }
        env->has_due = 1;
    }
    if (hops) {
        if (parse_int64(hops, hops_len, &v) < 0 || v > 1000000) {
            snprintf(err, errlen, "header %s is not a small decimal count", HDR_HOPS);
            return -1;
        }
        env->hops = (int)v;
    }
    if (deliver && job_deliver_of(deliver, deliver_len, &env->deliver) < 0) {
        snprintf(err, errlen, "header %s is not \"pull\" or \"kafka\"", HDR_DELIVER);
        return -1;
    }
    if (att && (parse_int64(att, att_len, &env->call_attempts) < 0 || env->call_attempts > 1000000)) {
        snprintf(err, errlen, "header %s is not a small decimal count", HDR_CALL_ATTEMPTS);
        return -1;
    }
    if (first && parse_int64(first, first_len, &env->call_first_ms) < 0) {
        snprintf(err, errlen, "header %s is not a decimal epoch-ms time", HDR_CALL_FIRST);
        return -1;
    }
    if (ttr && (parse_int64(ttr, ttr_len, &env->ttr_ms) < 0 || env->ttr_ms < 1000 ||
                env->ttr_ms > JOB_TTR_MAX_MS)) {
        snprintf(err, errlen, "header %s is not a decimal count of ms from 1000 to %lld", HDR_TTR,
                 (long long)JOB_TTR_MAX_MS);
        return -1;
    }
    return 0;
}

/* At most what Kafka adds to a record's key, value and headers: its length, attributes,
 * timestamp and offset deltas, and the key, value and header counts as varints of up to 5 or
 * 10 bytes (36), and the header of the batch that holds it (61), rounded up. */
#define RECORD_OVERHEAD_MAX 128
#define HEADER_OVERHEAD_MAX 10   /* the name's and the value's lengths as varints */
#define NUMBER_TEXT_MAX 20       /* a decimal int64 */

static size_t header_bytes(const char *name, size_t value_len)
{
    return strlen(name) + value_len + HEADER_OVERHEAD_MAX;
}

size_t envelope_delivery_bytes(const struct job *job)
{
    size_t n = RECORD_OVERHEAD_MAX + strlen(job->key ? job->key : job->id) + job->body_len +
               header_bytes(HDR_ID, strlen(job->id)) + header_bytes(HDR_DUE, NUMBER_TEXT_MAX) +
               header_bytes(HDR_SENT, NUMBER_TEXT_MAX);

    for (size_t i = 0; i < job->nheaders; i++)
        n += header_bytes(job->headers[i].name, strlen(job->headers[i].value));
    return n;
}

void envelope_times(const struct envelope *env, int64_t timestamp_ms, int64_t level_ms,
                    int64_t *act_ms, int64_t *due_ms)
{
    int64_t hop;
    int routed = env->id != NULL || env->hops > 0;
    int64_t due;

    /* A producer may set any CreateTime: saturate rather than overflow. */
    if (__builtin_add_overflow(timestamp_ms, level_ms, &hop))
        hop = INT64_MAX;
    due = hop;
    if (env->has_due)
        due = routed || env->due_ms > hop ? env->due_ms : hop;
    *due_ms = due;
    *act_ms = due < hop ? due : hop;
}
