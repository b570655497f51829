/* job: the job model, ids and tags, and the record kept in Redis: its text head and msgpack
 * tail, written at add and read (bounded before msgpack-c allocates) at get and delivery. The
 * contract is in include/core/job.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/job.h"

static const char *const state_names[] = { "pending", "delivering", "delivered", "cancelled", "failed" };
static const char state_letters[] = "psdcf";   /* in enum order */

const char *job_state_name(enum job_state state)
{
    return state_names[state];
}

char job_state_letter(enum job_state state)
{
    return state_letters[state];
}

int job_called_back(const struct job_callback *cb)
{
    return cb->last_status >= 200 && cb->last_status < 300;
}

int job_state_of_letter(char c, enum job_state *out)
{
    const char *p = c ? strchr(state_letters, c) : NULL;

    if (!p)
        return -1;
    *out = (enum job_state)(p - state_letters);
    return 0;
}

static void free_headers(struct job_header *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(h[i].name);
        free(h[i].value);
    }
    free(h);
}

void job_callback_free(struct job_callback *cb)
{
    if (!cb)
        return;
    free(cb->url);
    free(cb->endpoint);
    free_headers(cb->headers, cb->nheaders);
    free(cb->last_error);
    free(cb);
}

void job_sched_free(struct job_sched *s)
{
    if (!s)
        return;
    free(s->id);
    free(s->timing);
    free(s);
}

void job_release(struct job *job)
{
    job_callback_free(job->callback);
    job_sched_free(job->sched);
    free(job->topic);
    free(job->key);
    free(job->body);
    free_headers(job->headers, job->nheaders);
    memset(job, 0, sizeof(*job));
}

int job_id_valid(const char *id, size_t len, char *err, size_t errlen)
{
    if (len == 0) {
        snprintf(err, errlen, "id is empty");
        return -1;
    }
    if (len > JOB_ID_MAX) {
        snprintf(err, errlen, "id is longer than %d characters", JOB_ID_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c <= 0x20 || c >= 0x7f) {
            snprintf(err, errlen, "id may hold only visible ASCII characters (no spaces)");
            return -1;
        }
    }
    return 0;
}

/* Random bytes for ids, from the kernel 1 KiB at a time: one getrandom call per 64 ids rather
 * than a system call on every add. Each thread keeps its own. */
static _Thread_local unsigned char id_pool[1024];
static _Thread_local size_t id_pool_left;

static void random_bytes(unsigned char *out, size_t n)
{
    if (id_pool_left < n) {
        size_t got = 0;
        while (got < sizeof(id_pool)) {
            ssize_t r = getrandom(id_pool + got, sizeof(id_pool) - got, 0);
            if (r > 0)
                got += (size_t)r;
        }
        id_pool_left = sizeof(id_pool);
    }
    id_pool_left -= n;
    memcpy(out, id_pool + id_pool_left, n);
}

void job_new_id(char out[JOB_ID_GEN_LEN + 1])
{
    unsigned char b[16];

    random_bytes(b, sizeof(b));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);   /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);   /* RFC 4122 variant */
    for (int i = 0; i < 16; i++) {   /* 8-4-4-4-12 hex digits */
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *out++ = '-';
        *out++ = "0123456789abcdef"[b[i] >> 4];
        *out++ = "0123456789abcdef"[b[i] & 0xf];
    }
    *out = '\0';
}

void job_new_tag(char out[JOB_TAG_LEN + 1])
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char b[JOB_TAG_LEN];

    random_bytes(b, sizeof(b));
    for (int i = 0; i < JOB_TAG_LEN; i++)
        out[i] = digits[b[i] & 63];
    out[JOB_TAG_LEN] = '\0';
}

int job_deliver_of(const char *s, size_t len, enum job_deliver *out)
{
    if (len == 4 && memcmp(s, "pull", 4) == 0)
        *out = JOB_DELIVER_PULL;
    else if (len == 5 && memcmp(s, "kafka", 5) == 0)
        *out = JOB_DELIVER_KAFKA;
    else
        return -1;
    return 0;
}

static void pack_str(msgpack_packer *pk, const char *s, size_t len)
{
    msgpack_pack_str(pk, len);
    msgpack_pack_str_body(pk, s, len);
}

