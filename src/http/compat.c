/* compat: the routes of ouqiang/delay-queue and changsongl/delay-queue, translated into the
 * jobs module's requests and its answers back, byte for byte as those servers (Go's
 * encoding/json) write theirs. The contract is in include/http/compat.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <gnutls/crypto.h>
#include <jansson.h>

#include "http/compat.h"
#include "core/decide.h"
#include "core/gojson.h"
#include "core/levels.h"
#include "lib/clock.h"

/* ouqiang's words, kept as its clients may show or match them. */
#define OQ_ADDED "添加成功"
#define OQ_OK "操作成功"
#define OQ_POP_FAILED "获取Job失败"
#define OQ_REMOVE_FAILED "删除失败"
#define OQ_BAD_JSON "解析json失败"
#define OQ_NO_ID "job id不能为空"
#define OQ_NO_PUSH_TOPIC "topic 不能为空"
#define OQ_NO_POP_TOPIC "topic不能为空"
#define OQ_BAD_DELAY "delay 取值范围1 - (2^31 - 1)"
#define OQ_BAD_TTR "ttr 取值范围1 - 86400"
#define OQ_DELAY_MAX (1LL << 31)
#define OQ_TTR_MAX 86400
#define OQ_TYPE "text/plain; charset=utf-8"   /* Go's net/http sniffs it so */

/* changsongl's words (gin's validator and its store's). */
#define CS_OK "ok"
#define CS_EXISTS "job is exists"
#define CS_NOT_EXISTS "job is not exists"
#define CS_ID_MAX 200                          /* characters */
#define CS_TOPIC_MAX 50
#define CS_TYPE "application/json; charset=utf-8"
#define CS_NO_ID "body invalid: Key: 'addParam.idParam.ID' Error:Field validation for 'ID' failed " \
                 "on the 'required' tag"
#define CS_LONG_ID "body invalid: Key: 'addParam.idParam.ID' Error:Field validation for 'ID' failed " \
                   "on the 'max' tag"
#define CS_LONG_TOPIC "uri invalid: Key: 'topicParam.Topic' Error:Field validation for 'Topic' " \
                      "failed on the 'max' tag"

/* An id that is no job id as it stands (or a changsongl one, which lives in its topic) is kept
 * under one made of its digest, the id itself in the job's key. */
#define OQ_HASHED "oq~"
#define CS_HASHED "cs~"
#define HASHED_HEX 40

enum verb { PUSH, PUSH_FORGET, PUSH_AGAIN, POP, REMOVE, GET, CS_ADD, CS_REPLACE, CS_REPLACE_FORGET,
            CS_REPLACE_ADD, CS_POP, CS_FINISH };

/* A pull job to add, as a route read it: the id as the client gave it and the job's own. */
struct add {
    char id[JOB_ID_MAX + 1];    /* the job's id (compat_job_id) */
    char *given;                /* the client's id (owned) */
    char topic[TOPIC_NAME_MAX + 1];
    char *body;                 /* owned */
    size_t body_len;
    json_int_t delay, ttr;      /* seconds; ttr 0: handed out once */
    int64_t max_pops;           /* receives before the dead letters (job.max_pops) */
};

/* A protocol's compat.*_max_attempts as a job's max_pops: 0 is no limit there. */
static int64_t pops_limit(int64_t max_attempts)
{
    return max_attempts ? max_attempts : JOB_POPS_NO_LIMIT;
}

/* A request on its way through the jobs module: whose answer to translate, and how. */
struct call {
    enum verb verb;
    compat_done_fn done;
    answer_wanted_fn wanted;    /* a pop's: is its asker still there */
    void *opaque;
    struct intake *jobs;
    const struct config *cfg;   /* a get's: which jobs are pull jobs */
    char topic[TOPIC_NAME_MAX + 1];   /* changsongl's: the path's */
    struct add add;             /* a push's or add's, kept for its next step */
};

static void call_free(struct call *c)
{
    free(c->add.given);
    free(c->add.body);
    free(c);
}

/* The answer_wanted_fn of a pop on its way: its asker's. */
static int call_wanted(void *opaque)
{
    struct call *c = opaque;

    return !c->wanted || c->wanted(c->opaque);
}

/* ---- ids ---- */

