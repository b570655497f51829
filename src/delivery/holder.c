/* holder: the consumer assigned to every delay-topic partition of the groups this instance
 * owns, and its thread's loop: takes messages, holds back a partition whose head is not due,
 * reads the smallest level ahead into the due heap, runs the forwarder and applies what it and
 * the groups hand back. The partitions' pauses, resume timers and commits are in parts.c. The
 * contract is in include/delivery/holder.h. */
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "lib/clock.h"
#include "core/decide.h"
#include "delivery/forwarder.h"
#include "delivery/groups.h"
#include "lib/heap.h"
#include "delivery/holder.h"
#include "delivery/parts.h"
#include "lib/log.h"
#include "kafka/producer.h"
#include "kafka/warm.h"
#include "redis/store.h"

#define LOG_MODULE "holder"
#define POLL_BATCH 2000          /* messages taken in one turn before timers are looked at again */
#define COMMIT_INTERVAL_MS 100   /* commits trail progress by at most this */
#define IDLE_WAIT_MS 200         /* longest sleep: bounds how late a stop request is noticed */
#define SHUTDOWN_WAIT_MS 10000   /* forwards in flight get this long to finish at shutdown (or
                                  * kafka.produce_timeout_ms, when shorter) */
#define CLOSE_WAIT_MS 3000       /* the consumer's close at shutdown */
#define NOMEM_RETRY_MS 1000
#define READ_AHEAD_MS 1000       /* levels above the smallest: taken this long before they act */
#define TRIM_AFTER_MOVED 10000   /* a burst: messages taken or finished since memory was given back */
#define TRIM_INTERVAL_MS 5000    /* memory is given back at most this often */
#define STATUS_MAX 4096          /* partition rows published per group: far above any real group */

struct holder {
    const struct config *cfg;
    rd_kafka_t *rk;
    struct forwarder *fw;
    struct groups *groups;
    rd_kafka_queue_t *cq, *pq;
    struct parts parts;      /* the consumer's partitions, their timers and commits */
    struct heap due;         /* struct held by act_ms */
    int wake[2];             /* librdkafka queues write here when they become non-empty */
    int unfinished;          /* forwards were left unanswered at shutdown */
    int commits_out;         /* asynchronous commits sent and not yet answered */
    int64_t last_commit_ms;  /* monotonic */
    uint64_t taken, done;    /* messages taken from Kafka, and finished, ever */
    uint64_t taken_at_check, moved_at_trim;
    int64_t last_trim_ms;    /* monotonic */
    unsigned redis_moves;    /* store_master_moves when last looked at */
};

static void submit(struct holder *h, struct held *m);
static void run_groups(struct holder *h);
static void trim_after_burst(struct holder *h, int64_t now);

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    struct holder *h = opaque;

    (void)rk;
    (void)offsets;
    if (h->commits_out > 0)
        h->commits_out--;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        log_warn("offset commit failed (retried): %s", rd_kafka_err2str(err));
        parts_commit_failed(&h->parts);
    }
}

static rd_kafka_conf_t *consumer_conf(const struct config *cfg, char *err, size_t errlen)
{
    /* fetch.wait.max.ms 100: new messages end a waiting fetch at once anyway; the wait only
     * delays a resumed partition's first fetch, and partitions resume half a READ_AHEAD_MS
     * early. Each fetch names every assigned partition: with 104 of them, a 10 ms wait keeps an
     * idle broker at a fifth of a core, 100 ms at a twenty-fifth.
     * Small pre-fetch: a paused partition's head is all the holder needs, and what was fetched
     * before a pause is dropped. With a million jobs pending, librdkafka's default pre-fetch
     * costs several times the resident memory of these sizes, and forwarding a backlog is no
     * faster with it (docs/performance.md).
     * socket.timeout.ms 10 s: a broker answers the holder's requests within milliseconds; a hung
     * one is given up on sooner, and a stop waits for no request longer than that.
     * session.timeout.ms 1 s (heartbeat.interval.ms below it, as librdkafka asks): an
     * assign()-based consumer joins no group; the setting only bounds how long librdkafka keeps
     * a lost coordinator's commits before destroy may finish. */
    const char *const defaults[][2] = {
        { "client.id", "delayq-holder" },
        { "group.id", cfg->kafka.group_id },
        { "enable.auto.commit", "false" },
        { "enable.auto.offset.store", "false" },
        { "auto.offset.reset", "earliest" },
        { "enable.partition.eof", "false" },
        { "fetch.wait.max.ms", "100" },
        { "fetch.error.backoff.ms", "100" },
        { "queued.max.messages.kbytes", "2048" },
        { "max.partition.fetch.bytes", "262144" },
        { "fetch.max.bytes", "4194304" },
        { "socket.nagle.disable", "true" },
        { "socket.timeout.ms", "10000" },
        { "session.timeout.ms", "1000" },
        { "heartbeat.interval.ms", "500" },
    };

    return kafka_conf_build(cfg, defaults, sizeof(defaults) / sizeof(defaults[0]), err, errlen);
}

