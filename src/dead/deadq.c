/* deadq: reading the dead-letter topic. The contract is in include/dead/deadq.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "lib/clock.h"
#include "dead/deadq.h"
#include "kafka/offsets.h"
#include "kafka/producer.h"

#define CHUNK 100                 /* letters one read of a partition takes at most */
#define READ_TIMEOUT_MS 10000     /* a read that gets nothing for this long failed */
#define META_TIMEOUT_MS 5000

struct deadq {
    const struct config *cfg;
    rd_kafka_t *rk;
};

/* A partition being read newest first: buf holds letters in offset order; those below head
 * are not yet taken; below end nothing is read yet. */
struct part {
    int32_t id;
    int64_t low, end;
    struct dead_letter *buf;
    size_t nbuf, head;
    int stop;
};

void dead_letter_release(struct dead_letter *l)
{
    for (size_t i = 0; i < l->nhdrs; i++) {
        free(l->hdrs[i].name);
        free(l->hdrs[i].value);
    }
    free(l->hdrs);
    free(l->key);
    free(l->value);
    memset(l, 0, sizeof(*l));
}

void dead_letters_free(struct dead_letter *ls, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dead_letter_release(&ls[i]);
    free(ls);
}

const char *dead_letter_header(const struct dead_letter *l, const char *name, size_t *len)
{
    for (size_t i = l->nhdrs; i-- > 0;) {
        if (strcmp(l->hdrs[i].name, name) == 0) {
            if (len)
                *len = l->hdrs[i].len;
            return l->hdrs[i].value ? l->hdrs[i].value : "";
        }
    }
    return NULL;
}

void deadq_cursor_format(const struct deadq_cursor *c, char *out, size_t outlen)
{
    size_t at = 0;

    out[0] = '\0';
    for (int32_t i = 0; i < c->n && at < outlen; i++)
        at += (size_t)snprintf(out + at, outlen - at, "%s%" PRId64, i ? "." : "", c->end[i]);
}

int deadq_cursor_parse(const char *s, struct deadq_cursor *c)
{
    char *end;

    c->n = 0;
    while (*s) {
        if (c->n >= DEADQ_PARTITIONS_MAX || *s < '0' || *s > '9')
            return -1;
        c->end[c->n++] = strtoll(s, &end, 10);
        if (*end == '.' && end[1])
            end++;
        else if (*end)
            return -1;
        s = end;
    }
    return c->n > 0 ? 0 : -1;
}

struct deadq *deadq_new(const struct config *cfg, char *err, size_t errlen)
{
    const char *const defaults[][2] = {
        { "client.id", "delayq-dead" },
        { "group.id", cfg->kafka.group_id },
        { "enable.auto.commit", "false" },
        { "enable.auto.offset.store", "false" },
        { "enable.partition.eof", "true" },
        { "auto.offset.reset", "earliest" },
        { "fetch.wait.max.ms", "50" },
    };
    struct deadq *dq = calloc(1, sizeof(*dq));
    rd_kafka_conf_t *conf;
    char why[512];

    if (!dq) {
        snprintf(err, errlen, "dead letters: out of memory");
        return NULL;
    }
    dq->cfg = cfg;
    if (!(conf = kafka_conf_build(cfg, defaults, sizeof(defaults) / sizeof(defaults[0]), err,
                                  errlen))) {
        free(dq);
        return NULL;
    }
    if (!(dq->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))) {
        snprintf(err, errlen, "dead letters: kafka consumer: %s", why);
        rd_kafka_conf_destroy(conf);
        free(dq);
        return NULL;
    }
    return dq;
}

void deadq_free(struct deadq *dq)
{
    if (!dq)
        return;
    rd_kafka_destroy(dq->rk);
    free(dq);
}

