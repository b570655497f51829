/* parts: the holder consumer's partitions: assigned group by group from their committed offsets,
 * paused while their head is not due (a timer resumes and seeks them) or while they hold their
 * share of messages in memory, and committed up to the lowest unfinished offset. The contract
 * is in include/delivery/parts.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "delivery/groups.h"
#include "delivery/parts.h"
#include "kafka/offsets.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"

#define LOG_MODULE "holder"      /* the holder's partitions: one module in the logs */
#define COMMITTED_TIMEOUT_MS 15000  /* the group coordinator may be loading */
#define COMMIT_WAIT_MS 5000         /* longest wait for a commit before a release */
#define CAP_MIN 16               /* in-memory messages per partition, however many partitions */
#define ASK_RETRY_MS 100         /* a coordinator loading is asked again this often */

int parts_init(struct parts *ps, const struct config *cfg, rd_kafka_t *rk, const struct groups *gs,
               const int partitions[LEVELS_MAX], int wake_fd, char *err, size_t errlen)
{
    const struct levels *lv = &cfg->delay.levels;
    size_t n = 0;

    ps->cfg = cfg;
    ps->rk = rk;
    ps->groups = gs;
    heap_init(&ps->timers);
    for (int i = 0; i < lv->n; i++)
        n += (size_t)partitions[i];
    if (!(ps->v = calloc(n, sizeof(*ps->v))) ||
        !(ps->ask = calloc((size_t)cfg->delay.ngroups, sizeof(*ps->ask))) ||
        !(ps->failed = calloc((size_t)cfg->delay.ngroups, sizeof(*ps->failed))) ||
        !(ps->asks = rd_kafka_queue_new(rk))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rd_kafka_queue_io_event_enable(ps->asks, wake_fd, "a", 1);
    for (int i = 0; i < lv->n; i++) {
        ps->first[i] = (int)ps->n;
        ps->count[i] = partitions[i];
        ps->rkt[i] = rd_kafka_topic_new(rk, lv->topic[i], NULL);
        for (int p = 0; p < partitions[i]; p++) {
            struct part *pt = &ps->v[ps->n++];
            pt->level = i;
            pt->partition = p;
            pt->committed = -1;
            pt->group = cfg->delay.group_of[p];
            offsets_init(&pt->offs);
        }
    }
    ps->cap = (size_t)cfg->delay.max_held / (ps->n ? ps->n : 1);
    if (ps->cap < CAP_MIN)
        ps->cap = CAP_MIN;
    return 0;
}

void parts_release(struct parts *ps)
{
    heap_release(&ps->timers);
    for (int i = 0; i < LEVELS_MAX; i++)
        if (ps->rkt[i])
            rd_kafka_topic_destroy(ps->rkt[i]);
    for (size_t i = 0; i < ps->n; i++)
        offsets_release(&ps->v[i].offs);
    if (ps->asks)
        rd_kafka_queue_destroy(ps->asks);
    free(ps->ask);
    free(ps->failed);
    free(ps->v);
}

struct part *parts_find(struct parts *ps, const char *topic, int32_t partition)
{
    int l = levels_find_topic(&ps->cfg->delay.levels, topic);

    if (l < 0 || partition < 0 || partition >= ps->count[l])
        return NULL;
    return &ps->v[ps->first[l] + partition];
}

static const char *topic_of(const struct parts *ps, const struct part *p)
{
    return ps->cfg->delay.levels.topic[p->level];
}

static rd_kafka_topic_partition_list_t *part_list(struct parts *ps, struct part *p)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);

    rd_kafka_topic_partition_list_add(l, topic_of(ps, p), p->partition);
    return l;
}