static rd_kafka_t *consumer_new(struct holder *h, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf;
    char why[512];
    rd_kafka_t *rk;

    if (!(conf = consumer_conf(h->cfg, err, errlen)))
        return NULL;
    rd_kafka_conf_set_offset_commit_cb(conf, on_commit);
    rd_kafka_conf_set_opaque(conf, h);
    if (!(rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))) {
        snprintf(err, errlen, "kafka consumer: %s", why);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_poll_set_consumer(rk);
    return rk;
}

int holder_check_config(const struct config *cfg, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = consumer_conf(cfg, err, errlen);
    rd_kafka_t *rk;

    if (!conf || !(rk = kafka_new_quiet(RD_KAFKA_CONSUMER, conf, err, errlen)))
        return -1;
    rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    return 0;
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
    m->gen = p->gen;
    m->group = p->group;
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
    char why[TOPIC_NAME_MAX + 128];
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(rkm, &tstype);

    m->timestamp_ms = tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? now : ts;
    m->env_ok = envelope_parse(m->hdrs, m->nhdrs, &m->env, m->env_err, sizeof(m->env_err)) == 0;
    if (m->env_ok) {
        envelope_times(&m->env, m->timestamp_ms, h->cfg->delay.levels.ms[m->level], &m->act_ms,
                       &m->due_ms);
        /* read ahead of its act time: its topic's metadata is fetched before it is sent (a
         * target it cannot be sent to gets no topic handle, nor a metadata request that could
         * create it; a pull topic is no Kafka topic) */
        if (m->env.topic &&
            !decide_pulls(h->cfg, m->env.topic, m->env.topic_len, m->env.deliver) &&
            levels_check_target(&h->cfg->delay.levels, h->cfg->delay.dlq_topic, m->env.topic,
                                m->env.topic_len, why, sizeof(why)) == TARGET_OK)
            warm_topic(forwarder_warm(h->fw), m->env.topic, m->env.topic_len);
    } else
        m->act_ms = m->due_ms = now;   /* to the dead-letter topic at once */
}

static void take(struct holder *h, rd_kafka_message_t *rkm)
{
    int64_t now = clock_now_ms(), ahead;
    struct part *p;
    struct held *m;

    h->taken++;
    if (rkm->err) {
        log_warn("consumer: %s", rd_kafka_message_errstr(rkm));
        return;
    }
    p = parts_find(&h->parts, rd_kafka_topic_name(rkm->rkt), rkm->partition);
    /* A paused partition's stale messages, and those before the offset sought, are read again;
     * those of a group not (or no longer) ours are not ours to act on. */
    if (!p || !groups_usable(h->groups, p->group) || p->hold != HOLD_NONE ||
        (p->offs.next >= 0 && rkm->offset < p->offs.next))
        return;
    if (!(m = held_new(p, rkm))) {
        log_error("out of memory holding topic=%s partition=%d offset=%lld; retrying",
                  rd_kafka_topic_name(rkm->rkt), rkm->partition, (long long)rkm->offset);
        parts_hold_head(&h->parts, p, rkm->offset, now + NOMEM_RETRY_MS);
        return;
    }
    set_times(h, m, rkm, now);
    /* The smallest level is read ahead by its delay: its messages may be due before their hop
     * time. The others by READ_AHEAD_MS, resuming when half of it is left: a partition then
     * resumes once for a batch, not once for each message, which fetched the same bytes again
     * and again and dropped them at the next pause. */
    ahead = p->level == 0 ? h->cfg->delay.levels.ms[0] : READ_AHEAD_MS;
    if (m->act_ms > now + ahead) {
        parts_hold_head(&h->parts, p, rkm->offset, m->act_ms - (p->level == 0 ? ahead : ahead / 2));
        free(m);
        return;
    }
    if (parts_take(&h->parts, p, rkm->offset) < 0) {   /* paused: its share is in memory */
        free(m);
        return;
    }
    m->epoch = groups_epoch(h->groups, p->group);
    if (m->act_ms <= now || heap_push(&h->due, m->act_ms, m) < 0)
        submit(h, m);   /* the forwarder holds it back if it is not due */
}

