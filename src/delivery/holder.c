/* holder: the consumer assigned to every delay-topic partition of the groups this instance
 * owns; pauses each partition until its head is due, resumes and seeks it by timer, reads the
 * smallest level ahead into the due heap, commits up to the lowest unfinished offset, and runs
 * the forwarder from its loop. The contract is in include/delivery/holder.h. */
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "lib/clock.h"
#include "delivery/forwarder.h"
#include "delivery/groups.h"
#include "lib/heap.h"
#include "delivery/holder.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "core/offsets.h"
#include "kafka/producer.h"
#include "kafka/warm.h"

#define LOG_MODULE "holder"
#define POLL_BATCH 2000          /* messages taken in one turn before timers are looked at again */
#define COMMIT_INTERVAL_MS 100   /* commits trail progress by at most this */
#define IDLE_WAIT_MS 200         /* longest sleep: bounds how late a stop request is noticed */
#define SHUTDOWN_WAIT_MS 10000   /* forwards in flight get this long to finish at shutdown */
#define NOMEM_RETRY_MS 1000
#define COMMITTED_TIMEOUT_MS 15000  /* the group coordinator may be loading */
#define COMMITTED_RETRY_MS 200      /* ... or have moved: asked again after this */
#define READ_AHEAD_MS 1000       /* levels above the smallest: taken this long before they act */
#define TRIM_AFTER_MOVED 10000   /* a burst: messages taken or finished since memory was given back */
#define TRIM_INTERVAL_MS 5000    /* memory is given back at most this often */
#define STATUS_MAX 4096          /* partition rows published per group: far above any real group */

enum hold { HOLD_NONE, HOLD_HEAD, HOLD_FULL };

struct part {
    int level;
    int32_t partition;
    struct offsets offs;
    enum hold hold;          /* why it is paused */
    int64_t resume_at;       /* HOLD_HEAD: epoch ms of the resume timer */
    size_t in_memory;        /* taken and not finished */
    int64_t committed;       /* last offset sent in a commit, -1 none */
    int group;               /* its partition group */
    uint32_t gen;            /* bumped whenever its state is forgotten */
};

struct holder {
    const struct config *cfg;
    rd_kafka_t *rk;
    struct forwarder *fw;
    struct groups *groups;
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
    uint64_t taken, done;    /* messages taken from Kafka, and finished, ever */
    uint64_t taken_at_check, moved_at_trim;
    int64_t last_trim_ms;    /* monotonic */
};

static void update_gauges(struct holder *h);
static void submit(struct holder *h, struct held *m);
static void run_groups(struct holder *h);
static void trim_after_burst(struct holder *h, int64_t now);

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