/* The dead-letter topic's partition count into *n. 0, or -1 with err. */
static int partition_count(struct deadq *dq, int32_t *n, char *err, size_t errlen)
{
    rd_kafka_topic_t *t = rd_kafka_topic_new(dq->rk, dq->cfg->delay.dlq_topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e;

    if (!t) {
        snprintf(err, errlen, "dead letters: out of memory");
        return -1;
    }
    e = rd_kafka_metadata(dq->rk, 0, t, &md, META_TIMEOUT_MS);
    rd_kafka_topic_destroy(t);
    if (e || md->topic_cnt != 1 || md->topics[0].err) {
        snprintf(err, errlen, "the dead-letter topic %s: %s", dq->cfg->delay.dlq_topic,
                 rd_kafka_err2str(e ? e : md->topic_cnt ? md->topics[0].err
                                                        : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        if (md)
            rd_kafka_metadata_destroy(md);
        return -1;
    }
    *n = md->topics[0].partition_cnt;
    if (*n > DEADQ_PARTITIONS_MAX)
        *n = DEADQ_PARTITIONS_MAX;
    rd_kafka_metadata_destroy(md);
    return 0;
}

/* Copies message msg into l. 0, or -1 out of memory. */
static int copy_letter(const rd_kafka_message_t *msg, struct dead_letter *l)
{
    rd_kafka_headers_t *hdrs = NULL;
    rd_kafka_timestamp_type_t tt;
    const char *name;
    const void *value;
    size_t len;

    memset(l, 0, sizeof(*l));
    l->partition = msg->partition;
    l->offset = msg->offset;
    l->ts_ms = rd_kafka_message_timestamp(msg, &tt);
    if (msg->key && (!(l->key = malloc(msg->key_len + 1)) ||
                     !memcpy(l->key, msg->key, msg->key_len)))
        return -1;
    if (l->key) {
        l->key[msg->key_len] = '\0';
        l->key_len = msg->key_len;
    }
    if (msg->payload && (!(l->value = malloc(msg->len + 1)) ||
                         !memcpy(l->value, msg->payload, msg->len)))
        return -1;
    if (l->value) {
        l->value[msg->len] = '\0';
        l->value_len = msg->len;
    }
    if (rd_kafka_message_headers(msg, &hdrs) || !hdrs)
        return 0;
    if (!(l->hdrs = calloc(rd_kafka_header_cnt(hdrs) + 1, sizeof(*l->hdrs))))
        return -1;
    for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &len) == 0; i++) {
        struct dead_header *h = &l->hdrs[l->nhdrs++];
        if (!(h->name = strdup(name)))
            return -1;
        if (value) {
            if (!(h->value = malloc(len + 1)))
                return -1;
            memcpy(h->value, value, len);
            h->value[len] = '\0';
            h->len = len;
        }
    }
    return 0;
}

/* Reads the letters of partition p from offset lo below hi into *out (malloc'd, in offset
 * order, *n of them). 0, or -1 with err. */
static int read_range(struct deadq *dq, int32_t p, int64_t lo, int64_t hi,
                      struct dead_letter **out, size_t *n, char *err, size_t errlen)
{
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(1);
    int64_t deadline = clock_now_ms() + READ_TIMEOUT_MS;
    size_t cap = hi - lo > 0 ? (size_t)(hi - lo) : 1;
    int rc = -1, done = 0;

    *out = NULL;
    *n = 0;
    if (!list || !(*out = calloc(cap, sizeof(**out)))) {
        snprintf(err, errlen, "dead letters: out of memory");
        goto out;
    }
    rd_kafka_topic_partition_list_add(list, dq->cfg->delay.dlq_topic, p)->offset = lo;
    if (rd_kafka_assign(dq->rk, list)) {
        snprintf(err, errlen, "dead letters: cannot read partition %d", (int)p);
        goto out;
    }
    while (!done) {
        int64_t left = deadline - clock_now_ms();
        rd_kafka_message_t *msg;

        if (left <= 0) {
            snprintf(err, errlen, "reading the dead-letter topic's partition %d timed out",
                     (int)p);
            goto unassign;
        }
        if (!(msg = rd_kafka_consumer_poll(dq->rk, (int)(left < 200 ? left : 200))))
            continue;
        if (msg->partition != p) {
            ;   /* left over from an earlier read */
        } else if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            done = 1;
        } else if (msg->err) {
            snprintf(err, errlen, "reading the dead-letter topic: %s",
                     rd_kafka_message_errstr(msg));
            rd_kafka_message_destroy(msg);
            goto unassign;
        } else if (msg->offset >= lo && msg->offset < hi) {
            if (*n < cap && copy_letter(msg, &(*out)[*n]) == 0) {
                (*n)++;
            } else {
                snprintf(err, errlen, "dead letters: out of memory");
                rd_kafka_message_destroy(msg);
                goto unassign;
            }
            done = msg->offset >= hi - 1;
        } else {
            done = msg->offset >= hi;
        }
        rd_kafka_message_destroy(msg);
    }
    rc = 0;
unassign:
    rd_kafka_assign(dq->rk, NULL);
out:
    if (list)
        rd_kafka_topic_partition_list_destroy(list);
    if (rc != 0) {
        dead_letters_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* Reads the next older chunk of pt into its buffer (empty: the partition is read). */
static int refill(struct deadq *dq, struct part *pt, char *err, size_t errlen)
{
    while (pt->head == 0 && !pt->stop && pt->end > pt->low) {
        int64_t start = pt->end - CHUNK > pt->low ? pt->end - CHUNK : pt->low;
        dead_letters_free(pt->buf, pt->nbuf);
        pt->buf = NULL;
        pt->nbuf = 0;
        if (read_range(dq, pt->id, start, pt->end, &pt->buf, &pt->nbuf, err, errlen) < 0)
            return -1;
        pt->head = pt->nbuf;
        pt->end = start;
    }
    return 0;
}

/* A list of partitions 0 .. n-1 of the dead-letter topic, each element's offset field at. */
static rd_kafka_topic_partition_list_t *all_parts(struct deadq *dq, int32_t n, int64_t at)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);

    for (int32_t i = 0; l && i < n; i++)
        rd_kafka_topic_partition_list_add(l, dq->cfg->delay.dlq_topic, i)->offset = at;
    return l;
}