/* A message is stale when its partition's state was forgotten since it was taken. */
static int stale(const struct held *m)
{
    return m->gen != m->part->gen;
}

/* Forgets a message of a group being handed back: its offset stays unfinished, so the commit
 * stops before it and the next owner reads it again. */
static void forget(struct holder *h, struct held *m)
{
    if (!stale(m))
        parts_untake(&h->parts, m->part);
    free(m);
}

/* m is finished (delivered, skipped, moved on or dead-lettered): the commit point may pass it. */
static void finished(struct holder *h, struct held *m)
{
    if (!stale(m)) {
        parts_finish(&h->parts, m->part, m->offset);
        h->done++;
    }
    free(m);
}

/* m waits in the due heap until at_ms (epoch), unless its group is no longer surely ours. */
static void retry_at(struct holder *h, struct held *m, int64_t at_ms)
{
    if (stale(m) || !groups_may_forward(h->groups, m->part->group, clock_mono_ms())) {
        forget(h, m);
        return;
    }
    m->act_ms = at_ms;
    if (heap_push(&h->due, at_ms, m) < 0)
        submit(h, m);
}

/* Hands m to the forwarder; one it cannot take now (out of memory) waits a second. */
static void submit(struct holder *h, struct held *m)
{
    if (forwarder_submit(h->fw, m) == 0)
        return;
    m->act_ms = clock_now_ms() + NOMEM_RETRY_MS;
    if (heap_push(&h->due, m->act_ms, m) < 0) {
        log_error("out of memory: topic=%s partition=%d offset=%lld is read again after a restart",
                  h->cfg->delay.levels.topic[m->level], m->partition, (long long)m->offset);
        forget(h, m);
    }
}

/* Applies what the forwarder handed back. */
static void apply_outcomes(struct holder *h)
{
    struct fw_outcome o;

    while (forwarder_outcome(h->fw, &o)) {
        if (o.result == FW_DONE)
            finished(h, o.m);
        else
            retry_at(h, o.m, o.at_ms);
    }
}

static void flush(struct holder *h)
{
    forwarder_flush(h->fw);
    apply_outcomes(h);
}

/* Returns 1 when more callbacks' results may wait. */
static int poll_reports(struct holder *h)
{
    int more = forwarder_poll(h->fw);

    apply_outcomes(h);
    return more;
}

static void release_due(struct holder *h, int64_t now)
{
    int64_t at;
    struct held *m;

    while ((m = heap_peek(&h->due, &at)) && at <= now) {
        heap_pop(&h->due, NULL);
        if (stale(m) || !groups_may_forward(h->groups, m->part->group, clock_mono_ms()))
            forget(h, m);
        else
            submit(h, m);
    }
}

static int wait_ms(struct holder *h, int64_t now)
{
    int64_t mono = clock_mono_ms(), at;
    int64_t wait = groups_next_ms(h->groups) - mono, ask = parts_next_ask_ms(&h->parts) - mono;

    if (wait > IDLE_WAIT_MS)
        wait = IDLE_WAIT_MS;
    if (ask < wait)
        wait = ask;
    if (parts_next_timer(&h->parts, &at) && at - now < wait)
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
    int64_t wait = h->cfg->kafka.produce_timeout_ms < SHUTDOWN_WAIT_MS
                       ? h->cfg->kafka.produce_timeout_ms : SHUTDOWN_WAIT_MS;
    int64_t deadline = clock_mono_ms() + wait;

    /* Messages not yet submitted stay unfinished: the commit stops before them. */
    while (forwarder_in_flight(h->fw) > 0 && clock_mono_ms() < deadline) {
        wait_wake(h, 50);
        poll_reports(h);
    }
    if ((h->unfinished = forwarder_in_flight(h->fw) > 0))
        log_warn("%zu forwards unfinished at shutdown; they are read again on restart",
                 forwarder_in_flight(h->fw));
    parts_commit(&h->parts, -1, 1);
    groups_release_all(h->groups);
}

