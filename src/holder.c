#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "clock.h"
#include "forwarder.h"
#include "heap.h"
#include "holder.h"
#include "log.h"
#include "offsets.h"
#include "producer.h"

#define LOG_MODULE "holder"
#define POLL_BATCH 2000          /* messages taken in one turn before timers are looked at again */
#define COMMIT_INTERVAL_MS 100   /* commits trail progress by at most this */
#define IDLE_WAIT_MS 200         /* longest sleep: bounds how late a stop request is noticed */
#define SHUTDOWN_WAIT_MS 10000   /* forwards in flight get this long to finish at shutdown */
#define NOMEM_RETRY_MS 1000
#define COMMITTED_TIMEOUT_MS 15000  /* start-up: the group coordinator may be loading */

enum hold { HOLD_NONE, HOLD_HEAD, HOLD_FULL };

struct part {
    int level;
    int32_t partition;
    struct offsets offs;
    enum hold hold;          /* why it is paused */
    int64_t resume_at;       /* HOLD_HEAD: epoch ms of the resume timer */
    size_t in_memory;        /* taken and not finished */
    int64_t committed;       /* last offset sent in a commit, -1 none */
};

struct holder {
    const struct config *cfg;
    rd_kafka_t *rk;
    struct forwarder *fw;
    rd_kafka_queue_t *cq, *pq;
    rd_kafka_topic_t *rkt[LEVELS_MAX];
    int first[LEVELS_MAX];   /* parts index of each level's partition 0 */
    int count[LEVELS_MAX];   /* partitions of each level */
    struct part *parts;
    size_t nparts;
    struct heap due;         /* struct held by act_ms */
    struct heap timers;      /* struct part by resume_at */
    int wake[2];             /* librdkafka queues write here when they become non-empty */
    size_t per_part_cap;     /* in-memory messages per partition before it is paused */
    int64_t last_commit_ms;  /* monotonic */
};

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    struct holder *h = opaque;

    (void)rk;
    (void)offsets;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        log_warn("offset commit failed (retried): %s", rd_kafka_err2str(err));
        for (size_t i = 0; i < h->nparts; i++)
            h->parts[i].committed = -1;
    }
}

static rd_kafka_t *consumer_new(struct holder *h, char *err, size_t errlen)
{
    const struct config *cfg = h->cfg;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char why[512];
    rd_kafka_t *rk;

    /* fetch.wait.max.ms 10: a resumed partition's head arrives within milliseconds. */
    if (kafka_conf_set(conf, "client.id", "delayq-holder", err, errlen) < 0 ||
        kafka_conf_set(conf, "group.id", cfg->kafka.group_id, err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.commit", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.auto.offset.store", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "auto.offset.reset", "earliest", err, errlen) < 0 ||
        kafka_conf_set(conf, "enable.partition.eof", "false", err, errlen) < 0 ||
        kafka_conf_set(conf, "fetch.wait.max.ms", "10", err, errlen) < 0 ||
        kafka_conf_set(conf, "fetch.error.backoff.ms", "100", err, errlen) < 0 ||
        kafka_conf_set(conf, "queued.max.messages.kbytes", "16384", err, errlen) < 0 ||
        kafka_conf_set(conf, "socket.nagle.disable", "true", err, errlen) < 0 ||
        kafka_conf_apply(conf, cfg, err, errlen) < 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    rd_kafka_conf_set_offset_commit_cb(conf, on_commit);
    rd_kafka_conf_set_opaque(conf, h);
    if (!(rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))) {
        snprintf(err, errlen, "kafka consumer: %s", why);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

static rd_kafka_topic_partition_list_t *part_list(struct holder *h, struct part *p)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);

    rd_kafka_topic_partition_list_add(l, h->cfg->delay.levels.topic[p->level], p->partition);
    return l;
}