static void pause_part(struct parts *ps, struct part *p, enum hold why, int64_t head_offset)
{
    rd_kafka_topic_partition_list_t *l = part_list(ps, p);

    p->hold = why;
    offsets_hold_at(&p->offs, head_offset);
    rd_kafka_pause_partitions(ps->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
}

/* In librdkafka 2.0.2, resume alone restarts after the last message handed out and may leave
 * the fetcher asleep for up to a second; the seek to the held offset wakes it at once.
 * rd_kafka_seek does not block on a paused partition (rd_kafka_seek_partitions in 2.0.2 divides
 * its timeout by 1000). */
static void resume_part(struct parts *ps, struct part *p)
{
    rd_kafka_topic_partition_list_t *l = part_list(ps, p);
    rd_kafka_resp_err_t e;

    p->hold = HOLD_NONE;
    metrics_inc(M_RESUMES);
    rd_kafka_resume_partitions(ps->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (p->offs.next >= 0 && (e = rd_kafka_seek(ps->rkt[p->level], p->partition, p->offs.next, 0)))
        log_warn("seek topic=%s partition=%d offset=%lld: %s", topic_of(ps, p), p->partition,
                 (long long)p->offs.next, rd_kafka_err2str(e));
}

void parts_hold_head(struct parts *ps, struct part *p, int64_t offset, int64_t at_ms)
{
    pause_part(ps, p, HOLD_HEAD, offset);
    p->resume_at = at_ms;
    if (heap_push(&ps->timers, at_ms, p) < 0) {
        log_error("out of memory for a resume timer; resuming topic=%s partition=%d now",
                  topic_of(ps, p), p->partition);
        resume_part(ps, p);
    }
    log_debug("hold topic=%s partition=%d offset=%lld until=%lld", topic_of(ps, p), p->partition,
              (long long)offset, (long long)at_ms);
}

/* How many messages p may hold now: its share of delay.max_held among every partition, or,
 * while the partitions together hold less than max_held, its share among those holding any.
 * Most partitions of the longer levels hold nothing at a time: the few that are busy (a burst
 * come due, an endpoint slow to answer) may use what the idle ones leave, and one that grows
 * never takes a busy one's own share away. */
static size_t limit_of(const struct parts *ps, const struct part *p)
{
    size_t max = (size_t)ps->cfg->delay.max_held, busy = ps->busy + (p->in_memory == 0);
    size_t fair = max / (busy ? busy : 1);

    return ps->total < max && fair > ps->cap ? fair : ps->cap;
}

static void count(struct parts *ps, struct part *p, int one)
{
    if (one > 0 && p->in_memory++ == 0)
        ps->busy++;
    if (one < 0 && --p->in_memory == 0)
        ps->busy--;
    ps->total += (size_t)one;
}

int parts_take(struct parts *ps, struct part *p, int64_t offset)
{
    if (p->in_memory >= limit_of(ps, p) || offsets_take(&p->offs, offset) < 0) {
        pause_part(ps, p, HOLD_FULL, offset);
        return -1;
    }
    count(ps, p, +1);
    return 0;
}

void parts_finish(struct parts *ps, struct part *p, int64_t offset)
{
    offsets_finish(&p->offs, offset);
    count(ps, p, -1);
    if (p->hold == HOLD_FULL && p->in_memory <= limit_of(ps, p) / 2)
        resume_part(ps, p);
}

void parts_untake(struct parts *ps, struct part *p)
{
    count(ps, p, -1);
}

void parts_fire_timers(struct parts *ps, int64_t now_ms)
{
    int64_t at;
    struct part *p;

    while ((p = heap_peek(&ps->timers, &at)) && at <= now_ms) {
        heap_pop(&ps->timers, NULL);
        if (p->hold == HOLD_HEAD && p->resume_at == at && groups_usable(ps->groups, p->group))
            resume_part(ps, p);
    }
}

int parts_next_timer(const struct parts *ps, int64_t *at_ms)
{
    return heap_peek(&ps->timers, at_ms) != NULL;
}

/* A commit waited for, but never longer than COMMIT_WAIT_MS: with the coordinator unreachable
 * librdkafka keeps a synchronous commit waiting for it without end. */
static rd_kafka_resp_err_t commit_waiting(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    int64_t deadline = clock_mono_ms() + COMMIT_WAIT_MS;
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(rk, l, q, NULL, NULL);

    while (!e) {
        int64_t left = deadline - clock_mono_ms();
        rd_kafka_event_t *ev;
        if (left <= 0) {
            e = RD_KAFKA_RESP_ERR__TIMED_OUT;
            break;
        }
        if (!(ev = rd_kafka_queue_poll(q, (int)left)))
            continue;
        if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_OFFSET_COMMIT) {
            e = rd_kafka_event_error(ev);
            rd_kafka_event_destroy(ev);
            break;
        }
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);   /* a late answer is dropped with it */
    return e == RD_KAFKA_RESP_ERR__NO_OFFSET ? RD_KAFKA_RESP_ERR_NO_ERROR : e;
}

static void forget_committed(struct parts *ps, const rd_kafka_topic_partition_t *tp)
{
    for (size_t i = 0; i < ps->n; i++)
        if (ps->v[i].partition == tp->partition && !strcmp(topic_of(ps, &ps->v[i]), tp->topic))
            ps->v[i].committed = -1;
}

int parts_commit(struct parts *ps, int group, int sync)
{
    int sent = 0;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)ps->n);
    int64_t now = clock_mono_ms();
    rd_kafka_resp_err_t e;

    for (size_t i = 0; i < ps->n; i++) {
        struct part *p = &ps->v[i];
        int64_t cp = offsets_commit_point(&p->offs);
        if ((group >= 0 && p->group != group) || !groups_may_forward(ps->groups, p->group, now))
            continue;
        if (cp >= 0 && cp != p->committed) {
            rd_kafka_topic_partition_list_add(l, topic_of(ps, p), p->partition)->offset = cp;
            p->committed = cp;
        }
    }
    if (l->cnt > 0 && sync && (e = commit_waiting(ps->rk, l))) {
        log_warn("offset commit before a release failed: %s; the messages since the last commit "
                 "are read again by the next holder, and their marks keep them from being sent twice",
                 rd_kafka_err2str(e));
        for (int i = 0; i < l->cnt; i++)
            forget_committed(ps, &l->elems[i]);
    } else if (l->cnt > 0 && !sync) {
        sent = rd_kafka_commit(ps->rk, l, 1) == RD_KAFKA_RESP_ERR_NO_ERROR;
    }
    rd_kafka_topic_partition_list_destroy(l);
    return sent;
}