static rd_kafka_conf_t *consumer_conf(const struct config *cfg, char *err, size_t errlen)
{
    /* fetch.wait.max.ms 100: new messages end a waiting fetch at once anyway; the wait only
     * delays a resumed partition's first fetch, and partitions resume half a READ_AHEAD_MS
     * early. Each fetch names every assigned partition: with 104 of them, a 10 ms wait keeps an
     * idle broker at a fifth of a core, 100 ms at a twenty-fifth.
     * Small pre-fetch: a paused partition's head is all the holder needs, and what was fetched
     * before a pause is dropped. With a million jobs pending, librdkafka's default pre-fetch
     * costs several times the resident memory of these sizes, and forwarding a backlog is no
     * faster with it (docs/performance.md). */
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

/* In librdkafka 2.0.2, resume alone restarts after the last message handed out and may leave
 * the fetcher asleep for up to a second; the seek to the held offset wakes it at once.
 * rd_kafka_seek does not block on a paused partition (rd_kafka_seek_partitions in 2.0.2 divides
 * its timeout by 1000). */
static void resume_part(struct holder *h, struct part *p)
{
    rd_kafka_topic_partition_list_t *l = part_list(h, p);
    rd_kafka_resp_err_t e;

    p->hold = HOLD_NONE;
    metrics_inc(M_RESUMES);
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
         * create it) */
        if (m->env.topic &&
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
    p = find_part(h, rkm);
    /* A paused partition's stale messages, and those before the offset sought, are read again;
     * those of a group not (or no longer) ours are not ours to act on. */
    if (!p || !groups_usable(h->groups, p->group) || p->hold != HOLD_NONE ||
        (p->offs.next >= 0 && rkm->offset < p->offs.next))
        return;
    if (!(m = held_new(p, rkm))) {
        log_error("out of memory holding topic=%s partition=%d offset=%lld; retrying",
                  rd_kafka_topic_name(rkm->rkt), rkm->partition, (long long)rkm->offset);
        hold_head(h, p, rkm->offset, now + NOMEM_RETRY_MS);
        return;
    }
    set_times(h, m, rkm, now);
    /* The smallest level is read ahead by its delay: its messages may be due before their hop
     * time. The others by READ_AHEAD_MS, resuming when half of it is left: a partition then
     * resumes once for a batch, not once for each message, which fetched the same bytes again
     * and again and dropped them at the next pause. */
    ahead = p->level == 0 ? h->cfg->delay.levels.ms[0] : READ_AHEAD_MS;
    if (m->act_ms > now + ahead) {
        hold_head(h, p, rkm->offset, m->act_ms - (p->level == 0 ? ahead : ahead / 2));
        free(m);
        return;
    }
    if (p->in_memory >= h->per_part_cap || offsets_take(&p->offs, rkm->offset) < 0) {
        pause_part(h, p, HOLD_FULL, rkm->offset);
        free(m);
        return;
    }
    p->in_memory++;
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
static void forget(struct held *m)
{
    if (!stale(m))
        m->part->in_memory--;
    free(m);
}

/* m is finished (delivered, skipped, moved on or dead-lettered): the commit point may pass it. */
static void finished(struct holder *h, struct held *m)
{
    struct part *p = m->part;

    if (stale(m)) {
        free(m);
        return;
    }
    offsets_finish(&p->offs, m->offset);
    p->in_memory--;
    h->done++;
    free(m);
    if (p->hold == HOLD_FULL && p->in_memory <= h->per_part_cap / 2)
        resume_part(h, p);
}

/* m waits in the due heap until at_ms (epoch), unless its group is no longer surely ours. */
static void retry_at(struct holder *h, struct held *m, int64_t at_ms)
{
    if (stale(m) || !groups_may_forward(h->groups, m->part->group, clock_mono_ms())) {
        forget(m);
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
        forget(m);
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

static void poll_reports(struct holder *h)
{
    forwarder_poll(h->fw);
    apply_outcomes(h);
}

static void fire_timers(struct holder *h, int64_t now)
{
    int64_t at;
    struct part *p;

    while ((p = heap_peek(&h->timers, &at)) && at <= now) {
        heap_pop(&h->timers, NULL);
        if (p->hold == HOLD_HEAD && p->resume_at == at && groups_usable(h->groups, p->group))
            resume_part(h, p);
    }
}

static void release_due(struct holder *h, int64_t now)
{
    int64_t at;
    struct held *m;

    while ((m = heap_peek(&h->due, &at)) && at <= now) {
        heap_pop(&h->due, NULL);
        if (stale(m) || !groups_may_forward(h->groups, m->part->group, clock_mono_ms()))
            forget(m);
        else
            submit(h, m);
    }
}

static int wait_ms(struct holder *h, int64_t now)
{
    int64_t wait = groups_next_ms(h->groups) - clock_mono_ms(), at;

    if (wait > IDLE_WAIT_MS)
        wait = IDLE_WAIT_MS;
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

/* Commits the partitions of `group` (-1: of every group) whose lease is surely still ours. */
static void commit(struct holder *h, int group, int sync)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)h->nparts);
    int64_t now = clock_mono_ms();
    rd_kafka_resp_err_t e;

    for (size_t i = 0; i < h->nparts; i++) {
        struct part *p = &h->parts[i];
        int64_t cp = offsets_commit_point(&p->offs);
        if ((group >= 0 && p->group != group) || !groups_may_forward(h->groups, p->group, now))
            continue;
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
        poll_reports(h);
    }
    if (forwarder_in_flight(h->fw) > 0)
        log_warn("%zu forwards unfinished at shutdown; they are read again on restart",
                 forwarder_in_flight(h->fw));
    commit(h, -1, 1);
    groups_release_all(h->groups);
}

void holder_run(struct holder *h, volatile sig_atomic_t *stop)
{
    int more = 0;

    while (!*stop) {
        int64_t now = clock_now_ms();

        run_groups(h);
        fire_timers(h, now);
        release_due(h, now);
        flush(h);
        wait_wake(h, more ? 0 : wait_ms(h, now));
        more = take_batch(h);
        poll_reports(h);
        flush(h);
        if (clock_mono_ms() - h->last_commit_ms >= COMMIT_INTERVAL_MS) {
            commit(h, -1, 0);
            update_gauges(h);
            trim_after_burst(h, clock_mono_ms());
            h->last_commit_ms = clock_mono_ms();
        }
    }
    finish(h);
}

/* Looks the committed offsets up before assigning (a partition never committed starts at its
 * beginning), so the wait for the group coordinator happens here, and not while the first due
 * jobs wait. A coordinator that moved or is loading (a Kafka restart) is asked again until
 * half a lease time has passed. 0, or -1 with err set: the group is then not assigned, since
 * librdkafka's own lookup after an assign without offsets can stall for good when it meets a
 * coordinator that moved (the partitions would never be fetched). */
static int start_offsets(struct holder *h, rd_kafka_topic_partition_list_t *l, char *err,
                         size_t errlen)
{
    int64_t budget = h->cfg->delay.claim_ttl_ms / 2, until = clock_mono_ms() +
        (budget < COMMITTED_TIMEOUT_MS ? budget : COMMITTED_TIMEOUT_MS);
    rd_kafka_resp_err_t e;

    for (;;) {
        int64_t left = until - clock_mono_ms();
        e = rd_kafka_committed(h->rk, l, (int)(left > 0 ? left : 1));
        for (int i = 0; !e && i < l->cnt; i++)
            e = l->elems[i].err;
        if (!e || clock_mono_ms() + COMMITTED_RETRY_MS >= until ||
            (e != RD_KAFKA_RESP_ERR_NOT_COORDINATOR &&
             e != RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE &&
             e != RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS &&
             e != RD_KAFKA_RESP_ERR__WAIT_COORD && e != RD_KAFKA_RESP_ERR__TRANSPORT))
            break;
        usleep(COMMITTED_RETRY_MS * 1000);
    }
    if (e) {
        snprintf(err, errlen, "reading committed offsets: %s", rd_kafka_err2str(e));
        return -1;
    }
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].offset < 0)
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
    return 0;
}