static int retried(const void *item, void *ctx)
{
    (void)ctx;
    return ((const struct held *)item)->attempts > 0;
}

/* The Redis master moved (a failover): what waits to be tried again after a failure goes now,
 * not after its backoff, which the failover made long. */
static void redis_moved(struct holder *h, int64_t now)
{
    unsigned moves = store_master_moves();
    size_t n;

    if (moves == h->redis_moves)
        return;
    h->redis_moves = moves;
    if ((n = heap_advance(&h->due, now, retried, NULL)))
        log_info("the Redis master moved: %zu messages waiting to be tried again go now", n);
}

void holder_run(struct holder *h, volatile sig_atomic_t *stop)
{
    int more = 0;

    while (!*stop) {
        int64_t now = clock_now_ms();

        redis_moved(h, now);
        run_groups(h);
        parts_fire_timers(&h->parts, now);
        release_due(h, now);
        flush(h);
        wait_wake(h, more ? 0 : wait_ms(h, now));
        more = take_batch(h);
        more |= poll_reports(h);
        flush(h);
        if (clock_mono_ms() - h->last_commit_ms >= COMMIT_INTERVAL_MS) {
            /* one commit unanswered at a time: with the coordinator unreachable they would
             * pile up, and the consumer's close waits for each */
            if (h->commits_out == 0)
                h->commits_out += parts_commit(&h->parts, -1, 0);
            parts_gauges(&h->parts);
            trim_after_burst(h, clock_mono_ms());
            h->last_commit_ms = clock_mono_ms();
        }
    }
    finish(h);
}

/* Applies what groups_run says changed, lets go of the groups won whose partitions could not be
 * assigned, then finishes the hand-backs whose messages are done: commit, drop, let go of the
 * lease. */
static void run_groups(struct holder *h)
{
    static struct part_status rows[STATUS_MAX];
    const struct group_change *ch;
    const int *failed;
    size_t n = groups_run(h->groups, clock_mono_ms(), &ch), nf;

    for (size_t i = 0; i < n; i++) {
        int g = ch[i].group;
        switch (ch[i].kind) {
        case GROUP_WON:
            parts_assign(&h->parts, g);
            break;
        case GROUP_HAND_BACK:
            parts_quiesce(&h->parts, g);
            break;
        case GROUP_LOST:
            parts_unassign(&h->parts, g);
            break;
        case GROUP_STATUS:   /* unless it was let go above (its partitions could not be assigned) */
            if (groups_may_forward(h->groups, g, clock_mono_ms()))
                groups_publish(h->groups, g, rows, parts_status(&h->parts, g, rows, STATUS_MAX));
            break;
        }
    }
    nf = parts_run_asks(&h->parts, &failed);
    for (size_t i = 0; i < nf; i++)
        groups_let_go(h->groups, failed[i], "released unassigned");
    for (int g = 0; g < h->cfg->delay.ngroups; g++) {
        if (groups_handing_back(h->groups, g) && parts_in_flight(&h->parts, g) == 0) {
            parts_commit(&h->parts, g, 1);
            parts_unassign(&h->parts, g);
            groups_let_go(h->groups, g, "handed back");
        }
    }
}

/* After a burst (a backlog drained) glibc keeps the memory freed in its per-thread arenas: a
 * burst of 100,000 jobs would leave 80 MiB resident against 10 MiB idle. It is given back when
 * many messages were taken or finished since the last time and none was taken since the last
 * check (100 ms): once as a burst is being forwarded, and once more after its last
 * TRIM_AFTER_MOVED. */
