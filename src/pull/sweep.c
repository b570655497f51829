/* sweep: the sweeps of the pull topics (reservations that ended ready again or bound for the
 * dead letters, dead letters sent and marked), each topic swept when something of it is due and
 * every topic now and then by one instance at a time, and the counts of the /metrics gauges.
 * Part of pull; the shared inside is include/pull/pull_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/envelope.h"
#include "core/metrics.h"
#include "kafka/letter.h"
#include "kafka/producer.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "pull/pull_link.h"
#include "redis/store.h"

#define LOG_MODULE "pull"
#define DEAD_RESEND_MS 30000       /* a dead letter Kafka did not acknowledge is sent again then */

static void letter_free(struct pull_letter *l)
{
    if (l->hdrs)
        rd_kafka_headers_destroy(l->hdrs);
    free(l->key);
    free(l);
}

/* The headers of l's letter without its body (taken from l, which has none left after). */
static rd_kafka_headers_t *bare_headers(struct pull_letter *l)
{
    rd_kafka_headers_t *bare = l->hdrs;

    l->hdrs = NULL;
    headers_add(bare, LETTER_BODY, LETTER_BODY_OMITTED_JOB, strlen(LETTER_BODY_OMITTED_JOB));
    return bare;
}

/* Produces l's letter: value (len bytes) with hdrs (taken). One librdkafka refuses for good at
 * once (over its message.max.bytes) goes again without its body, once, as pull_dr_cb does for one
 * the broker refuses. 0, or -1 with l freed and the failure logged (the sweep sends it again). */
static int produce_letter(struct pull *p, struct pull_letter *l, rd_kafka_headers_t *hdrs,
                          const char *value, size_t len)
{
    rd_kafka_resp_err_t e;

    e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(p->cfg->delay.dlq_topic),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(l->key, strlen(l->key)),
                          RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
                          RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(l), RD_KAFKA_V_END);
    if (!e)
        return 0;
    rd_kafka_headers_destroy(hdrs);
    if (l->hdrs && letter_refusal_of(e) == LETTER_REFUSED_NEVER) {
        log_warn("dead letter of topic=%s job=%s refused (%s): sent again without its body",
                 l->topic, l->id, rd_kafka_err2str(e));
        return produce_letter(p, l, bare_headers(l), NULL, 0);
    }
    log_warn("dead letter of topic=%s job=%s not sent (again in %d s): %s", l->topic, l->id,
             DEAD_RESEND_MS / 1000, rd_kafka_err2str(e));
    letter_free(l);
    return -1;
}

/* Sends a dead letter of a pull job to the dead-letter topic (kafka/letter.h builds it). */
static void send_dead(struct pull *p, const char *topic, const struct pullq_dead *d)
{
    char *own_topic;
    struct job_record rec;
    struct pull_letter *l;
    struct job job;
    char err[256];

    if (job_record_read(d->id, d->rec, d->rec_len, &job, &rec, err, sizeof(err)) < 0) {
        log_error("dead letter of topic=%s job=%s: record does not decode (%s); its bytes go as "
                  "they are", topic, d->id, err);
        job_release(&job);
        job = (struct job){ .body = d->rec, .body_len = d->rec_len };
        snprintf(job.id, sizeof(job.id), "%s", d->id);
    }
    own_topic = job.topic;   /* the record's, released with it */
    if (!job.topic || !job.topic[0])
        job.topic = (char *)(uintptr_t)topic;   /* the pull topic it was popped from */
    if (!(l = calloc(1, sizeof(*l))) || !(l->key = strdup(job.key ? job.key : d->id)) ||
        !(l->hdrs = letter_job_headers(&job, d->why, d->attempt, 0))) {
        if (l)
            free(l->key);
        free(l);
        goto out;
    }
    snprintf(l->topic, sizeof(l->topic), "%s", topic);
    snprintf(l->id, sizeof(l->id), "%s", d->id);
    snprintf(l->why, sizeof(l->why), "%s", d->why);
    l->due_ms = job.due_ms;
    if (produce_letter(p, l, rd_kafka_headers_copy(l->hdrs), job.body, job.body_len) == 0)
        log_warn("dead letter topic=%s job=%s: %s", topic, d->id, d->why);
out:
    job.topic = own_topic;
    if (job.body != d->rec)
        job_release(&job);
}

/* The report of a dead letter: acknowledged, to be marked; refused for good (too large), sent
 * again without its body, once; else sent again by the sweep. */
