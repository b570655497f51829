/* stats: the pending view from Kafka offsets, cached for a few seconds; the counting itself is
 * pending.c's. The contract is in include/kafka/stats.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/offsets.h"
#include "kafka/producer.h"
#include "kafka/stats.h"

#define LOG_MODULE "stats"
/* A view is reused this long: dashboards polling /stats and Prometheus scraping /metrics share
 * one look at Kafka (about eight requests), and the counts of a delay queue move over seconds. */
#define STATS_CACHE_MS 2000
/* The offsets must all come within this long, else the look fails (503). The first look also
 * finds the group coordinator, about a second (librdkafka 2.0.2, measured). */
#define STATS_TIMEOUT_MS 5000
/* The search for how late the overdue heads are runs on an HTTP thread: it stops after this
 * long and reports what it has found, a lower bound. */
#define OVERDUE_BUDGET_MS 2000
/* While /metrics is scraped (this long after the last scrape), the stats thread looks again
 * every STATS_CACHE_MS by itself: a scrape never waits, and shows gauges this fresh. */
#define GAUGES_KEEP_MS 60000

/* A /stats request waiting for the look under way or the next one. */
struct waiter {
    stats_done_fn *fn;
    void *opaque;
    struct waiter *next;
};

/* Looks at Kafka happen on the stats thread alone, when a caller wants one, or on a timer
 * while /metrics is scraped; the callers waiting are answered when the look ends. */
struct stats {
    const struct config *cfg;
    rd_kafka_t *rk;
    struct pending_part *parts;       /* the stats thread's: every partition, level by level */
    size_t nparts;
    pthread_t thread;
    pthread_mutex_t mu;               /* guards the fields below */
    pthread_cond_t wake;              /* a look is wanted, or the stop */
    int want, stop;
    int looking;                      /* a look is under way: its end answers the waiters */
    struct waiter *waiters;           /* answered when the look under way (or the next) ends */
    int64_t gauges_until_ms;          /* monotonic: keep the gauges fresh until then */
    int64_t looked_ms;                /* monotonic: when the last look ended, 0 never */
    int rc;                           /* its outcome, with err when it failed */
    char err[256];
    struct pending_view view;         /* its view, when it succeeded */
};

static void *stats_main(void *arg);

struct stats *stats_new(const struct config *cfg, char *err, size_t errlen)
{
    const char *const defaults[][2] = {
        { "client.id", "delayq-stats" },
        { "group.id", cfg->kafka.group_id },
        { "enable.auto.commit", "false" },
        { "enable.auto.offset.store", "false" },
        { "enable.partition.eof", "false" },
    };
    struct stats *s = calloc(1, sizeof(*s));
    rd_kafka_conf_t *conf;
    char why[512];

    if (!s || !(s->parts = calloc((size_t)(cfg->delay.levels.n * cfg->delay.partitions),
                                  sizeof(*s->parts)))) {
        snprintf(err, errlen, "stats: out of memory");
        goto fail;
    }
    s->cfg = cfg;
    s->nparts = (size_t)(cfg->delay.levels.n * cfg->delay.partitions);
    if (!(conf = kafka_conf_build(cfg, defaults, sizeof(defaults) / sizeof(defaults[0]), err,
                                  errlen)))
        goto fail;
    if (!(s->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))) {
        snprintf(err, errlen, "stats: kafka consumer: %s", why);
        rd_kafka_conf_destroy(conf);
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    cond_init_monotonic(&s->wake);
    if (pthread_create(&s->thread, NULL, stats_main, s) != 0) {
        snprintf(err, errlen, "stats: cannot start its thread");
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->mu);
        rd_kafka_destroy(s->rk);
        goto fail;
    }
    return s;
fail:
    if (s)
        free(s->parts);
    free(s);
    return NULL;
}