static void pack_headers(msgpack_packer *pk, const struct job_header *h, size_t n)
{
    msgpack_pack_map(pk, n);
    for (size_t i = 0; i < n; i++) {
        pack_str(pk, h[i].name, strlen(h[i].name));
        pack_str(pk, h[i].value, strlen(h[i].value));
    }
}

/* A key of the callback map, then its value: a string (left off when NULL) or a number (left
 * off when 0). The map's size is counted first, with count set. */
static void pack_kv_str(msgpack_packer *pk, const char *k, const char *v, int *count)
{
    if (!v)
        return;
    if (count) {
        (*count)++;
        return;
    }
    pack_str(pk, k, strlen(k));
    pack_str(pk, v, strlen(v));
}

static void pack_kv_int(msgpack_packer *pk, const char *k, int64_t v, int *count)
{
    if (!v)
        return;
    if (count) {
        (*count)++;
        return;
    }
    pack_str(pk, k, strlen(k));
    msgpack_pack_int64(pk, v);
}

/* The callback's fields, into pk, or counted into *count when count is not NULL. Short keys:
 * a record holds one. */
static void callback_fields(msgpack_packer *pk, const struct job_callback *cb, int *count)
{
    pack_kv_str(pk, "u", cb->url, count);
    pack_kv_str(pk, "e", cb->endpoint, count);
    pack_kv_int(pk, "m", cb->put, count);
    pack_kv_int(pk, "t", cb->timeout_ms, count);
    pack_kv_int(pk, "ra", cb->max_attempts, count);
    pack_kv_int(pk, "rn", cb->min_backoff_ms, count);
    pack_kv_int(pk, "rx", cb->max_backoff_ms, count);
    pack_kv_int(pk, "rd", cb->max_retry_duration_ms, count);
    pack_kv_int(pk, "a", cb->attempts, count);
    pack_kv_int(pk, "s", cb->last_status, count);
    pack_kv_str(pk, "x", cb->last_error, count);
    pack_kv_int(pk, "f", cb->first_ms, count);
    pack_kv_int(pk, "k", cb->sent, count);
    if (!cb->nheaders)
        return;
    if (count) {
        (*count)++;
        return;
    }
    pack_str(pk, "h", 1);
    pack_headers(pk, cb->headers, cb->nheaders);
}

static void pack_callback(msgpack_packer *pk, const struct job_callback *cb)
{
    int n = 0;

    callback_fields(pk, cb, &n);
    msgpack_pack_map(pk, (size_t)n);
    callback_fields(pk, cb, NULL);
}

/* The schedule reference: {s: id, g: generation, q: runs before, t: timing JSON}. */
static void pack_sched(msgpack_packer *pk, const struct job_sched *sc)
{
    msgpack_pack_map(pk, sc->prev_ms > 0 ? 5 : 4);
    pack_str(pk, "s", 1);
    pack_str(pk, sc->id, strlen(sc->id));
    pack_str(pk, "g", 1);
    msgpack_pack_int64(pk, sc->gen);
    pack_str(pk, "q", 1);
    msgpack_pack_int64(pk, sc->runs);
    pack_str(pk, "t", 1);
    pack_str(pk, sc->timing, strlen(sc->timing));
    if (sc->prev_ms > 0) {
        pack_str(pk, "p", 1);
        msgpack_pack_int64(pk, sc->prev_ms);
    }
}

/* A pending record of job, its stamp field empty (until_ms < 0) or until_ms. */
static int record_pack(const struct job *job, int64_t until_ms, msgpack_sbuffer *buf)
{
    msgpack_packer pk;
    char head[64], until[24] = "";
    int n;

    if (until_ms >= 0)
        snprintf(until, sizeof(until), "%lld", (long long)until_ms);
    n = snprintf(head, sizeof(head), "%c%lld|%s|%s|", job_state_letter(JOB_PENDING),
                 (long long)job->due_ms, until, job->tag[0] ? job->tag : JOB_CLAIM_ROOM);

    if (msgpack_sbuffer_write(buf, head, (size_t)n) < 0)
        return -1;
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    /* elements after the headers: a ttr counts without deliver too (a topic of pull.topics) */
    int more = job->deliver || job->ttr_ms || job->callback || job->sched || job->max_pops;

    msgpack_pack_array(&pk, job->max_pops ? 10 : job->sched ? 9 : job->callback ? 8 : more ? 7
                            : job->nheaders ? 5 : job->key ? 4 : 3);
    pack_str(&pk, job->topic, strlen(job->topic));
    pack_str(&pk, job->body, job->body_len);
    msgpack_pack_int64(&pk, job->delay_ms);
    if (!job->key && !job->nheaders && !more)
        return 0;
    if (job->key)
        pack_str(&pk, job->key, strlen(job->key));
    else
        msgpack_pack_nil(&pk);
    if (!job->nheaders && !more)
        return 0;
    pack_headers(&pk, job->headers, job->nheaders);
    if (!more)
        return 0;
    msgpack_pack_int(&pk, (int)job->deliver);
    msgpack_pack_int64(&pk, job->ttr_ms);
    if (job->callback)
        pack_callback(&pk, job->callback);
    else if (job->sched || job->max_pops)
        msgpack_pack_nil(&pk);
    if (job->sched)
        pack_sched(&pk, job->sched);
    else if (job->max_pops)
        msgpack_pack_nil(&pk);
    if (job->max_pops)
        msgpack_pack_int64(&pk, job->max_pops);
    return 0;
}