void parts_commit_failed(struct parts *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        ps->v[i].committed = -1;
}

/* The topic-partition list of a group's partitions, and each part's state forgotten. */
static rd_kafka_topic_partition_list_t *group_list(struct parts *ps, int group, int forget_state)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);

    for (size_t i = 0; i < ps->n; i++) {
        struct part *p = &ps->v[i];
        if (p->group != group)
            continue;
        rd_kafka_topic_partition_list_add(l, topic_of(ps, p), p->partition);
        if (forget_state) {
            p->gen++;
            offsets_reset(&p->offs);
            ps->total -= p->in_memory;
            ps->busy -= p->in_memory > 0;
            p->in_memory = 0;
            p->hold = HOLD_NONE;
            p->committed = -1;
        }
    }
    return l;
}

/* The opaque an ask of group's offsets carries: the group and the ask's seq. */
static void *ask_tag(const struct parts *ps, int group)
{
    return (void *)(uintptr_t)((uint64_t)ps->ask[group].seq << 32 | (uint32_t)group);
}

static void send_ask(struct parts *ps, int group)
{
    rd_kafka_topic_partition_list_t *l = group_list(ps, group, 0);
    int64_t left = ps->ask[group].deadline - clock_mono_ms();

    kafka_ask_committed_async(ps->rk, ps->cfg->kafka.group_id, l, left > 1 ? (int)left : 1,
                              ps->asks, ask_tag(ps, group));
    rd_kafka_topic_partition_list_destroy(l);
}

/* The committed offsets are looked up before assigning (a partition never committed starts at
 * its beginning), so the wait for the group coordinator happens here, and not while the first
 * due jobs wait; and without holding the holder's thread, which forwards the other groups'
 * jobs meanwhile. A coordinator that moved or is loading (a Kafka restart) is asked again
 * until half a lease time has passed. The group is never assigned without its offsets:
 * librdkafka's own lookup after an assign without offsets can stall for good when it meets a
 * coordinator that moved (the partitions would never be fetched). */
void parts_assign(struct parts *ps, int group)
{
    int64_t budget = ps->cfg->delay.claim_ttl_ms / 2;
    struct group_ask *a = &ps->ask[group];

    rd_kafka_topic_partition_list_destroy(group_list(ps, group, 1));
    a->asking = 1;
    a->seq++;
    a->retry_at = 0;
    a->deadline = clock_mono_ms() + (budget < COMMITTED_TIMEOUT_MS ? budget : COMMITTED_TIMEOUT_MS);
    send_ask(ps, group);
}

static void cancel_ask(struct parts *ps, int group)
{
    ps->ask[group].asking = 0;
    ps->ask[group].seq++;
}

/* Assigns group from l's offsets. 0, or -1 with err set. */
static int assign_from(struct parts *ps, int group, rd_kafka_topic_partition_list_t *l, char *err,
                       size_t errlen)
{
    rd_kafka_error_t *e;

    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].offset < 0)
            l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
    if ((e = rd_kafka_incremental_assign(ps->rk, l))) {
        snprintf(err, errlen, "assign: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
        return -1;
    }
    rd_kafka_resume_partitions(ps->rk, l);   /* a pause from an earlier ownership must not stay */
    ps->ask[group].assigned = 1;
    log_info("assigned group=%d: %d partitions", group, l->cnt);
    return 0;
}