void stats_free(struct stats *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);   /* a look in progress ends within its limits; the thread
                                      * answers every waiter before it returns */
    rd_kafka_destroy_flags(s->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);   /* it joined nothing */
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    free(s->parts);
    free(s);
}

static const char *topic_of(const struct stats *s, size_t i)
{
    return s->cfg->delay.levels.topic[i / (size_t)s->cfg->delay.partitions];
}

static int32_t partition_of(const struct stats *s, size_t i)
{
    return (int32_t)(i % (size_t)s->cfg->delay.partitions);
}

/* Every partition with the same offset field. */
static rd_kafka_topic_partition_list_t *all_parts(const struct stats *s, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)s->nparts);

    for (size_t i = 0; i < s->nparts; i++)
        rd_kafka_topic_partition_list_add(l, topic_of(s, i), partition_of(s, i))->offset = offset;
    return l;
}

/* The answer for element i, which librdkafka leaves in place (it updates the list it is given). */
static const rd_kafka_topic_partition_t *elem(const rd_kafka_topic_partition_list_t *l, int i)
{
    return &l->elems[i];
}

/* offsets_for_times with each element's offset field a timestamp, or -2 (the log's first
 * offset) or -1 (its end): one ListOffsets request per broker. */
static int ask_times(struct stats *s, rd_kafka_topic_partition_list_t *l, int64_t deadline_ms,
                     const char *what, char *err, size_t errlen)
{
    char full[128];

    snprintf(full, sizeof(full), "stats: kafka: %s", what);
    return kafka_offsets_answered(kafka_ask_offsets(s->rk, KAFKA_ASK_TIMES, l, deadline_ms), l,
                                  full, err, errlen);
}

/* The committed, low and end offsets of every partition: three requests. */
static int ask_ends(struct stats *s, int64_t deadline_ms, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *c = all_parts(s, RD_KAFKA_OFFSET_INVALID),
                                    *lo = all_parts(s, RD_KAFKA_OFFSET_BEGINNING),
                                    *end = all_parts(s, RD_KAFKA_OFFSET_END);
    int rc = -1;

    if (kafka_offsets_answered(kafka_ask_offsets(s->rk, KAFKA_ASK_COMMITTED, c, deadline_ms), c,
                               "stats: kafka: committed offsets", err, errlen) == 0 &&
        ask_times(s, lo, deadline_ms, "low offsets", err, errlen) == 0 &&
        ask_times(s, end, deadline_ms, "end offsets", err, errlen) == 0) {
        for (size_t i = 0; i < s->nparts; i++) {
            s->parts[i].level = (int)(i / (size_t)s->cfg->delay.partitions);
            s->parts[i].committed = elem(c, (int)i)->offset;
            s->parts[i].low = elem(lo, (int)i)->offset;
            s->parts[i].end = elem(end, (int)i)->offset;
        }
        rc = 0;
    }
    rd_kafka_topic_partition_list_destroy(c);
    rd_kafka_topic_partition_list_destroy(lo);
    rd_kafka_topic_partition_list_destroy(end);
    return rc;
}