int job_record_pack(const struct job *job, msgpack_sbuffer *buf)
{
    return record_pack(job, -1, buf);
}

int job_record_pack_moved(const struct job *job, int64_t until_ms, msgpack_sbuffer *buf)
{
    return record_pack(job, until_ms, buf);
}

/* Copies a msgpack string into a fresh NUL-terminated buffer. */
static char *dup_str(const msgpack_object *o, size_t *len)
{
    char *s;

    if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
        return NULL;
    s = malloc(o->via.str.size + 1);
    if (!s)
        return NULL;
    if (o->via.str.size)   /* msgpack-c gives an empty string no pointer */
        memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    if (len)
        *len = o->via.str.size;
    return s;
}

static int unpack_headers(const msgpack_object *o, struct job_header **out, size_t *n)
{
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > JOB_HEADERS_MAX)
        return -1;
    *out = calloc(o->via.map.size ? o->via.map.size : 1, sizeof(**out));
    if (!*out)
        return -1;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        struct job_header *h = &(*out)[*n];
        h->name = dup_str(&o->via.map.ptr[i].key, NULL);
        h->value = dup_str(&o->via.map.ptr[i].val, NULL);
        (*n)++;
        if (!h->name || !h->value)
            return -1;
    }
    return 0;
}

/* 1 when msgpack string o is k. */
static int key_is(const msgpack_object *o, const char *k)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(k) &&
           memcmp(o->via.str.ptr, k, o->via.str.size) == 0;
}

/* The schedule reference (pack_sched) into out->sched; -1 when it is not one. */
static int unpack_sched(const msgpack_object *o, struct job *out)
{
    struct job_sched *sc;

    if (o->type != MSGPACK_OBJECT_MAP || !(sc = out->sched = calloc(1, sizeof(*sc))))
        return -1;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
        if (key_is(k, "s") && !sc->id)
            sc->id = dup_str(v, NULL);
        else if (key_is(k, "t") && !sc->timing)
            sc->timing = dup_str(v, NULL);
        else if ((key_is(k, "g") || key_is(k, "q") || key_is(k, "p")) &&
                 v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            *(key_is(k, "g") ? &sc->gen : key_is(k, "q") ? &sc->runs : &sc->prev_ms) =
                (int64_t)v->via.u64;
    }
    return sc->id && sc->timing ? 0 : -1;
}

/* One entry of the callback map into cb; -1 when its value is not of its key's type. Unknown
 * keys are skipped (a later delayqd's). */
static int unpack_callback_entry(const msgpack_object *k, const msgpack_object *v,
                                 struct job_callback *cb)
{
    static const char *const ints[] = { "m", "t", "ra", "rn", "rx", "rd", "a", "s", "f", "k" };
    int64_t *const ptr[] = { NULL, &cb->timeout_ms, &cb->max_attempts, &cb->min_backoff_ms,
                             &cb->max_backoff_ms, &cb->max_retry_duration_ms, NULL, NULL,
                             &cb->first_ms, NULL };
    int64_t n;

