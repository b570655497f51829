/* warm: the business topics' metadata fetched ahead of their first delivery. The contract is
 * in include/kafka/warm.h.
 * Every topic seen is a NUL-terminated copy in names[], in the order it was first seen, and an
 * entry of a glibc hash table (hsearch_r) whose data is its state. The thread warms names[done ..
 * n): it creates a topic handle for each (kept until warm_free) and asks the broker about them
 * in one metadata request. */
#include <pthread.h>
#include <search.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "core/levels.h"
#include "lib/log.h"
#include "kafka/warm.h"

#define LOG_MODULE "warm"
#define FETCH_TIMEOUT_MS 5000   /* one metadata request; librdkafka's own retries fit in it */
#define RETRY_MS 1000           /* after a request that failed as a whole (no broker answered) */
#define FAILED_RETRY_S 60       /* a topic the broker had no metadata for is asked about again */

/* An entry's data: its state in the low two bits, and for FAILED the second it failed above. */
enum state { QUEUED = 1, READY, FAILED };

static void *data_of(enum state s, int64_t at_s)
{
    return (void *)(intptr_t)(at_s << 2 | s);
}

static enum state state_of(const ENTRY *e)
{
    return (enum state)((intptr_t)e->data & 3);
}

struct warm {
    rd_kafka_t *rk;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop;
    struct hsearch_data table;
    char *names[WARM_TOPICS_MAX];
    rd_kafka_topic_t *rkt[WARM_TOPICS_MAX];
    size_t n;                   /* topics seen */
    size_t done;                /* names[0 .. done) have been asked about */
    int full_logged;
};

/* The table entry of topic, or NULL; with add, a new QUEUED entry when there is room. Under
 * the lock. */
static ENTRY *entry_of(struct warm *w, const char *topic, size_t len, int add)
{
    char key[TOPIC_NAME_MAX + 1];
    ENTRY want = { key, NULL }, *found = NULL;

    if (len > TOPIC_NAME_MAX)
        return NULL;
    memcpy(key, topic, len);
    key[len] = '\0';
    if (hsearch_r(want, FIND, &found, &w->table) || !add)
        return found;
    if (w->n == WARM_TOPICS_MAX) {
        if (!w->full_logged)
            log_warn("%d business topics known: the first deliveries to further topics wait for "
                     "librdkafka's own metadata fetch", WARM_TOPICS_MAX);
        w->full_logged = 1;
        return NULL;
    }
    if (!(want.key = strdup(key)))
        return NULL;
    want.data = data_of(QUEUED, 0);
    if (!hsearch_r(want, ENTER, &found, &w->table)) {
        free(want.key);
        return NULL;
    }
    w->names[w->n++] = want.key;
    return found;
}