void pull_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct pull *p = opaque;
    struct pull_letter *l = m->_private;

    (void)rk;
    if (m->err && l->hdrs && letter_refusal_of(m->err) == LETTER_REFUSED_NEVER) {
        log_warn("dead letter of topic=%s job=%s refused (%s): sent again without its body",
                 l->topic, l->id, rd_kafka_err2str(m->err));
        produce_letter(p, l, bare_headers(l), NULL, 0);
        return;
    }
    if (m->err) {
        log_warn("dead letter of topic=%s job=%s not acknowledged (again in %d s): %s", l->topic,
                 l->id, DEAD_RESEND_MS / 1000, rd_kafka_err2str(m->err));
        letter_free(l);
        return;
    }
    metrics_inc(M_PULL_DEAD);
    l->next = p->sent;
    p->sent = l;
}

/* Marks the acknowledged dead letters: the job's record failed (so that a redrive finds it, as
 * any job's that its target gave up on), then the pull job dead-lettered. One that fails is sent
 * again later, and marked then. */
void pull_mark_sent(struct pull *p)
{
    char err[256];

    rd_kafka_poll(p->rk, 0);
    while (p->sent) {
        struct pull_letter *l = p->sent;
        p->sent = l->next;
        if (store_fail_delivered(p->st, l->id, l->due_ms, l->why,
                                 p->cfg->job.retention_s * 1000, err, sizeof(err)) < 0 ||
            pullq_dead_sent(p->q, l->topic, l->id, p->cfg->job.retention_s * 1000, err,
                            sizeof(err)) < 0)
            log_warn("dead letter of topic=%s job=%s sent; marking it failed (it may be sent "
                     "again): %s", l->topic, l->id, err);
        letter_free(l);
    }
}

/* Topic is to be swept by at_ms (monotonic) at the latest: a reservation of it ends then, or a
 * dead letter of it is due. */
void pull_sweep_by(struct pull *p, const char *topic, int64_t at_ms)
{
    struct due *more;

    for (size_t i = 0; i < p->ndue; i++)
        if (strcmp(p->due[i].topic, topic) == 0) {
            if (at_ms < p->due[i].at_ms)
                p->due[i].at_ms = at_ms;
            return;
        }
    if (p->ndue == p->due_cap) {
        size_t cap = p->due_cap ? 2 * p->due_cap : 64;
        if (!(more = realloc(p->due, cap * sizeof(*more))))
            return;   /* swept at the next turn of sweeping every topic */
        p->due = more;
        p->due_cap = cap;
    }
    snprintf(p->due[p->ndue].topic, sizeof(p->due[0].topic), "%s", topic);
    p->due[p->ndue++].at_ms = at_ms;
}

/* The monotonic time of epoch_ms, an instant by Redis's clock (taken to be ours). */
int64_t pull_mono_of(int64_t epoch_ms)
{
    int64_t wait = epoch_ms - clock_now_ms();

    return clock_mono_ms() + (wait > 0 ? wait : 0);
}

/* Sweeps n topics, BATCH_MAX to a pipeline: expired reservations ready again or dead, dead
 * letters sent, and each topic noted to be swept again when its next reservation ends or
 * dead letter is due. Topics found empty whose registration (scores; NULL: not known) is older
 * than PULLQ_FORGET_MS leave the registry. */
static void sweep_topics(struct pull *p, char **topics, const int64_t *scores, size_t n)
{
    struct pullq_sweep *sw = calloc(BATCH_MAX, sizeof(*sw));
    int64_t now = clock_now_ms();
    const char *empty[BATCH_MAX];
    size_t failed = 0;
    char err[256];

    for (size_t at = 0; sw && at < n; at += BATCH_MAX) {
        size_t k = n - at < BATCH_MAX ? n - at : BATCH_MAX, nempty = 0;
        for (size_t i = 0; i < k; i++)
            sw[i] = (struct pullq_sweep){ .topic = topics[at + i] };
        pullq_sweep_many(p->q, k, sw, now, p->cfg->pull.max_attempts, DEAD_RESEND_MS);
        for (size_t i = 0; i < k; i++) {
            if (sw[i].failed && !failed++)
                log_warn("sweep of topic=%s failed: %s", sw[i].topic, sw[i].err);
            metrics_add(M_PULL_EXPIRIES, (uint64_t)sw[i].back);
            for (size_t d = 0; d < sw[i].ndead; d++)
                send_dead(p, sw[i].topic, &sw[i].dead[d]);
            if (sw[i].failed)
                pull_sweep_by(p, sw[i].topic, clock_mono_ms() + PULL_SWEEP_MS);   /* again soon */
            else if (sw[i].next_ms >= 0)
                pull_sweep_by(p, sw[i].topic, pull_mono_of(sw[i].next_ms));
            else if (!sw[i].ready && !sw[i].reserved && !sw[i].buried && !sw[i].keep && scores &&
                     scores[at + i] < now - PULLQ_FORGET_MS)
                empty[nempty++] = sw[i].topic;
            pullq_sweep_release(&sw[i]);
        }
        if (nempty && pullq_forget(p->q, nempty, empty, now - PULLQ_FORGET_MS, err,
                                   sizeof(err)) < 0)
            log_warn("sweep: taking %zu empty topics out of the registry failed: %s", nempty,
                     err);
    }
    if (failed > 1)
        log_warn("sweep: %zu topics failed", failed);
    free(sw);
}