    if (key_is(k, "u"))
        return (cb->url = dup_str(v, NULL)) ? 0 : -1;
    if (key_is(k, "e"))
        return (cb->endpoint = dup_str(v, NULL)) ? 0 : -1;
    if (key_is(k, "x"))
        return (cb->last_error = dup_str(v, NULL)) ? 0 : -1;
    if (key_is(k, "h"))
        return unpack_headers(v, &cb->headers, &cb->nheaders);
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (!key_is(k, ints[i]))
            continue;
        if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > INT32_MAX * 1000000ULL)
            return -1;
        n = (int64_t)v->via.u64;
        if (ptr[i])
            *ptr[i] = n;
        else if (i == 0)
            cb->put = n != 0;
        else if (i == 6)
            cb->attempts = (int)(n < INT32_MAX ? n : INT32_MAX);
        else if (i == 7)
            cb->last_status = (int)(n < 1000 ? n : 0);
        else
            cb->sent = n != 0;
        return 0;
    }
    return 0;
}

static int unpack_callback(const msgpack_object *o, struct job *out)
{
    if (o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_MAP || !(out->callback = calloc(1, sizeof(*out->callback))))
        return -1;
    for (uint32_t i = 0; i < o->via.map.size; i++)
        if (unpack_callback_entry(&o->via.map.ptr[i].key, &o->via.map.ptr[i].val, out->callback) < 0)
            return -1;
    return out->callback->url || out->callback->endpoint ? 0 : -1;
}

/* Reads a decimal number of at most 18 digits (up to the next '|') at *p; empty gives -1. */
static int head_number(const char **p, const char *end, int64_t *out)
{
    int64_t v = 0;
    int digits = 0;

    while (*p < end && **p >= '0' && **p <= '9' && digits < 18) {
        v = v * 10 + (**p - '0');
        (*p)++;
        digits++;
    }
    if (*p >= end || **p != '|')
        return -1;
    (*p)++;
    *out = digits ? v : -1;
    return 0;
}

/* The head of a record: state, due, stamp, claim (a pending record's tag). Returns the tail, or
 * NULL with err set. */
static const char *read_head(const char *v, size_t len, struct job *out, struct job_record *rec,
                             char *err, size_t errlen)
{
    const char *p = v + 1, *end = v + len, *claim;

    if (len == 0 || job_state_of_letter(v[0], &rec->state) < 0) {
        snprintf(err, errlen, "record has no valid state letter");
        return NULL;
    }
    if (p < end && *p == '|') {
        snprintf(err, errlen, "record head has no due time");
        return NULL;
    }
    if (head_number(&p, end, &out->due_ms) < 0 || head_number(&p, end, &rec->stamp_ms) < 0) {
        snprintf(err, errlen, "record head is not <state><due_ms>|<stamp_ms>|<claim>|");
        return NULL;
    }
    claim = p;
    while (p < end && *p != '|')   /* the claim: the scripts' business, but for the tag */
        p++;
    if (p >= end) {
        snprintf(err, errlen, "record head has no end");
        return NULL;
    }
    if (rec->state == JOB_PENDING && p - claim == JOB_TAG_LEN &&
        memcmp(claim, JOB_CLAIM_ROOM, JOB_TAG_LEN) != 0) {
        memcpy(rec->tag, claim, JOB_TAG_LEN);
        rec->tag[JOB_TAG_LEN] = '\0';
    }
    return p + 1;
}

/* Where the fields of a record's tail are; key and headers NULL when left off. */
struct tail_fields {
    const msgpack_object *topic, *body, *delay, *key, *headers, *deliver, *ttr, *callback, *sched,
        *max_pops;
};

/* Finds the fields of tail a: [topic, body, delay_ms, key, {headers}], the key and headers
 * left off when there are none, or (written before the claim room) [topic, body, key or nil,
 * {headers}, delay_ms]. Later elements are ignored. -1 when a is neither. */