/* One part per partition of every delay topic; none is assigned until its group is won. */
static int init_parts(struct holder *h, const int partitions[LEVELS_MAX], char *err, size_t errlen)
{
    const struct levels *lv = &h->cfg->delay.levels;
    size_t n = 0;

    for (int i = 0; i < lv->n; i++)
        n += (size_t)partitions[i];
    if (!(h->parts = calloc(n, sizeof(*h->parts)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < lv->n; i++) {
        h->first[i] = (int)h->nparts;
        h->count[i] = partitions[i];
        h->rkt[i] = rd_kafka_topic_new(h->rk, lv->topic[i], NULL);
        for (int p = 0; p < partitions[i]; p++) {
            struct part *pt = &h->parts[h->nparts++];
            pt->level = i;
            pt->partition = p;
            pt->committed = -1;
            pt->group = h->cfg->delay.group_of[p];
            offsets_init(&pt->offs);
        }
    }
    return 0;
}

/* The topic-partition list of a group's partitions, and each part's state forgotten. */
static rd_kafka_topic_partition_list_t *group_list(struct holder *h, int group, int forget_state)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);

    for (size_t i = 0; i < h->nparts; i++) {
        struct part *p = &h->parts[i];
        if (p->group != group)
            continue;
        rd_kafka_topic_partition_list_add(l, h->cfg->delay.levels.topic[p->level], p->partition);
        if (forget_state) {
            p->gen++;
            offsets_reset(&p->offs);
            p->in_memory = 0;
            p->hold = HOLD_NONE;
            p->committed = -1;
        }
    }
    return l;
}