/* One answer: the group assigned, asked again, or added to ps->failed[*nf]. */
static void answered(struct parts *ps, rd_kafka_event_t *ev, size_t *nf)
{
    void *tag;
    rd_kafka_topic_partition_list_t *l;
    int again, group, rc;
    char err[256];
    int64_t now = clock_mono_ms();

    if (rd_kafka_event_type(ev) != RD_KAFKA_EVENT_LISTCONSUMERGROUPOFFSETS_RESULT)
        return;
    tag = rd_kafka_event_opaque(ev);
    group = (int)(uint32_t)(uintptr_t)tag;
    if (group < 0 || group >= ps->cfg->delay.ngroups || !ps->ask[group].asking ||
        tag != ask_tag(ps, group))
        return;   /* an ask cancelled, or asked again since */
    l = group_list(ps, group, 0);
    rc = kafka_committed_answer(ev, &tag, l, &again, err, sizeof(err));
    if (rc < 0 && again && now + ASK_RETRY_MS < ps->ask[group].deadline) {
        log_debug("group=%d: reading committed offsets: %s; asking again", group, err);
        ps->ask[group].retry_at = now + ASK_RETRY_MS;
    } else {
        char why[300];
        cancel_ask(ps, group);
        if (rc < 0)
            snprintf(why, sizeof(why), "reading committed offsets: %s", err);
        if (rc < 0 || assign_from(ps, group, l, why, sizeof(why)) < 0) {
            log_error("group=%d claimed but not assigned: %s; releasing it", group, why);
            ps->failed[(*nf)++] = group;
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
}

size_t parts_run_asks(struct parts *ps, const int **failed)
{
    rd_kafka_event_t *ev;
    size_t nf = 0;
    int64_t now;

    while ((ev = rd_kafka_queue_poll(ps->asks, 0))) {
        answered(ps, ev, &nf);
        rd_kafka_event_destroy(ev);
    }
    now = clock_mono_ms();
    for (int g = 0; g < ps->cfg->delay.ngroups; g++) {
        struct group_ask *a = &ps->ask[g];
        if (a->asking && a->retry_at && a->retry_at <= now) {
            a->retry_at = 0;
            send_ask(ps, g);
        }
    }
    *failed = ps->failed;
    return nf;
}

int64_t parts_next_ask_ms(const struct parts *ps)
{
    int64_t next = INT64_MAX;

    for (int g = 0; g < ps->cfg->delay.ngroups; g++)
        if (ps->ask[g].asking && ps->ask[g].retry_at && ps->ask[g].retry_at < next)
            next = ps->ask[g].retry_at;
    return next;
}

void parts_unassign(struct parts *ps, int group)
{
    rd_kafka_topic_partition_list_t *l = group_list(ps, group, 1);
    rd_kafka_error_t *e;

    cancel_ask(ps, group);
    if (!ps->ask[group].assigned) {   /* its offsets were still being asked for */
        rd_kafka_topic_partition_list_destroy(l);
        return;
    }
    ps->ask[group].assigned = 0;
    if ((e = rd_kafka_incremental_unassign(ps->rk, l))) {
        log_warn("unassign group=%d: %s", group, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

void parts_quiesce(struct parts *ps, int group)
{
    rd_kafka_topic_partition_list_t *l = group_list(ps, group, 0);

    cancel_ask(ps, group);   /* if not yet assigned, it no longer will be */
    /* Nothing more is read; what was read (waiting here until due, at most the read-ahead) is
     * still forwarded, so that the commit before the release covers every message acted on.
     * Forgotten, the messages after the first of them that had moved down a level would be
     * read again by the next owner and moved, or delivered, a second time. */
    rd_kafka_pause_partitions(ps->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
}

size_t parts_in_flight(const struct parts *ps, int group)
{
    size_t n = 0;

    for (size_t i = 0; i < ps->n; i++)
        if (ps->v[i].group == group)
            n += ps->v[i].in_memory;
    return n;
}

size_t parts_status(const struct parts *ps, int group, struct part_status *out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < ps->n && n < max; i++) {
        const struct part *p = &ps->v[i];
        const char *topic = topic_of(ps, p);
        int64_t lo = -1, hi = -1;
        if (p->group != group)
            continue;
        rd_kafka_get_watermark_offsets(ps->rk, topic, p->partition, &lo, &hi);
        snprintf(out[n].field, sizeof(out[n].field), "%s/%d", topic, p->partition);
        snprintf(out[n].value, sizeof(out[n].value), "%lld %lld %lld",
                 (long long)offsets_commit_point(&p->offs), (long long)(hi >= 0 ? hi : -1),
                 (long long)(p->hold == HOLD_HEAD ? p->resume_at : -1));
        n++;
    }
    return n;
}

void parts_gauges(const struct parts *ps)
{
    int64_t held = 0, in_memory = 0;

    for (size_t i = 0; i < ps->n; i++) {
        held += ps->v[i].hold != HOLD_NONE;
        in_memory += (int64_t)ps->v[i].in_memory;
    }
    metrics_set(M_HELD_PARTITIONS, held);
    metrics_set(M_IN_MEMORY, in_memory);
}