static int find_tail_fields(const msgpack_object *a, struct tail_fields *f)
{
    const msgpack_object *e;
    uint32_t n;

    if (a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size < 3)
        return -1;
    e = a->via.array.ptr;
    n = a->via.array.size;
    *f = (struct tail_fields){ &e[0], &e[1], NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    if (e[2].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        f->delay = &e[2];
        f->key = n > 3 ? &e[3] : NULL;
        f->headers = n > 4 ? &e[4] : NULL;
        f->deliver = n > 6 ? &e[5] : NULL;
        f->ttr = n > 6 ? &e[6] : NULL;
        f->callback = n > 7 && e[7].type != MSGPACK_OBJECT_NIL ? &e[7] : NULL;
        f->sched = n > 8 && e[8].type != MSGPACK_OBJECT_NIL ? &e[8] : NULL;
        f->max_pops = n > 9 ? &e[9] : NULL;
        return 0;
    }
    if (n < 5)
        return -1;
    f->key = &e[2];
    f->headers = &e[3];
    f->delay = &e[4];
    return 0;
}

/* The fields of a record's tail into out; the name of the one at fault, or NULL. */
static const char *read_tail(const struct tail_fields *f, struct job *out)
{
    if (!(out->topic = dup_str(f->topic, NULL)))
        return "topic";
    if (!(out->body = dup_str(f->body, &out->body_len)))
        return "body";
    if (f->key && f->key->type != MSGPACK_OBJECT_NIL && !(out->key = dup_str(f->key, NULL)))
        return "key";
    if (f->headers && unpack_headers(f->headers, &out->headers, &out->nheaders) < 0)
        return "headers";
    if (f->delay->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        f->delay->via.u64 > (uint64_t)out->due_ms)
        return "delay_ms";   /* never negative, never before the epoch */
    out->delay_ms = (int64_t)f->delay->via.u64;
    out->created_ms = out->due_ms - out->delay_ms;
    if (!f->deliver)
        return NULL;
    if (f->deliver->type != MSGPACK_OBJECT_POSITIVE_INTEGER || f->deliver->via.u64 > JOB_DELIVER_PULL)
        return "deliver";
    out->deliver = (enum job_deliver)f->deliver->via.u64;
    if (f->ttr->type != MSGPACK_OBJECT_POSITIVE_INTEGER || f->ttr->via.u64 > JOB_TTR_MAX_MS)
        return "ttr_ms";
    out->ttr_ms = (int64_t)f->ttr->via.u64;
    if (f->callback && unpack_callback(f->callback, out) < 0)
        return "callback";
    if (f->sched && unpack_sched(f->sched, out) < 0)
        return "schedule";
    if (f->max_pops) {
        const msgpack_object *m = f->max_pops;
        if (m->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && m->via.i64 == JOB_POPS_NO_LIMIT)
            out->max_pops = JOB_POPS_NO_LIMIT;
        else if (m->type == MSGPACK_OBJECT_POSITIVE_INTEGER && m->via.u64 <= JOB_POPS_MAX)
            out->max_pops = (int64_t)m->via.u64;
        else
            return "max_pops";
    }
    return NULL;
}

/* Big-endian unsigned of n (1, 2 or 4) bytes at p. */
static uint32_t be(const unsigned char *p, int n)
{
    uint32_t v = 0;

    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The reason a failed record may carry after its tail (a msgpack string), into rec->error, cut
 * to fit; anything else there is ignored, as later tail elements are. */
static void read_error(const unsigned char *p, size_t len, struct job_record *rec)
{
    size_t hdr = 0, n = 0;

    if (len >= 1 && p[0] >= 0xa0 && p[0] <= 0xbf)
        hdr = 1, n = p[0] & 0x1f;
    else if (len >= 2 && p[0] == 0xd9)
        hdr = 2, n = p[1];
    else if (len >= 3 && p[0] == 0xda)
        hdr = 3, n = be(p + 1, 2);
    if (!hdr || n > len - hdr)
        return;
    n = n < JOB_ERROR_MAX ? n : JOB_ERROR_MAX;
    memcpy(rec->error, p + hdr, n);
    rec->error[n] = '\0';
}

/* What follows a msgpack type byte from 0xc0 to 0xdf: hdr bytes, which are the value itself
 * (M_FIXED) or a big-endian count of payload bytes (M_BYTES; M_EXT has a type byte more) or of
 * elements (M_ARRAY; M_MAP has two per entry). */
enum mp_kind { M_BAD, M_FIXED, M_BYTES, M_EXT, M_ARRAY, M_MAP };
static const struct { unsigned char hdr, kind; } mp_ext[32] = {
    { 0, M_FIXED }, { 0, M_BAD }, { 0, M_FIXED }, { 0, M_FIXED },         /* nil, -, false, true */
    { 1, M_BYTES }, { 2, M_BYTES }, { 4, M_BYTES },                       /* bin 8/16/32 */
    { 1, M_EXT }, { 2, M_EXT }, { 4, M_EXT },                             /* ext 8/16/32 */
    { 4, M_FIXED }, { 8, M_FIXED },                                       /* float 32/64 */
    { 1, M_FIXED }, { 2, M_FIXED }, { 4, M_FIXED }, { 8, M_FIXED },       /* uint 8-64 */
    { 1, M_FIXED }, { 2, M_FIXED }, { 4, M_FIXED }, { 8, M_FIXED },       /* int 8-64 */
    { 2, M_FIXED }, { 3, M_FIXED }, { 5, M_FIXED }, { 9, M_FIXED }, { 17, M_FIXED },   /* fixext */
    { 1, M_BYTES }, { 2, M_BYTES }, { 4, M_BYTES },                       /* str 8/16/32 */
    { 2, M_ARRAY }, { 4, M_ARRAY }, { 2, M_MAP }, { 4, M_MAP },
};

/* Walks the msgpack object at p without decoding it and stores its length in *used. -1 when
 * it is cut short, malformed, or claims more elements than its bytes could hold: msgpack-c
 * allocates room for every element a header claims before reading one, so a 20-byte record
 * claiming 2^32 elements would ask for 96 GiB. Every element takes at least one byte, so the
 * count of elements still to come never exceeds the bytes left. */
static int msgpack_bounded(const unsigned char *p, size_t len, size_t *used)
{
    size_t at = 0;
    uint64_t todo = 1;   /* elements still to walk */

    while (todo > 0) {
        uint64_t n = 0, skip = 0;   /* elements this one adds; its payload bytes */
        unsigned c;

        if (at >= len)
            return -1;
        c = p[at++];
        todo--;
        if (c >= 0x80 && c <= 0x8f) {
            n = 2 * (uint64_t)(c & 0x0f);
        } else if (c >= 0x90 && c <= 0x9f) {
            n = c & 0x0f;
        } else if (c >= 0xa0 && c <= 0xbf) {
            skip = c & 0x1f;
        } else if (c >= 0xc0 && c <= 0xdf) {
            unsigned hdr = mp_ext[c - 0xc0].hdr, kind = mp_ext[c - 0xc0].kind;
            uint64_t v;
            if (kind == M_BAD || len - at < hdr)
                return -1;
            if (kind == M_FIXED) {
                skip = hdr;
            } else {
                v = be(p + at, (int)hdr);
                at += hdr;
                skip = kind == M_BYTES ? v : kind == M_EXT ? v + 1 : 0;
                n = kind == M_ARRAY ? v : kind == M_MAP ? 2 * v : 0;
            }
        }   /* else a fixint: the type byte is all */
        if (skip > len - at)
            return -1;
        at += (size_t)skip;
        todo += n;
        if (todo > len - at)
            return -1;
    }
    *used = at;
    return 0;
}

size_t job_record_head_len(const char *v, size_t len)
{
    struct job job = { .id = "" };
    struct job_record rec;
    char err[8];
    const char *tail = read_head(v, len, &job, &rec, err, sizeof(err));

    return tail ? (size_t)(tail - v) : 0;
}

int job_record_read(const char *id, const char *v, size_t len, struct job *out,
                    struct job_record *rec, char *err, size_t errlen)
{
    msgpack_unpacked u;
    const char *tail, *bad;
    struct tail_fields f;
    size_t off = 0;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    memset(rec, 0, sizeof(*rec));
    if (job_id_valid(id, strlen(id), err, errlen) < 0)
        return -1;
    snprintf(out->id, sizeof(out->id), "%s", id);
    if (!(tail = read_head(v, len, out, rec, err, errlen)))
        return -1;
    msgpack_unpacked_init(&u);
    if (msgpack_bounded((const unsigned char *)tail, (size_t)(v + len - tail), &off) < 0 ||
        (off = 0, msgpack_unpack_next(&u, tail, (size_t)(v + len - tail), &off)) != MSGPACK_UNPACK_SUCCESS ||
        find_tail_fields(&u.data, &f) < 0) {
        snprintf(err, errlen, "record tail is not a msgpack array [topic, body, delay_ms, ...]");
        goto out;
    }
    if ((bad = read_tail(&f, out))) {
        snprintf(err, errlen, "record field %s is malformed", bad);
        goto out;
    }
    read_error((const unsigned char *)tail + off, (size_t)(v + len - tail) - off, rec);
    rc = 0;
out:
    msgpack_unpacked_destroy(&u);
    return rc;
}