/* offsets_for_times at boundary b of every partition, each at its level's timestamp. */
static int ask_bound(struct stats *s, int64_t now_ms, enum pending_bound b, int64_t deadline_ms,
                     char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *l = all_parts(s, 0);
    const struct levels *lv = &s->cfg->delay.levels;
    char what[64];
    int rc;

    for (size_t i = 0; i < s->nparts; i++)
        l->elems[i].offset = pending_bound_ts(now_ms, pending_bound_ms[b],
                                              lv->ms[i / (size_t)s->cfg->delay.partitions]);
    snprintf(what, sizeof(what), "offsets at now+%s", b == BOUND_NOW ? "0" : pending_due_names[b - 1]);
    if ((rc = ask_times(s, l, deadline_ms, what, err, errlen)) == 0)
        for (size_t i = 0; i < s->nparts; i++)
            s->parts[i].at[b] = elem(l, (int)i)->offset;
    rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

/* Fills s->parts: committed, log and boundary offsets, eight requests in all. */
static int ask_offsets(struct stats *s, int64_t now_ms, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + STATS_TIMEOUT_MS;

    if (ask_ends(s, deadline, err, errlen) < 0)
        return -1;
    for (int b = 0; b < PENDING_BOUNDS; b++)
        if (ask_bound(s, now_ms, (enum pending_bound)b, deadline, err, errlen) < 0)
            return -1;
    return 0;
}

/* One round of the searches not yet done: one offsets_for_times for all of them. Returns 0, or
 * -1 when Kafka did not answer in time (the searches keep what they have). */
static int search_round(struct stats *s, struct pending_search *sr, const size_t *idx, size_t n,
                        int64_t deadline_ms)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
    size_t *which = calloc(n ? n : 1, sizeof(*which));
    char err[256];
    int rc = -1;

    if (!which)
        goto out;
    for (size_t k = 0; k < n; k++)
        if (!pending_search_done(&sr[k])) {
            which[l->cnt] = k;
            rd_kafka_topic_partition_list_add(l, topic_of(s, idx[k]), partition_of(s, idx[k]))
                ->offset = pending_search_probe(&sr[k]);
        }
    if (ask_times(s, l, deadline_ms, "offsets of the overdue heads", err, sizeof(err)) < 0) {
        log_warn("%s; overdue_ms is a lower bound", err);
        goto out;
    }
    for (int j = 0; j < l->cnt; j++)
        pending_search_answer(&sr[which[j]], elem(l, j)->offset);
    rc = 0;
out:
    free(which);
    rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

static int searches_done(const struct pending_search *sr, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!pending_search_done(&sr[k]))
            return 0;
    return 1;
}

/* How late the most overdue head is: the timestamp of the first unfinished message of every
 * partition with overdue messages, by bisection (pending.h), all partitions in each round;
 * within OVERDUE_BUDGET_MS, else the lower bound found by then. */
static int64_t overdue_ms(struct stats *s, int64_t now_ms)
{
    int64_t deadline = clock_mono_ms() + OVERDUE_BUDGET_MS, worst = 0;
    struct pending_search *sr = calloc(s->nparts, sizeof(*sr));
    size_t *idx = calloc(s->nparts, sizeof(*idx)), n = 0;

    for (size_t i = 0; sr && idx && i < s->nparts; i++)
        if (pending_within(&s->parts[i], BOUND_NOW) > 0) {
            /* overdue: the head's hop time has passed, so its timestamp is at most now - L */
            pending_search_init(&sr[n], pending_start(&s->parts[i]),
                                now_ms - s->cfg->delay.levels.ms[s->parts[i].level]);
            idx[n++] = i;
        }
    while (n && !searches_done(sr, n) && clock_mono_ms() < deadline &&
           search_round(s, sr, idx, n, deadline) == 0)
        ;
    for (size_t k = 0; k < n; k++) {
        int64_t late = pending_search_late_ms(&sr[k], now_ms,
                                              s->cfg->delay.levels.ms[s->parts[idx[k]].level]);
        if (late > worst)
            worst = late;
    }
    free(sr);
    free(idx);
    return worst;
}

/* The view as gauges of /metrics. */
static void publish(const struct stats *s)
{
    const struct levels *lv = &s->cfg->delay.levels;
    const char *names[LEVELS_MAX];

    for (int i = 0; i < lv->n; i++)
        names[i] = lv->name[i];
    metrics_set_family(MF_PENDING, names, s->view.by_level, lv->n);
    metrics_set_family(MF_PENDING_BY_DUE, pending_due_names, s->view.by_due, PENDING_DUES);
    metrics_set(M_OVERDUE_MS, s->view.overdue_ms);
}