static void pause_part(struct holder *h, struct part *p, enum hold why, int64_t head_offset)
{
    rd_kafka_topic_partition_list_t *l = part_list(h, p);

    p->hold = why;
    offsets_hold_at(&p->offs, head_offset);
    rd_kafka_pause_partitions(h->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
}

/* Resume alone restarts after the last message handed out and may leave the fetcher asleep;
 * the seek to the held offset wakes it (see DESIGN.md, librdkafka 2.0.2 facts). */
static void resume_part(struct holder *h, struct part *p)
{
    rd_kafka_topic_partition_list_t *l = part_list(h, p);
    rd_kafka_resp_err_t e;

    p->hold = HOLD_NONE;
    rd_kafka_resume_partitions(h->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (p->offs.next >= 0 && (e = rd_kafka_seek(h->rkt[p->level], p->partition, p->offs.next, 0)))
        log_warn("seek topic=%s partition=%d offset=%lld: %s", h->cfg->delay.levels.topic[p->level],
                 p->partition, (long long)p->offs.next, rd_kafka_err2str(e));
}

static void hold_head(struct holder *h, struct part *p, int64_t offset, int64_t at_ms)
{
    pause_part(h, p, HOLD_HEAD, offset);
    p->resume_at = at_ms;
    if (heap_push(&h->timers, at_ms, p) < 0) {
        log_error("out of memory for a resume timer; resuming topic=%s partition=%d now",
                  h->cfg->delay.levels.topic[p->level], p->partition);
        resume_part(h, p);
    }
    log_debug("hold topic=%s partition=%d offset=%lld until=%lld", h->cfg->delay.levels.topic[p->level],
              p->partition, (long long)offset, (long long)at_ms);
}

static struct part *find_part(struct holder *h, const rd_kafka_message_t *rkm)
{
    const char *name = rd_kafka_topic_name(rkm->rkt);
    int l = levels_find_topic(&h->cfg->delay.levels, name);

    if (l < 0 || rkm->partition < 0 || rkm->partition >= h->count[l])
        return NULL;
    return &h->parts[h->first[l] + rkm->partition];
}

/* Copies a consumed message, headers and all, into one allocation. */
static struct held *held_new(struct part *p, const rd_kafka_message_t *rkm)
{
    rd_kafka_headers_t *rh = NULL;
    size_t nh = 0, size;
    struct held *m;
    char *cur;

    if (rd_kafka_message_headers(rkm, &rh) == RD_KAFKA_RESP_ERR_NO_ERROR)
        nh = rd_kafka_header_cnt(rh);
    size = sizeof(*m) + nh * sizeof(struct hdr) + rkm->key_len + rkm->len;
    for (size_t i = 0; i < nh; i++) {
        const char *name;
        const void *val;
        size_t vlen;
        rd_kafka_header_get_all(rh, i, &name, &val, &vlen);
        size += strlen(name) + 1 + vlen;
    }
    if (!(m = calloc(1, size)))
        return NULL;
    m->part = p;
    m->level = p->level;
    m->partition = p->partition;
    m->offset = rkm->offset;
    m->hdrs = (struct hdr *)(m + 1);
    m->nhdrs = nh;
    cur = (char *)(m->hdrs + nh);
    for (size_t i = 0; i < nh; i++) {
        const char *name;
        const void *val;
        size_t vlen;
        rd_kafka_header_get_all(rh, i, &name, &val, &vlen);
        m->hdrs[i].name = memcpy(cur, name, strlen(name) + 1);
        cur += strlen(name) + 1;
        m->hdrs[i].value = val ? memcpy(cur, val, vlen) : NULL;
        m->hdrs[i].len = vlen;
        cur += vlen;
    }
    if (rkm->key) {
        m->key = memcpy(cur, rkm->key, rkm->key_len);
        m->key_len = rkm->key_len;
        cur += rkm->key_len;
    }
    if (rkm->payload) {
        m->value = memcpy(cur, rkm->payload, rkm->len);
        m->value_len = rkm->len;
    }
    return m;
}

static void set_times(struct holder *h, struct held *m, const rd_kafka_message_t *rkm, int64_t now)
{
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(rkm, &tstype);

    m->timestamp_ms = tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? now : ts;
    m->env_ok = envelope_parse(m->hdrs, m->nhdrs, &m->env, m->env_err, sizeof(m->env_err)) == 0;
    if (m->env_ok)
        envelope_times(&m->env, m->timestamp_ms, h->cfg->delay.levels.ms[m->level], &m->act_ms,
                       &m->due_ms);
    else
        m->act_ms = m->due_ms = now;   /* to the dead-letter topic at once */
}

static void take(struct holder *h, rd_kafka_message_t *rkm)
{
    int64_t now = clock_now_ms(), ahead;
    struct part *p;
    struct held *m;

    if (rkm->err) {
        log_warn("consumer: %s", rd_kafka_message_errstr(rkm));
        return;
    }
    p = find_part(h, rkm);
    /* A paused partition's stale messages, and those before the offset sought, are read again. */
    if (!p || p->hold != HOLD_NONE || (p->offs.next >= 0 && rkm->offset < p->offs.next))
        return;
    if (!(m = held_new(p, rkm))) {
        log_error("out of memory holding topic=%s partition=%d offset=%lld; retrying",
                  rd_kafka_topic_name(rkm->rkt), rkm->partition, (long long)rkm->offset);
        hold_head(h, p, rkm->offset, now + NOMEM_RETRY_MS);
        return;
    }
    set_times(h, m, rkm, now);
    /* Only the smallest level is read ahead: its messages may be due before their hop time. */
    ahead = p->level == 0 ? h->cfg->delay.levels.ms[0] : 0;
    if (m->act_ms > now + ahead) {
        hold_head(h, p, rkm->offset, m->act_ms - ahead);
        free(m);
        return;
    }
    if (p->in_memory >= h->per_part_cap || offsets_take(&p->offs, rkm->offset) < 0) {
        pause_part(h, p, HOLD_FULL, rkm->offset);
        free(m);
        return;
    }
    p->in_memory++;
    if (m->act_ms <= now)
        forwarder_submit(h->fw, m);
    else if (heap_push(&h->due, m->act_ms, m) < 0)
        forwarder_submit(h->fw, m);   /* the forwarder holds it back if it is not due */
}

void holder_done(struct holder *h, struct held *m)
{
    struct part *p = m->part;

    offsets_finish(&p->offs, m->offset);
    p->in_memory--;
    free(m);
    if (p->hold == HOLD_FULL && p->in_memory <= h->per_part_cap / 2)
        resume_part(h, p);
}

void holder_retry(struct holder *h, struct held *m, int64_t at_ms)
{
    m->act_ms = at_ms;
    if (heap_push(&h->due, at_ms, m) < 0)
        forwarder_submit(h->fw, m);
}

static void fire_timers(struct holder *h, int64_t now)
{
    int64_t at;
    struct part *p;

    while ((p = heap_peek(&h->timers, &at)) && at <= now) {
        heap_pop(&h->timers, NULL);
        if (p->hold == HOLD_HEAD && p->resume_at == at)
            resume_part(h, p);
    }
}

static void release_due(struct holder *h, int64_t now)
{
    int64_t at;
    struct held *m;

    while ((m = heap_peek(&h->due, &at)) && at <= now)
        forwarder_submit(h->fw, heap_pop(&h->due, NULL));
}

static int wait_ms(struct holder *h, int64_t now)
{
    int64_t wait = IDLE_WAIT_MS, at;

    if (heap_peek(&h->timers, &at) && at - now < wait)
        wait = at - now;
    if (heap_peek(&h->due, &at) && at - now < wait)
        wait = at - now;
    return wait < 0 ? 0 : (int)wait;
}

/* Takes up to POLL_BATCH messages. Returns 1 when more may be waiting. */
static int take_batch(struct holder *h)
{
    for (int i = 0; i < POLL_BATCH; i++) {
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(h->rk, 0);
        if (!rkm)
            return 0;
        take(h, rkm);
        rd_kafka_message_destroy(rkm);
    }
    return 1;
}

static void commit(struct holder *h, int sync)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)h->nparts);
    rd_kafka_resp_err_t e;

    for (size_t i = 0; i < h->nparts; i++) {
        struct part *p = &h->parts[i];
        int64_t cp = offsets_commit_point(&p->offs);
        if (cp >= 0 && cp != p->committed) {
            rd_kafka_topic_partition_list_add(l, h->cfg->delay.levels.topic[p->level], p->partition)
                ->offset = cp;
            p->committed = cp;
        }
    }
    if (l->cnt > 0 && (e = rd_kafka_commit(h->rk, l, !sync)) && sync)
        log_warn("final offset commit failed: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

static void wait_wake(struct holder *h, int timeout_ms)
{
    struct pollfd pfd = { .fd = h->wake[0], .events = POLLIN };
    char buf[256];

    if (timeout_ms > 0)
        poll(&pfd, 1, timeout_ms);
    while (read(h->wake[0], buf, sizeof(buf)) > 0)
        ;
}

static void finish(struct holder *h)
{
    int64_t deadline = clock_mono_ms() + SHUTDOWN_WAIT_MS;

    /* Messages not yet submitted stay unfinished: the commit stops before them. */
    while (forwarder_in_flight(h->fw) > 0 && clock_mono_ms() < deadline) {
        wait_wake(h, 50);
        forwarder_poll(h->fw);
    }
    if (forwarder_in_flight(h->fw) > 0)
        log_warn("%zu forwards unfinished at shutdown; they are read again on restart",
                 forwarder_in_flight(h->fw));
    commit(h, 1);
}

void holder_run(struct holder *h, volatile sig_atomic_t *stop)
{
    int more = 0;

    while (!*stop) {
        int64_t now = clock_now_ms();

        fire_timers(h, now);
        release_due(h, now);
        forwarder_flush(h->fw);
        wait_wake(h, more ? 0 : wait_ms(h, now));
        more = take_batch(h);
        forwarder_poll(h->fw);
        forwarder_flush(h->fw);
        if (clock_mono_ms() - h->last_commit_ms >= COMMIT_INTERVAL_MS) {
            commit(h, 0);
            h->last_commit_ms = clock_mono_ms();
        }
    }
    finish(h);
}

/* Looks the committed offsets up before assigning (a partition never committed starts at its
 * beginning), so the wait for the group coordinator happens at start-up, before the HTTP
 * server opens, and not while the first due jobs wait. On failure the consumer looks them up
 * itself after the assign. */
static void start_offsets(struct holder *h, rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_resp_err_t e = rd_kafka_committed(h->rk, l, COMMITTED_TIMEOUT_MS);

    for (int i = 0; i < l->cnt; i++) {
        if (e)
            l->elems[i].offset = RD_KAFKA_OFFSET_STORED;
        else if (l->elems[i].offset < 0)
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    if (e)
        log_warn("reading committed offsets: %s; the consumer reads them after the assign",
                 rd_kafka_err2str(e));
}

static int assign_all(struct holder *h, const int partitions[LEVELS_MAX], char *err, size_t errlen)
{
    const struct levels *lv = &h->cfg->delay.levels;
    rd_kafka_topic_partition_list_t *l;
    rd_kafka_resp_err_t e;
    size_t n = 0;

    for (int i = 0; i < lv->n; i++)
        n += (size_t)partitions[i];
    if (!(h->parts = calloc(n, sizeof(*h->parts))))
        return -1;
    l = rd_kafka_topic_partition_list_new((int)n);
    for (int i = 0; i < lv->n; i++) {
        h->first[i] = (int)h->nparts;
        h->count[i] = partitions[i];
        h->rkt[i] = rd_kafka_topic_new(h->rk, lv->topic[i], NULL);
        for (int p = 0; p < partitions[i]; p++) {
            struct part *pt = &h->parts[h->nparts++];
            pt->level = i;
            pt->partition = p;
            pt->committed = -1;
            offsets_init(&pt->offs);
            rd_kafka_topic_partition_list_add(l, lv->topic[i], p)->offset = RD_KAFKA_OFFSET_STORED;
        }
    }
    start_offsets(h, l);
    e = rd_kafka_assign(h->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        snprintf(err, errlen, "assign: %s", rd_kafka_err2str(e));
        return -1;
    }
    log_info("assigned %zu partitions of %d delay topics", n, lv->n);
    return 0;
}

static int wake_init(struct holder *h, char *err, size_t errlen)
{
    if (pipe2(h->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %m");
        return -1;
    }
    h->cq = rd_kafka_queue_get_consumer(h->rk);
    h->pq = rd_kafka_queue_get_main(forwarder_producer(h->fw));
    rd_kafka_queue_io_event_enable(h->cq, h->wake[1], "c", 1);
    rd_kafka_queue_io_event_enable(h->pq, h->wake[1], "p", 1);
    return 0;
}

struct holder *holder_new(const struct config *cfg, const int partitions[LEVELS_MAX], char *err,
                          size_t errlen)
{
    struct holder *h = calloc(1, sizeof(*h));

    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->cfg = cfg;
    h->wake[0] = h->wake[1] = -1;
    heap_init(&h->due);
    heap_init(&h->timers);
    if (!(h->rk = consumer_new(h, err, errlen)) || !(h->fw = forwarder_new(cfg, h, err, errlen)) ||
        assign_all(h, partitions, err, errlen) < 0 || wake_init(h, err, errlen) < 0) {
        holder_free(h);
        return NULL;
    }
    h->per_part_cap = (size_t)cfg->delay.max_held / (h->nparts ? h->nparts : 1);
    if (h->per_part_cap < 16)
        h->per_part_cap = 16;
    return h;
}

void holder_free(struct holder *h)
{
    struct held *m;

    if (!h)
        return;
    forwarder_free(h->fw);   /* flushes: its last reports still finish messages here */
    while ((m = heap_pop(&h->due, NULL)))
        free(m);
    heap_release(&h->due);
    heap_release(&h->timers);
    if (h->cq)
        rd_kafka_queue_destroy(h->cq);
    if (h->pq)
        rd_kafka_queue_destroy(h->pq);
    for (int i = 0; i < LEVELS_MAX; i++)
        if (h->rkt[i])
            rd_kafka_topic_destroy(h->rkt[i]);
    if (h->rk) {
        rd_kafka_consumer_close(h->rk);
        rd_kafka_destroy(h->rk);
    }
    for (size_t i = 0; i < h->nparts; i++)
        offsets_release(&h->parts[i].offs);
    free(h->parts);
    if (h->wake[0] >= 0) {
        close(h->wake[0]);
        close(h->wake[1]);
    }
    free(h);
}