static size_t runes(const char *s, size_t n)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* The job id of a compat id into out: ouqiang's (topic NULL) as it is when it is a job id, else
 * OQ_HASHED and its digest; changsongl's "<topic>/<id>" (no topic holds a '/'), else CS_HASHED and
 * the digest of topic, NUL, id. 0, or -1 (the digest failed). */
static int compat_job_id(const char *topic, const char *id, size_t len, char out[JOB_ID_MAX + 1])
{
    unsigned char digest[32];
    char err[128], *in;
    size_t tlen = topic ? strlen(topic) : 0, n = topic ? tlen + 1 + len : len;
    int rc;

    if (!topic && !memchr(id, '\0', len) && job_id_valid(id, len, err, sizeof(err)) == 0) {
        snprintf(out, JOB_ID_MAX + 1, "%s", id);
        return 0;
    }
    if (topic && n <= JOB_ID_MAX) {
        snprintf(out, JOB_ID_MAX + 1, "%s/%.*s", topic, (int)len, id);
        if (!memchr(id, '\0', len) && job_id_valid(out, n, err, sizeof(err)) == 0)
            return 0;
    }
    if (!(in = malloc(n + 1)))
        return -1;
    if (topic)
        memcpy(in, topic, tlen + 1);
    memcpy(in + (topic ? tlen + 1 : 0), id, len);
    rc = gnutls_hash_fast(GNUTLS_DIG_SHA256, in, n, digest);
    free(in);
    if (rc < 0)
        return -1;
    strcpy(out, topic ? CS_HASHED : OQ_HASHED);
    for (int i = 0; i < HASHED_HEX / 2; i++)
        sprintf(out + 3 + 2 * i, "%02x", digest[i]);
    return 0;
}

/* The id a compat client knows a job (as the jobs module answers it) by: its key for a hashed
 * id, the part after "<topic>/" for a changsongl one of topic, else its id. */
static json_t *given_id(json_t *job, const char *topic)
{
    json_t *id = json_object_get(job, "id"), *key = json_object_get(job, "key");
    const char *s = json_string_value(id);
    size_t tlen = topic ? strlen(topic) : 0;

    if (!s)
        return json_string("");
    if ((strncmp(s, OQ_HASHED, 3) == 0 || strncmp(s, CS_HASHED, 3) == 0) && key)
        return json_incref(key);
    if (topic && strncmp(s, topic, tlen) == 0 && s[tlen] == '/')
        return json_string(s + tlen + 1);
    return json_incref(id);
}

/* ---- answers ---- */

/* changsongl's answer {"data"?, "message", "success"} (gin writes a Go map: keys sorted). */
static void cs_reply(struct call *c, int success, const char *msg, json_t *data, int with_data)
{
    json_t *r = json_pack("{s:b, s:s}", "success", success, "message", msg);

    if (with_data && r)
        json_object_set_new(r, "data", data ? data : json_null());
    else
        json_decref(data);
    c->done(c->opaque, 200, r ? gojson_dumps(r, 1) : NULL, CS_TYPE);
    json_decref(r);
}

/* ouqiang's answer {"code", "message", "data"} (a Go struct: in this order), HTTP 200 always
 * (takes data; NULL: null). */
static void oq_reply(compat_done_fn done, void *opaque, int code, const char *msg, json_t *data)
{
    json_t *r = json_pack("{s:i, s:s, s:o}", "code", code, "message", msg,
                          "data", data ? data : json_null());

    done(opaque, 200, r ? gojson_dumps(r, 0) : NULL, OQ_TYPE);
    json_decref(r);
}

/* out, with from's body_encoding when it has one (a body that is not UTF-8, as base64). */
static json_t *with_encoding(json_t *out, json_t *from)
{
    json_t *enc = json_object_get(from, "body_encoding");

    if (out && enc)
        json_object_set(out, "body_encoding", enc);
    return out;
}

/* A popped job as changsongl answers it: its own delay and ttr, in seconds, as added. */
static json_t *cs_popped(json_t *job, const char *topic)
{
    json_int_t ttr = json_integer_value(json_object_get(job, "ttr_ms"));

    return with_encoding(json_pack("{s:O, s:I, s:o, s:O, s:I}", "body", json_object_get(job, "body"),
                                   "delay", json_integer_value(json_object_get(job, "delay_ms")) / 1000,
                                   "id", given_id(job, topic), "topic", json_object_get(job, "topic"),
                                   "ttr", ttr == JOB_TTR_ONCE_MS ? 0 : ttr / 1000), job);
}

