/* ready: due pull jobs made ready in their topics' queues in Redis, in one pipeline per
 * flush, and then marked delivered (or, with pull.also_kafka, sent on to Kafka too). Part of
 * the forwarder; the shared inside is include/delivery/forwarder_link.h. */
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

/* Queues job (a due pull job, m its message) to be made ready by run_ready. */
void fw_ready_job(struct forwarder *fw, struct held *m, const struct job *job)
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
    it->max_pops = job->max_pops;
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
void fw_ready_direct(struct forwarder *fw, struct held *m)
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
    fw_ready_job(fw, m, &job);
    for (size_t i = 0; i < job.nheaders; i++)
        free(hdrs[i].value);
}

/* With pull.also_kafka: a job made ready goes to its Kafka topic as well, as any delivery. */
static void deliver_too(struct forwarder *fw, struct ready_item *it)
{
    char topic[TOPIC_NAME_MAX + 1], err[256];
    struct job_record rec;
    struct job job = { .id = "" };

    it->m->stage = ST_NEW;
    if (!it->m->env.id) {
        snprintf(topic, sizeof(topic), "%.*s", (int)it->m->env.topic_len, it->m->env.topic);
        fw_deliver_direct(fw, it->m, topic);
    } else if (job_record_read(it->id, it->rec.data, it->rec.size, &job, &rec, err,
                               sizeof(err)) == 0) {
        fw_deliver_job(fw, it->m, &job);
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
        fw_target_report(fw, it->m, NULL, &(struct target_report){ .says = TARGET_RETRY });
        return;
    }
    if (e->res == PULLQ_MADE_READY)
        metrics_inc(M_PULL_READY);
    if (fw->cfg->pull.also_kafka)
        deliver_too(fw, it);
    else
        fw_target_report(fw, it->m, NULL, &(struct target_report){ .says = TARGET_DELIVERED });
}

/* The records of the flush's due pull jobs lose their expiry before the jobs are made ready:
 * a pull job and its record live and die together (the pull thread ends the record's life with
 * the job's), however long the job waits for a popper. A job whose record Redis did not answer
 * for is retried (its item's m set NULL), so that no job outlives its record. Returns how many
 * were retried, why in err. */
static size_t keep_records(struct forwarder *fw, char *err, size_t errlen)
{
    size_t cap = fw->nready ? fw->nready : 1, n = 0, failed = 0;
    const char **ids = malloc(cap * sizeof(*ids));
    size_t *at = malloc(cap * sizeof(*at));
    char *lost = malloc(cap);

    for (size_t i = 0; i < fw->nready; i++) {
        struct held *m = fw->ready[i].m;
        if (!m || !m->env.id)   /* a direct message has no record */
            continue;
        if (ids && at && lost) {
            ids[n] = fw->ready[i].id, at[n++] = i;
            continue;
        }
        snprintf(err, errlen, "out of memory");
        fw_target_report(fw, m, NULL, &(struct target_report){ .says = TARGET_RETRY });
        fw->ready[i].m = NULL, failed++;
    }
    if (n)
        (void)store_keep_many(fw->st, n, ids, -1, lost, err, errlen);
    for (size_t j = 0; j < n; j++) {
        struct held *m = fw->ready[at[j]].m;
        if (!lost[j]) {
            m->kept = 1;
            continue;
        }
        fw_target_report(fw, m, NULL, &(struct target_report){ .says = TARGET_RETRY });
        fw->ready[at[j]].m = NULL, failed++;
    }
    free(ids);
    free(at);
    free(lost);
    return failed;
}

/* Makes the due pull jobs of this flush ready, in one pipeline; a job's record is then marked
 * delivered (its message committed after), a direct message is done. */
void fw_run_ready(struct forwarder *fw)
{
    size_t n = 0, failed = 0;
    char kept_err[256] = "";
    const char *why = kept_err;

    for (size_t i = 0; i < fw->nready; i++)
        if (fw_dropped_if_not_ours(fw, fw->ready[i].m))
            fw->ready[i].m = NULL;
    failed = keep_records(fw, kept_err, sizeof(kept_err));
    for (size_t i = 0; i < fw->nready; i++) {
        struct ready_item *it = &fw->ready[i];
        if (!it->m)
            continue;
        fw->entries[n++] = (struct pullq_entry){ .topic = it->topic, .id = it->id,
                                                 .rec = it->rec.data, .rec_len = it->rec.size,
                                                 .due_ms = it->due_ms, .ttr_ms = it->ttr_ms,
                                                 .max_pops = it->max_pops };
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

/* The pull target: a due job, or a direct message made a job, made ready in its pull topic. */
static void take_pull(struct forwarder *fw, struct held *m, struct job *job)
{
    if (job)
        fw_ready_job(fw, m, job);
    else
        fw_ready_direct(fw, m);
}

const struct target fw_pull_target = { "pull", take_pull };