/* A look at Kafka: the view, or -1 with err. */
static int look(struct stats *s, struct pending_view *v, char *err, size_t errlen)
{
    int64_t now = clock_now_ms();

    rd_kafka_poll(s->rk, 0);   /* the handle's error events, which nothing else serves */
    if (ask_offsets(s, now, err, errlen) < 0) {
        log_warn("%s", err);
        return -1;
    }
    pending_count(s->parts, s->nparts, v);
    v->overdue_ms = overdue_ms(s, now);
    return 0;
}

/* Answers the waiters of list with the outcome of a look: v, or NULL and err. */
static void answer(struct waiter *list, const struct pending_view *v, const char *err)
{
    while (list) {
        struct waiter *next = list->next;
        list->fn(list->opaque, v, err);
        free(list);
        list = next;
    }
}

/* With s->mu held: waits on s->wake until the monotonic time until_ms at most. */
static void wait_until(struct stats *s, int64_t until_ms)
{
    (void)cond_wait_until(&s->wake, &s->mu, until_ms);
}

static void *stats_main(void *arg)
{
    struct stats *s = arg;
    struct pending_view v;
    struct waiter *done;
    char err[256];
    int rc;

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        int64_t now = clock_mono_ms();
        if (!s->want && s->gauges_until_ms > now) {
            if (now - s->looked_ms >= STATS_CACHE_MS)
                s->want = 1;
            else
                wait_until(s, s->looked_ms + STATS_CACHE_MS);
        } else if (!s->want) {
            pthread_cond_wait(&s->wake, &s->mu);
        }
        if (!s->want || s->stop)
            continue;
        s->want = 0;
        s->looking = 1;
        pthread_mutex_unlock(&s->mu);
        rc = look(s, &v, err, sizeof(err));
        pthread_mutex_lock(&s->mu);
        s->looking = 0;
        if ((s->rc = rc) == 0) {
            s->view = v;
            publish(s);
        } else {
            snprintf(s->err, sizeof(s->err), "%s", err);
        }
        s->looked_ms = clock_mono_ms();
        done = s->waiters;
        s->waiters = NULL;
        pthread_mutex_unlock(&s->mu);
        answer(done, rc == 0 ? &v : NULL, err);
        pthread_mutex_lock(&s->mu);
    }
    done = s->waiters;
    s->waiters = NULL;
    pthread_mutex_unlock(&s->mu);
    answer(done, NULL, "stats: shutting down");
    return NULL;
}

void stats_get(struct stats *s, stats_done_fn *fn, void *opaque)
{
    struct waiter *w = malloc(sizeof(*w));
    struct pending_view v;
    char err[sizeof(s->err)];
    int rc = -1;

    pthread_mutex_lock(&s->mu);
    if (s->looked_ms && clock_mono_ms() - s->looked_ms < STATS_CACHE_MS) {
        /* the last look is recent enough: its outcome, at once */
        if ((rc = s->rc) == 0)
            v = s->view;
        else
            snprintf(err, sizeof(err), "%s", s->err);
    } else if (!w) {
        snprintf(err, sizeof(err), "stats: out of memory");
    } else if (s->stop) {
        snprintf(err, sizeof(err), "stats: shutting down");
    } else {
        *w = (struct waiter){ .fn = fn, .opaque = opaque, .next = s->waiters };
        s->waiters = w;
        if (!s->looking) {   /* else the look under way answers it */
            s->want = 1;
            pthread_cond_signal(&s->wake);
        }
        w = NULL;
        rc = 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != 1) {
        free(w);
        fn(opaque, rc == 0 ? &v : NULL, err);
    }
}

void stats_gauges(struct stats *s)
{
    pthread_mutex_lock(&s->mu);
    s->gauges_until_ms = clock_mono_ms() + GAUGES_KEEP_MS;
    if (!s->looking && (!s->looked_ms || clock_mono_ms() - s->looked_ms >= STATS_CACHE_MS))
        s->want = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}