/* 1 when the job a get answered (data) is a pull job, of topic when it is not NULL: the jobs
 * the compatibility routes' queues hold; any other is none of theirs to show or replace. */
static int pull_job(const struct config *cfg, json_t *data, const char *topic)
{
    const char *t = json_string_value(json_object_get(data, "topic")),
               *d = json_string_value(json_object_get(data, "deliver"));
    enum job_deliver deliver = !d ? JOB_DELIVER_AUTO : strcmp(d, "pull") == 0 ? JOB_DELIVER_PULL
                                                                           : JOB_DELIVER_KAFKA;

    return cfg && t && decide_pulls(cfg, t, strlen(t), deliver) && (!topic || !strcmp(t, topic));
}

/* 1 for the states of a job its queue would still hold. */
static int live(const char *state)
{
    static const char *const states[] = { "pending", "delivering", "ready", "reserved" };

    for (size_t i = 0; state && i < sizeof(states) / sizeof(states[0]); i++)
        if (strcmp(state, states[i]) == 0)
            return 1;
    return 0;
}

static void send_add(struct call *c, int override);

/* The jobs module's answer, translated; or the request's next step. */
static void answered(void *opaque, const struct answer *a)
{
    struct call *c = opaque;
    json_t *data = a->data, *job = json_array_get(json_object_get(data, "jobs"), 0);
    int ok = a->is == ANSWER_DONE || a->is == ANSWER_ALREADY || a->is == ANSWER_NO_JOB;
    int taken = a->is == ANSWER_EXISTS || a->is == ANSWER_ALREADY;
    int is_live = ok && data && live(json_string_value(json_object_get(data, "state")));

    switch (c->verb) {
    case PUSH:   /* a job of the id is there: a pull job is forgotten, then replaced */
        if (taken) {
            c->verb = PUSH_FORGET;
            intake_forget(c->jobs, c->add.id, NULL, answered, c);
            return;
        }
        /* fall through */
    case PUSH_AGAIN:
        oq_reply(c->done, c->opaque, a->is == ANSWER_DONE ? 0 : 1,
                 a->is == ANSWER_DONE ? OQ_ADDED : a->message, NULL);
        break;
    case PUSH_FORGET:
        if (a->is == ANSWER_FAILED || a->status >= 500) {
            oq_reply(c->done, c->opaque, 1, a->message, NULL);
            break;
        }
        /* the pull job is gone, record and all; no job left alone means one of another kind
         * (for Kafka, a callback) holds the id, or none now: the add replaces nothing */
        c->verb = PUSH_AGAIN;
        send_add(c, a->is != ANSWER_NO_JOB);
        return;
    case POP:
        if (!ok)
            oq_reply(c->done, c->opaque, 1, OQ_POP_FAILED, NULL);
        else
            oq_reply(c->done, c->opaque, 0, OQ_OK,
                     job ? with_encoding(json_pack("{s:o, s:O}", "id", given_id(job, NULL), "body",
                                                   json_object_get(job, "body")), job)
                         : NULL);
        break;
    case REMOVE:
        /* ouqiang answers success whatever the job was; only a failure to reach Redis is not */
        oq_reply(c->done, c->opaque, a->is == ANSWER_FAILED,
                 a->is == ANSWER_FAILED ? OQ_REMOVE_FAILED : OQ_OK, NULL);
        break;
    case GET:
        if (!ok)
            oq_reply(c->done, c->opaque, 1, a->message, NULL);
        else if (!is_live || !pull_job(c->cfg, data, NULL))   /* gone once finished or deleted */
            oq_reply(c->done, c->opaque, 0, OQ_OK, NULL);
        else
            oq_reply(c->done, c->opaque, 0, OQ_OK, with_encoding(
                     json_pack("{s:O, s:o, s:I, s:I, s:O}", "topic", json_object_get(data, "topic"),
                               "id", given_id(data, NULL), "delay",
                               json_integer_value(json_object_get(data, "exec_time")), "ttr",
                               json_integer_value(json_object_get(data, "ttr_ms")) / 1000, "body",
                               json_object_get(data, "body")), data));
        break;
    case CS_ADD: case CS_REPLACE_ADD:
        if (a->status >= 500 || a->is == ANSWER_FAILED)
            cs_reply(c, 0, a->message, NULL, 0);
        else
            cs_reply(c, a->is == ANSWER_DONE, a->is == ANSWER_DONE ? CS_OK : taken ? CS_EXISTS
                                                                               : a->message, NULL, 0);
        break;
    case CS_REPLACE:   /* the get: only a job that is there is replaced */
        if (a->is == ANSWER_FAILED || a->status >= 500)
            cs_reply(c, 0, a->message, NULL, 0);
        else if (!is_live || !pull_job(c->cfg, data, c->topic))
            cs_reply(c, 0, CS_NOT_EXISTS, NULL, 0);
        else {
            c->verb = CS_REPLACE_FORGET;
            intake_forget(c->jobs, c->add.id, c->topic, answered, c);
        }
        return;
    case CS_REPLACE_FORGET:
        if (a->is == ANSWER_FAILED || a->status >= 500)
            cs_reply(c, 0, a->message, NULL, 0);
        else {
            c->verb = CS_REPLACE_ADD;
            send_add(c, 0);
        }
        return;
    case CS_POP:
        if (!ok || a->status >= 500)
            cs_reply(c, 0, a->message, NULL, 0);
        else
            cs_reply(c, 1, CS_OK, job ? cs_popped(job, c->topic) : NULL, 1);
        break;
    case CS_FINISH:
        if (a->is == ANSWER_FAILED || a->status >= 500)
            cs_reply(c, 0, a->message, NULL, 0);
        else
            cs_reply(c, a->is == ANSWER_DONE || a->is == ANSWER_ALREADY,
                     a->is == ANSWER_DONE || a->is == ANSWER_ALREADY ? CS_OK : CS_NOT_EXISTS, NULL, 0);
        break;
    }
    call_free(c);
}