static int group_acquire(struct holder *h, int group, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *l = group_list(h, group, 1);
    rd_kafka_error_t *e;

    if (start_offsets(h, l, err, errlen) < 0) {
        rd_kafka_topic_partition_list_destroy(l);
        return -1;
    }
    if ((e = rd_kafka_incremental_assign(h->rk, l))) {
        snprintf(err, errlen, "assign: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        rd_kafka_topic_partition_list_destroy(l);
        return -1;
    }
    rd_kafka_resume_partitions(h->rk, l);   /* a pause from an earlier ownership must not stay */
    log_info("assigned group=%d: %d partitions", group, l->cnt);
    rd_kafka_topic_partition_list_destroy(l);
    return 0;
}

static void group_drop(struct holder *h, int group)
{
    rd_kafka_topic_partition_list_t *l = group_list(h, group, 1);
    rd_kafka_error_t *e = rd_kafka_incremental_unassign(h->rk, l);

    if (e) {
        log_warn("unassign group=%d: %s", group, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static void group_quiesce(struct holder *h, int group)
{
    rd_kafka_topic_partition_list_t *l = group_list(h, group, 0);

    /* Nothing more is read; what was read (waiting here until due, at most the read-ahead) is
     * still forwarded, so that the commit before the release covers every message acted on.
     * Forgotten, the messages after the first of them that had moved down a level would be
     * read again by the next owner and moved, or delivered, a second time. */
    rd_kafka_pause_partitions(h->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
}

static size_t group_in_flight(struct holder *h, int group)
{
    size_t n = 0;

    for (size_t i = 0; i < h->nparts; i++)
        if (h->parts[i].group == group)
            n += h->parts[i].in_memory;
    return n;
}

static void group_commit(struct holder *h, int group)
{
    commit(h, group, 1);
}

static size_t group_status(struct holder *h, int group, struct part_status *out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < h->nparts && n < max; i++) {
        struct part *p = &h->parts[i];
        const char *topic = h->cfg->delay.levels.topic[p->level];
        int64_t lo = -1, hi = -1;
        if (p->group != group)
            continue;
        rd_kafka_get_watermark_offsets(h->rk, topic, p->partition, &lo, &hi);
        snprintf(out[n].field, sizeof(out[n].field), "%s/%d", topic, p->partition);
        snprintf(out[n].value, sizeof(out[n].value), "%lld %lld %lld",
                 (long long)offsets_commit_point(&p->offs), (long long)(hi >= 0 ? hi : -1),
                 (long long)(p->hold == HOLD_HEAD ? p->resume_at : -1));
        n++;
    }
    return n;
}

/* Applies what groups_run says changed, then finishes the hand-backs whose messages are done:
 * commit, drop, let go of the lease. */
static void run_groups(struct holder *h)
{
    static struct part_status rows[STATUS_MAX];
    const struct group_change *ch;
    size_t n = groups_run(h->groups, clock_mono_ms(), &ch);
    char err[256];

    for (size_t i = 0; i < n; i++) {
        int g = ch[i].group;
        switch (ch[i].kind) {
        case GROUP_WON:
            if (group_acquire(h, g, err, sizeof(err)) < 0) {
                log_error("group=%d claimed but not assigned: %s; releasing it", g, err);
                groups_let_go(h->groups, g, "released unassigned");
            }
            break;
        case GROUP_HAND_BACK:
            group_quiesce(h, g);
            break;
        case GROUP_LOST:
            group_drop(h, g);
            break;
        case GROUP_STATUS:   /* unless it was let go above (its partitions could not be assigned) */
            if (groups_may_forward(h->groups, g, clock_mono_ms()))
                groups_publish(h->groups, g, rows, group_status(h, g, rows, STATUS_MAX));
            break;
        }
    }
    for (int g = 0; g < h->cfg->delay.ngroups; g++) {
        if (groups_handing_back(h->groups, g) && group_in_flight(h, g) == 0) {
            group_commit(h, g);
            group_drop(h, g);
            groups_let_go(h->groups, g, "handed back");
        }
    }
}

static void update_gauges(struct holder *h)
{
    int64_t held = 0, in_memory = 0;

    for (size_t i = 0; i < h->nparts; i++) {
        held += h->parts[i].hold != HOLD_NONE;
        in_memory += (int64_t)h->parts[i].in_memory;
    }
    metrics_set(M_HELD_PARTITIONS, held);
    metrics_set(M_IN_MEMORY, in_memory);
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

void holder_on_occurrence(struct holder *h, forwarder_occurrence_fn *fn, void *ctx)
{
    forwarder_on_occurrence(h->fw, fn, ctx);
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
        init_parts(h, partitions, err, errlen) < 0 || wake_init(h, err, errlen) < 0) {
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
    forwarder_free(h->fw);   /* flushes; what its last reports finish is freed with it */
    groups_free(h->groups);
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