void warm_topic(struct warm *w, const char *topic, size_t len)
{
    pthread_mutex_lock(&w->lock);
    if (!entry_of(w, topic, len, 0) && entry_of(w, topic, len, 1))
        pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

int warm_ready(struct warm *w, const char *topic, size_t len)
{
    ENTRY *e;
    int ready;

    pthread_mutex_lock(&w->lock);
    e = entry_of(w, topic, len, 0);
    ready = e && state_of(e) == READY;
    pthread_mutex_unlock(&w->lock);
    return ready;
}

/* What the broker said of topic in md: READY, FAILED (an error for it, such as no such topic:
 * librdkafka reports that at the produce), or 0 when md does not name it. */
static enum state state_in(const struct rd_kafka_metadata *md, const char *topic)
{
    for (int i = 0; i < md->topic_cnt; i++)
        if (strcmp(md->topics[i].topic, topic) == 0)
            return md->topics[i].err ? FAILED : READY;
    return 0;
}

/* Asks about names[from .. to): one topic alone, several in one request for every topic the
 * producer knows; with advance, they were the queue's and are done now. 0, or -1 when no answer
 * came (they stay as they were). Only this module's thread writes names[] and rkt[]. */
static int fetch(struct warm *w, size_t from, size_t to, int advance)
{
    const struct rd_kafka_metadata *md;
    enum state *st = malloc((to - from) * sizeof(*st));
    int64_t now_s = clock_mono_ms() / 1000;
    rd_kafka_resp_err_t e;

    if (!st)
        return -1;
    for (size_t i = from; i < to; i++)
        if (!w->rkt[i])
            w->rkt[i] = rd_kafka_topic_new(w->rk, w->names[i], NULL);
    e = rd_kafka_metadata(w->rk, 0, to - from == 1 ? w->rkt[from] : NULL, &md, FETCH_TIMEOUT_MS);
    if (e) {
        log_warn("metadata of %zu business topic(s) from %s on: %s (asked again in %d ms)",
                 to - from, w->names[from], rd_kafka_err2str(e), RETRY_MS);
        free(st);
        return -1;
    }
    for (size_t i = from; i < to; i++) {
        st[i - from] = state_in(md, w->names[i]);
        if (st[i - from] != READY)
            log_info("business topic %s: no metadata (%s); its first delivery waits for librdkafka",
                     w->names[i], st[i - from] ? "the broker reported an error" : "not in the answer");
    }
    rd_kafka_metadata_destroy(md);
    pthread_mutex_lock(&w->lock);
    for (size_t i = from; i < to; i++) {
        ENTRY *en = entry_of(w, w->names[i], strlen(w->names[i]), 0);
        en->data = data_of(st[i - from] ? st[i - from] : FAILED, now_s);
    }
    if (advance)
        w->done = to;
    pthread_mutex_unlock(&w->lock);
    free(st);
    return 0;
}

static void wait_ms(struct warm *w, int ms)
{
    struct timespec until;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&w->wake, &w->lock, &until);
}

/* Asks again about each topic the broker had no metadata for FAILED_RETRY_S ago or more: it
 * may have been created since. Called without the lock. */
static void retry_failed(struct warm *w)
{
    int64_t now_s = clock_mono_ms() / 1000;
    size_t done;

    pthread_mutex_lock(&w->lock);
    done = w->done;
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < done; i++) {
        ENTRY *e;
        int again, stop;
        pthread_mutex_lock(&w->lock);
        e = entry_of(w, w->names[i], strlen(w->names[i]), 0);
        again = state_of(e) == FAILED && now_s - ((intptr_t)e->data >> 2) >= FAILED_RETRY_S;
        stop = w->stop;
        pthread_mutex_unlock(&w->lock);
        if (stop)
            return;
        if (again)
            fetch(w, i, i + 1, 0);
    }
}

static void *run(void *arg)
{
    struct warm *w = arg;
    int64_t next_retry = clock_mono_ms() + FAILED_RETRY_S * 1000;

    pthread_mutex_lock(&w->lock);
    while (!w->stop) {
        size_t from = w->done, to = w->n;
        int rc;
        if (clock_mono_ms() >= next_retry) {
            pthread_mutex_unlock(&w->lock);
            retry_failed(w);
            pthread_mutex_lock(&w->lock);
            next_retry = clock_mono_ms() + FAILED_RETRY_S * 1000;
            continue;
        }
        if (from == to) {
            wait_ms(w, (int)(next_retry - clock_mono_ms()));
            continue;
        }
        pthread_mutex_unlock(&w->lock);
        rc = fetch(w, from, to, 1);
        pthread_mutex_lock(&w->lock);
        if (rc < 0 && !w->stop)
            wait_ms(w, RETRY_MS);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

struct warm *warm_new(rd_kafka_t *rk, char *err, size_t errlen)
{
    struct warm *w = calloc(1, sizeof(*w));

    if (!w || !hcreate_r(WARM_TOPICS_MAX * 5 / 4, &w->table)) {
        snprintf(err, errlen, "out of memory");
        free(w);
        return NULL;
    }
    w->rk = rk;
    pthread_mutex_init(&w->lock, NULL);
    cond_init_monotonic(&w->wake);
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        snprintf(err, errlen, "cannot start the topic metadata thread");
        hdestroy_r(&w->table);
        free(w);
        return NULL;
    }
    return w;
}

void warm_free(struct warm *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    for (size_t i = 0; i < w->n; i++) {
        if (w->rkt[i])
            rd_kafka_topic_destroy(w->rkt[i]);
        free(w->names[i]);
    }
    hdestroy_r(&w->table);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    free(w);
}