/* The topics whose sweep is due by now: swept, and noted again as their state says. */
static void sweep_due(struct pull *p)
{
    int64_t now = clock_mono_ms();
    char **topics = calloc(p->ndue ? p->ndue : 1, sizeof(*topics));
    size_t n = 0;

    for (size_t i = 0; topics && i < p->ndue;) {
        if (p->due[i].at_ms > now) {
            i++;
            continue;
        }
        if (!(topics[n] = strdup(p->due[i].topic)))
            break;
        n++;
        p->due[i] = p->due[--p->ndue];
    }
    sweep_topics(p, topics, NULL, n);
    for (size_t i = 0; i < n; i++)
        free(topics[i]);
    free(topics);
}

/* Every pull topic, page by page of the registry however many there are: swept, by the
 * instance whose turn it is (one at a time, every PULL_IDLE_SWEEP_MS). */
static void sweep_all(struct pull *p)
{
    uint64_t cursor = 0;
    char **topics, err[256];
    int64_t *scores;
    size_t n;

    do {
        if (pullq_topics(p->q, &cursor, &topics, &scores, &n, err, sizeof(err)) < 0) {
            log_warn("sweep: listing the pull topics failed: %s", err);
            return;
        }
        sweep_topics(p, topics, scores, n);
        for (size_t i = 0; i < n; i++)
            free(topics[i]);
        free(topics);
        free(scores);
    } while (cursor != 0);
}

/* The figures of every pull topic, for the /metrics gauges. */
static void count_all(struct pull *p)
{
    static const enum metric_family family[] = { MF_PULL_READY, MF_PULL_RESERVED,
                                                 MF_PULL_DELAYED, MF_PULL_OLDEST, MF_PULL_PAUSED };
    struct pullq_count *counts;
    const char *labels[METRICS_FAMILY_MAX];
    int64_t v[5][METRICS_FAMILY_MAX];
    char err[256];
    size_t n;
    int k;

    if (pullq_counts(p->q, &counts, &n, err, sizeof(err)) < 0) {
        log_warn("counting the pull topics failed: %s", err);
        return;
    }
    k = n < METRICS_FAMILY_MAX ? (int)n : METRICS_FAMILY_MAX;
    for (int i = 0; i < k; i++) {
        const struct pull_figures *f = &counts[i].f;
        labels[i] = counts[i].topic;
        v[0][i] = f->ready;
        v[1][i] = f->reserved;
        v[2][i] = f->delayed;
        v[3][i] = f->oldest_age_ms < 0 ? 0 : f->oldest_age_ms;
        v[4][i] = f->paused;
    }
    for (int m = 0; m < 5; m++)
        metrics_set_family(family[m], labels, v[m], k);
    free(counts);
}

/* The sweeps and counts due: the topics whose reservations ended, every topic every
 * PULL_IDLE_SWEEP_MS when this instance has the turn, and the counts every PULL_COUNT_MS while
 * /metrics asks for them. */
void pull_sweep(struct pull *p, int64_t now)
{
    int sweeping = 0, counting;

    if (now >= p->next_sweep_ms) {
        sweep_due(p);
        p->next_sweep_ms = now + PULL_SWEEP_MS;
    }
    if (now >= p->next_idle_ms) {
        sweeping = pullq_take_turn(p->q, PULL_IDLE_SWEEP_MS - PULL_SWEEP_MS);
        p->next_idle_ms = now + PULL_IDLE_SWEEP_MS;
    }
    pthread_mutex_lock(&p->mu);
    counting = now - p->counts_wanted_ms < PULL_COUNT_WANTED_MS && now >= p->next_count_ms;
    pthread_mutex_unlock(&p->mu);
    if (counting)
        p->next_count_ms = now + PULL_COUNT_MS;
    if (sweeping)
        sweep_all(p);
    if (counting)
        count_all(p);
}