/* The partitions' bounds: from c, or from the newest (below newest_ms when > 0). Two requests
 * (three below newest_ms) whatever the number of partitions. */
static int open_parts(struct deadq *dq, const struct deadq_cursor *c, int64_t newest_ms,
                      struct part *parts, int32_t n, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + META_TIMEOUT_MS;
    rd_kafka_topic_partition_list_t *lo = all_parts(dq, n, RD_KAFKA_OFFSET_BEGINNING),
                                    *hi = all_parts(dq, n, RD_KAFKA_OFFSET_END),
                                    *times = NULL;
    int rc = -1;

    if (!lo || !hi) {
        snprintf(err, errlen, "dead letters: out of memory");
        goto out;
    }
    if (kafka_offsets_answered(kafka_ask_offsets(dq->rk, KAFKA_ASK_TIMES, lo, deadline), lo,
                               "the dead-letter topic's offsets", err, errlen) < 0 ||
        kafka_offsets_answered(kafka_ask_offsets(dq->rk, KAFKA_ASK_TIMES, hi, deadline), hi,
                               "the dead-letter topic's offsets", err, errlen) < 0)
        goto out;
    for (int32_t i = 0; i < n; i++) {
        int64_t low = lo->elems[i].offset, end = hi->elems[i].offset;
        parts[i] = (struct part){ .id = i, .low = low, .end = end };
        if (c->n > 0)
            parts[i].end = i < c->n && c->end[i] < end ? c->end[i] : i < c->n ? end : low;
    }
    rc = 0;
    if (c->n > 0 || newest_ms <= 0)
        goto out;
    if (!(times = all_parts(dq, n, newest_ms + 1))) {
        snprintf(err, errlen, "dead letters: out of memory");
        rc = -1;
        goto out;
    }
    if (kafka_ask_offsets(dq->rk, KAFKA_ASK_TIMES, times, deadline) == 0) {
        for (int i = 0; i < times->cnt; i++) {
            int32_t p = times->elems[i].partition;
            if (p >= 0 && p < n && !times->elems[i].err && times->elems[i].offset >= 0 &&
                times->elems[i].offset < parts[p].end)
                parts[p].end = times->elems[i].offset;
        }
    }
out:
    if (lo)
        rd_kafka_topic_partition_list_destroy(lo);
    if (hi)
        rd_kafka_topic_partition_list_destroy(hi);
    if (times)
        rd_kafka_topic_partition_list_destroy(times);
    return rc;
}

/* The partition whose next letter is the newest, or NULL when all are read. */
static struct part *newest(struct part *parts, int32_t n)
{
    struct part *best = NULL;

    for (int32_t i = 0; i < n; i++) {
        struct part *pt = &parts[i];
        if (pt->head > 0 && !pt->stop &&
            (!best || pt->buf[pt->head - 1].ts_ms > best->buf[best->head - 1].ts_ms))
            best = pt;
    }
    return best;
}