static void trim_after_burst(struct holder *h, int64_t now)
{
    int quiet = h->taken == h->taken_at_check;

    h->taken_at_check = h->taken;
    if (!quiet || h->taken + h->done - h->moved_at_trim < TRIM_AFTER_MOVED ||
        now - h->last_trim_ms < TRIM_INTERVAL_MS)
        return;
#ifdef __GLIBC__
    malloc_trim(0);
    log_debug("memory given back after %llu messages taken or finished (%lld ms)",
              (unsigned long long)(h->taken + h->done - h->moved_at_trim),
              (long long)(clock_mono_ms() - now));
#endif
    h->moved_at_trim = h->taken + h->done;
    h->last_trim_ms = now;
}

static int wake_init(struct holder *h, char *err, size_t errlen)
{
    h->cq = rd_kafka_queue_get_consumer(h->rk);
    h->pq = rd_kafka_queue_get_main(forwarder_producer(h->fw));
    if (!h->cq || !h->pq) {   /* no consumer group: the config check refuses that before */
        snprintf(err, errlen, "kafka: no consumer queue (is kafka.group_id set?)");
        return -1;
    }
    rd_kafka_queue_io_event_enable(h->cq, h->wake[1], "c", 1);
    rd_kafka_queue_io_event_enable(h->pq, h->wake[1], "p", 1);
    return 0;
}

struct warm *holder_warm(struct holder *h)
{
    return forwarder_warm(h->fw);
}

void holder_on_occurrence(struct holder *h, forwarder_occurrence_fn *fn,
                          forwarder_sched_check_fn *check, void *ctx)
{
    forwarder_on_occurrence(h->fw, fn, check, ctx);
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
    if (!(h->groups = groups_new(cfg))) {
        snprintf(err, errlen, "out of memory");
        holder_free(h);
        return NULL;
    }
    if (pipe2(h->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(err, errlen, "pipe: %m");
        holder_free(h);
        return NULL;
    }
    if (!(h->rk = consumer_new(h, err, errlen)) ||
        !(h->fw = forwarder_new(cfg, h->groups, h->wake[1], err, errlen)) ||
        parts_init(&h->parts, cfg, h->rk, h->groups, partitions, h->wake[1], err, errlen) < 0 ||
        wake_init(h, err, errlen) < 0) {
        holder_free(h);
        return NULL;
    }
    return h;
}

/* Closes the consumer within CLOSE_WAIT_MS. An assign()-based consumer has no group to leave;
 * what a close may wait for is an offset commit sent while the broker was unreachable, which
 * librdkafka otherwise waits for without end. Such a commit was never confirmed: the messages
 * it covered are read again on restart and their marks keep them from being sent twice. */
static void close_consumer(rd_kafka_t *rk)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    int64_t deadline = clock_mono_ms() + CLOSE_WAIT_MS;
    rd_kafka_error_t *e = rd_kafka_consumer_close_queue(rk, q);

    if (e) {
        log_warn("closing the consumer: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    } else {
        while (!rd_kafka_consumer_closed(rk) && clock_mono_ms() < deadline) {
            rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 100);
            if (ev)
                rd_kafka_event_destroy(ev);
        }
        if (!rd_kafka_consumer_closed(rk))
            log_warn("the consumer did not close within %d ms (the broker is unreachable); "
                     "stopping without it", CLOSE_WAIT_MS);
    }
    rd_kafka_queue_destroy(q);
}

void holder_free(struct holder *h)
{
    struct held *m;

    if (!h)
        return;
    /* flushes, unless forwards stayed unfinished (Kafka did not answer for a while): what its
     * last reports finish is freed with it */
    forwarder_free(h->fw, h->unfinished ? 0 : (int)h->cfg->kafka.produce_timeout_ms);
    groups_free(h->groups);
    while ((m = heap_pop(&h->due, NULL)))
        free(m);
    heap_release(&h->due);
    if (h->cq)
        rd_kafka_queue_destroy(h->cq);
    if (h->pq)
        rd_kafka_queue_destroy(h->pq);
    if (h->rk && h->commits_out > 0)   /* the close would wait for its answer */
        log_warn("an offset commit is unanswered (Kafka is unreachable): the consumer stops "
                 "without closing; the messages it covered are read again on restart");
    else if (h->rk)
        close_consumer(h->rk);
    parts_release(&h->parts);
    if (h->rk)
        rd_kafka_destroy_flags(h->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    if (h->wake[0] >= 0) {
        close(h->wake[0]);
        close(h->wake[1]);
    }
    free(h);
}