static struct call *call_new(enum verb verb, struct intake *jobs, compat_done_fn done, void *opaque)
{
    struct call *c = calloc(1, sizeof(*c));

    if (c) {
        c->verb = verb;
        c->done = done;
        c->opaque = opaque;
        c->jobs = jobs;
    } else if (verb >= CS_ADD) {
        done(opaque, 200, strdup("{\"message\":\"out of memory\",\"success\":false}"), CS_TYPE);
    } else {
        oq_reply(done, opaque, 1, "out of memory", NULL);
    }
    return c;
}

/* Adds c's pull job as an add request would: due its delay in seconds from now; override:
 * replacing a pending or removed job of its id. */
static void send_add(struct call *c, int override)
{
    const struct add *ad = &c->add;
    int64_t now = clock_now_ms();
    struct job job = { .topic = strdup(ad->topic), .body = malloc(ad->body_len + 1),
                       .body_len = ad->body_len, .delay_ms = ad->delay * 1000,
                       .due_ms = now + ad->delay * 1000, .created_ms = now,
                       .deliver = JOB_DELIVER_PULL, .override = override,
                       .ttr_ms = ad->ttr ? ad->ttr * 1000 : JOB_TTR_ONCE_MS,
                       .max_pops = ad->max_pops,
                       .key = strcmp(ad->id, ad->given) ? strdup(ad->given) : NULL };

    if (!job.topic || !job.body || (strcmp(ad->id, ad->given) && !job.key)) {
        job_release(&job);
        answer_send(answered, c, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    memcpy(job.body, ad->body, ad->body_len);
    job.body[ad->body_len] = '\0';
    snprintf(job.id, sizeof(job.id), "%s", ad->id);
    intake_add_job(c->jobs, &job, answered, c);
}

/* ---- ouqiang: Go's encoding/json into a struct, then strings.TrimSpace ---- */

/* The length of the white space (Go's unicode.IsSpace) that s (n bytes) starts with, at front,
 * or ends with; 0 when none. */
static size_t space_at(const unsigned char *s, size_t n, int front)
{
    static const char *const wide[] = { "\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8",
                                        "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80" };
    const unsigned char *c = front ? s : s + n - 1;

    if (n && (*c == ' ' || (*c >= '\t' && *c <= '\r')))
        return 1;
    for (size_t i = 0; i < sizeof(wide) / sizeof(wide[0]); i++) {
        size_t k = strlen(wide[i]);
        if (n >= k && memcmp(front ? s : s + n - k, wide[i], k) == 0)
            return k;
    }
    /* U+2000 to U+200A */
    if (n >= 3) {
        const unsigned char *w = front ? s : s + n - 3;
        if (w[0] == 0xe2 && w[1] == 0x80 && w[2] >= 0x80 && w[2] <= 0x8a)
            return 3;
    }
    return 0;
}

/* The member of a Go struct field called name: the last member of o whose name matches it
 * ignoring case (as Go's decoder assigns each in turn); NULL when none, or when it is null
 * (which leaves the field as it was). */
static json_t *go_member(json_t *o, const char *name)
{
    const char *k;
    json_t *v, *found = NULL;

    json_object_foreach(o, k, v)
        if (strcasecmp(k, name) == 0)
            found = v;
    return json_is_null(found) ? NULL : found;
}

/* A string field of o into *out (malloc'd, *len bytes), white space cut around it as ouqiang's
 * strings.TrimSpace does; "" when absent. -1 when it is there and no string. */
static int go_string(json_t *o, const char *name, char **out, size_t *len)
{
    json_t *v = go_member(o, name);
    const char *s = v ? json_string_value(v) : "";
    size_t n = v ? json_string_length(v) : 0, k;

    *out = NULL;
    if (v && !json_is_string(v))
        return -1;
    while ((k = space_at((const unsigned char *)s, n, 1)))
        s += k, n -= k;
    while ((k = space_at((const unsigned char *)s, n, 0)))
        n -= k;
    if (!(*out = malloc(n + 1)))
        return -1;
    memcpy(*out, s, n);
    (*out)[n] = '\0';
    *len = n;
    return 0;
}

/* An integer field of o into *v (0 when absent); -1 when it is there and no integer. */
static int go_integer(json_t *o, const char *name, json_int_t *v)
{
    json_t *x = go_member(o, name);

    *v = 0;
    if (x && !json_is_integer(x))
        return -1;
    *v = x ? json_integer_value(x) : 0;
    return 0;
}

/* The request's JSON as Go decodes it into a struct: an object, or null (every field zero);
 * NULL for anything else. */
static json_t *go_object(const struct compat_request *req)
{
    json_t *o = json_loadb(req->body, req->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);

    if (json_is_null(o)) {
        json_decref(o);
        return json_object();
    }
    if (!json_is_object(o)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* /push: an add of a pull job, with ouqiang's checks and words first. A job of the id there is
 * replaced, its delay counted from now, as ouqiang's SET of the id does. */
static void push(struct intake *jobs, const struct config *cfg, json_t *req, compat_done_fn done,
                 void *opaque)
{
    char *id = NULL, *topic = NULL, *body = NULL;
    size_t id_len = 0, topic_len = 0, body_len = 0;
    json_int_t delay, ttr;
    struct call *c;

    if (go_string(req, "id", &id, &id_len) < 0 || go_string(req, "topic", &topic, &topic_len) < 0 ||
        go_string(req, "body", &body, &body_len) < 0 || go_integer(req, "delay", &delay) < 0 ||
        go_integer(req, "ttr", &ttr) < 0)
        oq_reply(done, opaque, 1, OQ_BAD_JSON, NULL);
    else if (!id_len)
        oq_reply(done, opaque, 1, OQ_NO_ID, NULL);
    else if (!topic_len)
        oq_reply(done, opaque, 1, OQ_NO_PUSH_TOPIC, NULL);
    else if (delay <= 0 || delay > OQ_DELAY_MAX)
        oq_reply(done, opaque, 1, OQ_BAD_DELAY, NULL);
    else if (ttr <= 0 || ttr > OQ_TTR_MAX)
        oq_reply(done, opaque, 1, OQ_BAD_TTR, NULL);
    else if (topic_len > TOPIC_NAME_MAX)
        oq_reply(done, opaque, 1, "topic is too long for a topic of this server", NULL);
    else if ((c = call_new(PUSH, jobs, done, opaque))) {
        c->add = (struct add){ .given = id, .body = body, .body_len = body_len, .delay = delay,
                               .ttr = ttr, .max_pops = pops_limit(cfg->compat.ouqiang_max_attempts) };
        id = body = NULL;
        snprintf(c->add.topic, sizeof(c->add.topic), "%s", topic);
        if (compat_job_id(NULL, c->add.given, id_len, c->add.id) < 0)
            answer_send(answered, c, 503, API_ADD_FAILED, "add failed: no digest of the id", NULL);
        else
            send_add(c, 0);   /* a job of the id there: forgotten first if it is a pull job */
    }
    free(id);
    free(topic);
    free(body);
}

/* /pop: the first ready job of the comma-separated topics, waiting as ouqiang's BLPOP does. A
 * pop of more than API_POP_TOPICS_MAX topics (ouqiang's has no limit) is refused. */
static void pop(struct intake *jobs, const struct config *cfg, json_t *req, compat_done_fn done,
                answer_wanted_fn wanted, void *opaque)
{
    char *topics = NULL, *save = NULL, why[TOPIC_NAME_MAX + 128] = "no topic";
    struct api_pop p = { .ntopics = 0, .wait_ms = COMPAT_OUQIANG_WAIT_MS, .max = 1 };
    size_t len, listed = 0;
    struct call *c;

    if (go_string(req, "topic", &topics, &len) < 0) {
        free(topics);
        oq_reply(done, opaque, 1, OQ_BAD_JSON, NULL);
        return;
    }
    for (char *t = strtok_r(topics, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (++listed <= API_POP_TOPICS_MAX &&
            levels_check_target(&cfg->delay.levels, cfg->delay.dlq_topic, t, strlen(t), why,
                                sizeof(why)) == TARGET_OK)
            snprintf(p.topics[p.ntopics++], sizeof(p.topics[0]), "%s", t);
    if (listed > API_POP_TOPICS_MAX)
        snprintf(why, sizeof(why), "a pop names %d topics at most here", API_POP_TOPICS_MAX);
    if (p.wait_ms > cfg->pull.max_wait_ms)
        p.wait_ms = cfg->pull.max_wait_ms;
    if (!len)
        oq_reply(done, opaque, 1, OQ_NO_POP_TOPIC, NULL);
    else if (listed > API_POP_TOPICS_MAX || p.ntopics == 0)   /* or none can hold jobs here */
        oq_reply(done, opaque, 1, why, NULL);
    else if ((c = call_new(POP, jobs, done, opaque))) {
        c->wanted = wanted;
        intake_pop_request(jobs, &p, answered, call_wanted, c);
    }
    free(topics);
}

/* /finish, /delete and /get: by the job's id. A finished or deleted job's id is free at once,
 * as ouqiang's DEL leaves it; a job that is no pull job is not ouqiang's to finish or delete. */
static void by_id(struct intake *jobs, const struct config *cfg, enum verb verb, json_t *req,
                  compat_done_fn done, void *opaque)
{
    char *id = NULL, job_id[JOB_ID_MAX + 1];
    size_t len = 0;
    struct call *c;

    if (go_string(req, "id", &id, &len) < 0)
        oq_reply(done, opaque, 1, OQ_BAD_JSON, NULL);
    else if (!len)
        oq_reply(done, opaque, 1, OQ_NO_ID, NULL);
    else if (compat_job_id(NULL, id, len, job_id) < 0)
        oq_reply(done, opaque, 1, "no digest of the id", NULL);
    else if ((c = call_new(verb, jobs, done, opaque)) && verb == GET) {
        c->cfg = cfg;
        intake_get(jobs, job_id, answered, c);
    }
    else if (c)
        intake_forget(jobs, job_id, NULL, answered, c);
    free(id);
}

/* ---- changsongl: gin's binding, ids and bodies as sent ---- */

/* The topic and id of a changsongl path /topic/<topic>/job[/<id>] into topic and id ("" when
 * none). 0, or -1 when the path is none of its routes. */
static int cs_path(const char *path, char topic[TOPIC_NAME_MAX + 1], char id[4 * CS_ID_MAX + 1])
{
    const char *t = path + strlen(COMPAT_TOPIC_PREFIX), *slash = strchr(t, '/');
    size_t tlen = slash ? (size_t)(slash - t) : 0;

    if (!slash || tlen == 0 || tlen > TOPIC_NAME_MAX || strncmp(slash, "/job", 4) != 0)
        return -1;
    snprintf(topic, TOPIC_NAME_MAX + 1, "%.*s", (int)tlen, t);
    id[0] = '\0';
    if (slash[4] == '\0')
        return 0;
    if (slash[4] != '/' || !slash[5] || strlen(slash + 5) > 4 * CS_ID_MAX || strchr(slash + 5, '/'))
        return -1;
    snprintf(id, 4 * CS_ID_MAX + 1, "%s", slash + 5);
    return 0;
}

/* A uint field of addParam (gin's ShouldBindJSON) into *v: 0 when absent or null, else -1
 * with the decoder's words in why. */
static int cs_uint(json_t *o, const char *name, json_int_t *v, char *why, size_t whylen)
{
    json_t *x = json_is_object(o) ? go_member(o, name) : NULL;

    *v = 0;
    if (!x)
        return 0;
    if (json_is_integer(x) && json_integer_value(x) >= 0) {
        *v = json_integer_value(x);
        return 0;
    }
    if (json_is_integer(x))
        snprintf(why, whylen, "body invalid: json: cannot unmarshal number %" JSON_INTEGER_FORMAT
                 " into Go struct field addParam.%s of type uint", json_integer_value(x), name);
    else
        snprintf(why, whylen, "body invalid: json: cannot unmarshal %s into Go struct field "
                 "addParam.%s of type uint", json_is_string(x) ? "string" : json_is_real(x) ?
                 "number" : json_is_boolean(x) ? "bool" : json_is_array(x) ? "array" : "object",
                 name);
    return -1;
}

/* POST /topic/<topic>/job: an add of a pull job, the id and body as sent; with "override",
 * the replacement of the job of the id there (answered "job is not exists" when there is none,
 * as changsongl's). */
static void cs_add(struct call *c, const struct config *cfg, const struct compat_request *req)
{
    json_t *o = json_loadb(req->body, req->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    json_t *id = json_is_object(o) ? go_member(o, "id") : NULL;
    json_t *body = json_is_object(o) ? go_member(o, "body") : NULL;
    json_t *override = json_is_object(o) ? go_member(o, "override") : NULL;
    int replace = json_is_true(override);
    char why[256];
    json_int_t delay, ttr;

    if (!req->len)
        cs_reply(c, 0, "body invalid: EOF", NULL, 0);
    else if (!o || (!json_is_object(o) && !json_is_null(o)))
        cs_reply(c, 0, "body invalid: the body is no JSON object", NULL, 0);
    else if ((id && !json_is_string(id)) || (body && !json_is_string(body)) ||
             (override && !json_is_boolean(override)))
        cs_reply(c, 0, "body invalid: id and body are strings, override true or false", NULL, 0);
    else if (cs_uint(o, "delay", &delay, why, sizeof(why)) < 0 ||
             cs_uint(o, "ttr", &ttr, why, sizeof(why)) < 0)
        cs_reply(c, 0, why, NULL, 0);
    else if (!json_string_length(id))
        cs_reply(c, 0, CS_NO_ID, NULL, 0);
    else if (runes(json_string_value(id), json_string_length(id)) > CS_ID_MAX)
        cs_reply(c, 0, CS_LONG_ID, NULL, 0);
    else if (ttr > OQ_TTR_MAX)
        cs_reply(c, 0, "ttr is 0 to 86400 seconds here (a pull job is reserved a day at most)",
                 NULL, 0);
    else if (memchr(json_string_value(id), '\0', json_string_length(id)))
        cs_reply(c, 0, "id holds a NUL character", NULL, 0);
    else if (!(c->add.given = strdup(json_string_value(id))) ||
             !(c->add.body = malloc(json_string_length(body) + 1)) ||
             compat_job_id(c->topic, c->add.given, json_string_length(id), c->add.id) < 0)
        cs_reply(c, 0, "out of memory", NULL, 0);
    else {
        memcpy(c->add.body, body ? json_string_value(body) : "", json_string_length(body));
        c->add.body_len = json_string_length(body);
        c->add.delay = delay;
        c->add.ttr = ttr;
        c->add.max_pops = pops_limit(cfg->compat.changsongl_max_attempts);
        snprintf(c->add.topic, sizeof(c->add.topic), "%s", c->topic);
        json_decref(o);
        if (replace) {
            c->verb = CS_REPLACE;
            c->cfg = cfg;
            intake_get(c->jobs, c->add.id, answered, c);
        } else {
            send_add(c, 0);
        }
        return;
    }
    json_decref(o);
    call_free(c);
}

/* changsongl's routes. */
static void changsongl(struct intake *jobs, const struct config *cfg,
                       const struct compat_request *req, compat_done_fn done,
                       answer_wanted_fn wanted, void *opaque)
{
    char topic[TOPIC_NAME_MAX + 1], id[4 * CS_ID_MAX + 1], why[TOPIC_NAME_MAX + 128];
    char job_id[JOB_ID_MAX + 1];
    struct api_pop p = { .ntopics = 1, .max = 1, .wait_ms = 0 };
    int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
    struct call *c;
    char *end;

    if (!req->path || cs_path(req->path, topic, id) < 0 || (!id[0] && !get && !post) ||
        (id[0] && (get || post))) {
        done(opaque, 404, strdup("404 page not found"), "text/plain");
        return;
    }
    if (!(c = call_new(CS_ADD, jobs, done, opaque)))
        return;
    snprintf(c->topic, sizeof(c->topic), "%s", topic);
    if (runes(topic, strlen(topic)) > CS_TOPIC_MAX) {
        cs_reply(c, 0, CS_LONG_TOPIC, NULL, 0);
    } else if (levels_check_target(&cfg->delay.levels, cfg->delay.dlq_topic, topic, strlen(topic),
                                   why, sizeof(why)) != TARGET_OK) {
        cs_reply(c, 0, why, NULL, 0);
    } else if (post) {
        cs_add(c, cfg, req);
        return;
    } else if (get) {
        if (req->timeout && req->timeout[0]) {
            long long v = strtoll(req->timeout, &end, 10);
            if (*end || v < 0) {
                cs_reply(c, 0, "query invalid: timeout is a whole number of seconds", NULL, 0);
                call_free(c);
                return;
            }
            p.wait_ms = v > cfg->pull.max_wait_ms / 1000 ? cfg->pull.max_wait_ms : v * 1000;
        }
        snprintf(p.topics[0], sizeof(p.topics[0]), "%s", topic);
        c->verb = CS_POP;
        c->wanted = wanted;
        intake_pop_request(jobs, &p, answered, call_wanted, c);
        return;
    } else if (runes(id, strlen(id)) > CS_ID_MAX) {
        cs_reply(c, 0, "uri invalid: Key: 'idTopicParam.idParam.ID' Error:Field validation for "
                 "'ID' failed on the 'max' tag", NULL, 0);
    } else if (compat_job_id(topic, id, strlen(id), job_id) < 0) {
        cs_reply(c, 0, "no digest of the id", NULL, 0);
    } else {   /* PUT finishes, DELETE deletes a pull job of the topic: both free the id at
                * once, as changsongl's DEL */
        c->verb = CS_FINISH;
        intake_forget(jobs, job_id, topic, answered, c);
        return;
    }
    call_free(c);
}

void compat_serve(struct intake *jobs, const struct config *cfg, const struct compat_request *req,
                  compat_done_fn done, answer_wanted_fn wanted, void *opaque)
{
    json_t *o;

    if (req->path && strncmp(req->path, COMPAT_TOPIC_PREFIX, strlen(COMPAT_TOPIC_PREFIX)) == 0) {
        changsongl(jobs, cfg, req, done, wanted, opaque);
        return;
    }
    if (!(o = go_object(req)))
        oq_reply(done, opaque, 1, OQ_BAD_JSON, NULL);
    else if (strcmp(req->path, "/push") == 0)
        push(jobs, cfg, o, done, opaque);
    else if (strcmp(req->path, "/pop") == 0)
        pop(jobs, cfg, o, done, wanted, opaque);
    else if (strcmp(req->path, "/get") == 0)
        by_id(jobs, cfg, GET, o, done, opaque);
    else
        by_id(jobs, cfg, REMOVE, o, done, opaque);   /* /finish and /delete */
    json_decref(o);
}