int deadq_page(struct deadq *dq, const struct deadq_cursor *from, int64_t newest_ms, size_t max,
               size_t scan_max, deadq_match_fn *match, void *ctx, struct dead_letter **out,
               size_t *n, struct deadq_cursor *next, int *more, char *err, size_t errlen)
{
    struct part *parts = NULL;
    size_t cap = max ? max : 1, scanned = 0;
    int32_t np;
    int rc = -1;

    *n = 0;
    *more = 0;
    next->n = 0;
    if (!(*out = calloc(cap, sizeof(**out)))) {
        snprintf(err, errlen, "dead letters: out of memory");
        return -1;
    }
    if (partition_count(dq, &np, err, errlen) < 0)
        goto done;
    if (from->n > 0 && from->n != np) {
        snprintf(err, errlen, "before is not a cursor a list or redrive gave: it names %d "
                 "partitions, the dead-letter topic has %d", (int)from->n, (int)np);
        rc = -2;
        goto done;
    }
    if (!(parts = calloc((size_t)np ? (size_t)np : 1, sizeof(*parts)))) {
        snprintf(err, errlen, "dead letters: out of memory");
        goto done;
    }
    if (open_parts(dq, from, newest_ms, parts, np, err, errlen) < 0)
        goto done;
    while (*n < max && scanned < scan_max) {
        struct part *pt;
        struct dead_letter *l;
        int stop = 0;

        for (int32_t i = 0; i < np; i++)
            if (refill(dq, &parts[i], err, errlen) < 0)
                goto done;
        if (!(pt = newest(parts, np)))
            break;
        l = &pt->buf[--pt->head];
        scanned++;
        if (match(ctx, l, &stop)) {
            (*out)[(*n)++] = *l;
            memset(l, 0, sizeof(*l));
        }
        if (stop)
            pt->stop = 1;
    }
    next->n = np;
    for (int32_t i = 0; i < np; i++) {
        struct part *pt = &parts[i];
        next->end[i] = pt->stop ? pt->low : pt->head > 0 ? pt->buf[pt->head - 1].offset + 1
                                                        : pt->end;
        if (next->end[i] > pt->low)
            *more = 1;
    }
    rc = 0;
done:
    for (int32_t i = 0; parts && i < np; i++)
        dead_letters_free(parts[i].buf, parts[i].nbuf);
    free(parts);
    if (rc < 0) {
        dead_letters_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

/* One letter deadq_some is asked for. */
struct want {
    int32_t partition;
    int64_t offset;
    size_t i;           /* its place in the caller's list */
};

static int by_place(const void *a, const void *b)
{
    const struct want *x = a, *y = b;

    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Reads the wanted letters ws[0..n) of one partition (sorted by offset, all below its end)
 * in runs of at most CHUNK offsets: one assign and fetch for each run rather than for each
 * letter. */
static int read_wanted(struct deadq *dq, const struct want *ws, size_t n, struct dead_letter *out,
                       int *found, char *err, size_t errlen)
{
    for (size_t a = 0, b; a < n; a = b) {
        struct dead_letter *ls;
        size_t nl, k = 0;

        for (b = a + 1; b < n && ws[b].offset - ws[a].offset < CHUNK; b++)
            ;
        if (read_range(dq, ws[a].partition, ws[a].offset, ws[b - 1].offset + 1, &ls, &nl, err,
                       errlen) < 0)
            return -1;
        for (size_t j = a; j < b; j++) {
            if (j > a && ws[j].offset == ws[j - 1].offset) {
                found[ws[j].i] = 2;   /* listed before */
                continue;
            }
            while (k < nl && ls[k].offset < ws[j].offset)
                k++;
            if (k < nl && ls[k].offset == ws[j].offset) {
                out[ws[j].i] = ls[k];
                memset(&ls[k], 0, sizeof(ls[k]));
                found[ws[j].i] = 1;
            }
        }
        dead_letters_free(ls, nl);
    }
    return 0;
}

int deadq_some(struct deadq *dq, size_t n, const int32_t *partitions, const int64_t *offsets,
               struct dead_letter *out, int *found, char *err, size_t errlen)
{
    struct want *ws;
    int32_t np;
    int rc = -1;

    memset(out, 0, n * sizeof(*out));
    memset(found, 0, n * sizeof(*found));
    if (n == 0)
        return 0;
    if (partition_count(dq, &np, err, errlen) < 0)
        return -1;
    if (!(ws = malloc(n * sizeof(*ws)))) {
        snprintf(err, errlen, "dead letters: out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        ws[i] = (struct want){ .partition = partitions[i], .offset = offsets[i], .i = i };
    qsort(ws, n, sizeof(*ws), by_place);
    for (size_t a = 0, b; a < n; a = b) {
        int32_t p = ws[a].partition;
        int64_t lo, hi;
        size_t from = a, to;

        for (b = a + 1; b < n && ws[b].partition == p; b++)
            ;
        if (p < 0 || p >= np)
            continue;
        if (rd_kafka_query_watermark_offsets(dq->rk, dq->cfg->delay.dlq_topic, p, &lo, &hi,
                                             META_TIMEOUT_MS) != 0) {
            snprintf(err, errlen, "the dead-letter topic's partition %d did not answer", (int)p);
            goto out;
        }
        while (from < b && ws[from].offset < lo)
            from++;
        for (to = from; to < b && ws[to].offset < hi; to++)
            ;
        if (read_wanted(dq, ws + from, to - from, out, found, err, errlen) < 0)
            goto out;
    }
    rc = 0;
out:
    if (rc < 0) {
        for (size_t i = 0; i < n; i++)
            if (found[i] == 1)
                dead_letter_release(&out[i]);
        memset(found, 0, n * sizeof(*found));
    }
    free(ws);
    return rc;
}

int deadq_one(struct deadq *dq, int32_t partition, int64_t offset, struct dead_letter *out,
              int *found, char *err, size_t errlen)
{
    return deadq_some(dq, 1, &partition, &offset, out, found, err, errlen);
}
