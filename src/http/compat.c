/* compat: ouqiang/delay-queue's routes, translated into the jobs module's requests and its
 * answers back. The contract is in include/http/compat.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "http/compat.h"
#include "core/levels.h"
#include "lib/clock.h"

/* ouqiang's words, kept as its clients may show or match them. */
#define OQ_ADDED "添加成功"
#define OQ_ADD_FAILED "添加失败"
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

/* changsongl's words. */
#define CS_OK "ok"
#define CS_EXISTS "job is exists"
#define CS_NOT_EXISTS "job is not exists"
#define CS_ID_MAX 200

enum verb { PUSH, POP, REMOVE, GET, CS_ADD, CS_POP, CS_FINISH, CS_DELETE };

/* A request on its way through the jobs module: whose answer to translate, and how. */
struct call {
    enum verb verb;
    compat_done_fn done;
    answer_wanted_fn wanted;    /* a pop's: is its asker still there */
    void *opaque;
};

/* The answer_wanted_fn of a pop on its way: its asker's. */
static int call_wanted(void *opaque)
{
    struct call *c = opaque;

    return !c->wanted || c->wanted(c->opaque);
}

/* changsongl's answer {"success", "message"} and more members (takes extra; NULL: none). */
static void cs_reply(compat_done_fn done, void *opaque, int success, const char *msg, json_t *extra)
{
    json_t *r = extra ? extra : json_object();
    char *text;

    json_object_set_new(r, "success", json_boolean(success));
    json_object_set_new(r, "message", json_string(msg));
    text = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    done(opaque, text ? 200 : 503, text);
}

/* A popped job as changsongl answers it: under "data" (as its README shows) and its id and
 * body at the top level too (as its Go client reads them). */
/* out, with from's body_encoding when it has one (a body that is not UTF-8, as base64). */
static json_t *with_encoding(json_t *out, json_t *from)
{
    json_t *enc = json_object_get(from, "body_encoding");

    if (out && enc)
        json_object_set(out, "body_encoding", enc);
    return out;
}

static json_t *cs_popped(json_t *job)
{
    json_int_t due = json_integer_value(json_object_get(job, "due_ms"));
    json_int_t until = json_integer_value(json_object_get(job, "reserved_until_ms"));
    json_t *data;

    if (!job)
        return json_pack("{s:n}", "data");
    data = json_pack("{s:O, s:O, s:O, s:I, s:I}", "id", json_object_get(job, "id"), "topic",
                     json_object_get(job, "topic"), "body", json_object_get(job, "body"),
                     "delay", due / 1000, "ttr", until > due ? (until - due) / 1000 : 0);
    return with_encoding(json_pack("{s:o, s:O, s:O}", "data", with_encoding(data, job), "id",
                                   json_object_get(job, "id"), "body",
                                   json_object_get(job, "body")), job);
}

/* A changsongl answer from the jobs module's. */
static void cs_answered(struct call *c, const struct answer *a)
{
    int done = a->is == ANSWER_DONE || a->is == ANSWER_ALREADY;
    json_t *jobs = json_object_get(a->data, "jobs");

    if (a->status == 503)
        cs_reply(c->done, c->opaque, 0, a->message, NULL);
    else if (c->verb == CS_ADD)
        cs_reply(c->done, c->opaque, done, done ? CS_OK : a->is == ANSWER_EXISTS ? CS_EXISTS
                                                                             : a->message, NULL);
    else if (c->verb == CS_POP)
        cs_reply(c->done, c->opaque, done, done ? CS_OK : a->message,
                 done ? cs_popped(json_array_get(jobs, 0)) : NULL);
    else if (a->is == ANSWER_NO_JOB)
        cs_reply(c->done, c->opaque, 0, CS_NOT_EXISTS, NULL);
    else
        cs_reply(c->done, c->opaque, done || a->is == ANSWER_CONFLICT, CS_OK, NULL);
}

/* {"code": code, "message": msg, "data": data} (takes data; NULL: null), HTTP 200 always. */
static void reply(compat_done_fn done, void *opaque, int code, const char *msg, json_t *data)
{
    json_t *r = json_pack("{s:i, s:s, s:o}", "code", code, "message", msg,
                          "data", data ? data : json_null());
    char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;

    json_decref(r);
    done(opaque, text ? 200 : 503, text);
}

/* A string member of o with the blanks around it cut, as ouqiang trims them (caller frees);
 * "" when absent, NULL when it is not a string. */
static char *trimmed(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    const char *s, *e;

    if (!v)
        return strdup("");
    if (!json_is_string(v))
        return NULL;
    s = json_string_value(v);
    e = s + strlen(s);
    while (*s && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    return strndup(s, (size_t)(e - s));
}

/* An integer member of o into *v (0 when absent); -1 when it is there and no integer. */
static int integer(json_t *o, const char *name, json_int_t *v)
{
    json_t *x = json_object_get(o, name);

    *v = 0;
    if (x && !json_is_integer(x))
        return -1;
    *v = x ? json_integer_value(x) : 0;
    return 0;
}

/* 1 for the states of a job ouqiang would still hold. */
static int live(const char *state)
{
    static const char *const states[] = { "pending", "delivering", "ready", "reserved" };

    for (size_t i = 0; state && i < sizeof(states) / sizeof(states[0]); i++)
        if (strcmp(state, states[i]) == 0)
            return 1;
    return 0;
}

/* The jobs module's answer, translated. */
static void answered(void *opaque, const struct answer *a)
{
    struct call *c = opaque;
    json_t *data = a->data, *jobs = json_object_get(data, "jobs"), *job;
    int ok = a->is == ANSWER_DONE || a->is == ANSWER_ALREADY || a->is == ANSWER_NO_JOB;
    char msg[512];

    if (c->verb >= CS_ADD) {
        cs_answered(c, a);
        free(c);
        return;
    }
    switch (c->verb) {
    case PUSH:
        snprintf(msg, sizeof(msg), "%s: %s", OQ_ADD_FAILED, a->message);
        reply(c->done, c->opaque, ok ? 0 : 1, ok ? OQ_ADDED : msg, NULL);
        break;
    case POP:
        job = json_array_get(jobs, 0);
        if (!ok)
            reply(c->done, c->opaque, 1, OQ_POP_FAILED, NULL);
        else
            reply(c->done, c->opaque, 0, OQ_OK,
                  job ? with_encoding(json_pack("{s:O, s:O}", "id", json_object_get(job, "id"),
                                                "body", json_object_get(job, "body")), job)
                      : NULL);
        break;
    case REMOVE:
        /* ouqiang answers success whatever the job was; only a failure to reach Redis is not */
        reply(c->done, c->opaque, a->is == ANSWER_FAILED, a->is == ANSWER_FAILED ? OQ_REMOVE_FAILED
                                                                                : OQ_OK, NULL);
        break;
    case GET:
        if (ok && data && !live(json_string_value(json_object_get(data, "state"))))
            data = NULL;   /* ouqiang's job is gone once finished or deleted */
        if (!ok || !data || json_is_null(data))
            reply(c->done, c->opaque, ok ? 0 : 1, ok ? OQ_OK : OQ_POP_FAILED, NULL);
        else
            reply(c->done, c->opaque, 0, OQ_OK, with_encoding(
                  json_pack("{s:O, s:O, s:I, s:I, s:O}", "topic", json_object_get(data, "topic"),
                            "id", json_object_get(data, "id"), "delay",
                            json_integer_value(json_object_get(data, "exec_time")), "ttr",
                            json_integer_value(json_object_get(data, "ttr_ms")) / 1000, "body",
                            json_object_get(data, "body")), data));
        break;
    default:
        break;
    }
    free(c);
}

static struct call *call_new(enum verb verb, compat_done_fn done, void *opaque)
{
    struct call *c = malloc(sizeof(*c));

    if (c)
        *c = (struct call){ verb, done, NULL, opaque };
    else
        reply(done, opaque, 1, "out of memory", NULL);
    return c;
}

/* Adds a pull job as an add request would, answered to c: due delay seconds from now, its ttr
 * in seconds, 0 meaning handed out once, never again; override: replacing a pending job of its
 * id. */
static void add_pull(struct intake *jobs, const char *id, const char *topic, json_int_t delay,
                     const char *body, json_int_t ttr, int override, struct call *c)
{
    int64_t now = clock_now_ms();
    struct job job = { .topic = strdup(topic), .body = strdup(body), .body_len = strlen(body),
                       .delay_ms = delay * 1000, .due_ms = now + delay * 1000, .created_ms = now,
                       .deliver = JOB_DELIVER_PULL, .override = override,
                       .ttr_ms = ttr ? ttr * 1000 : JOB_TTR_ONCE_MS };
    char err[256];

    if (job_id_valid(id, strlen(id), err, sizeof(err)) < 0) {
        job_release(&job);
        answer_send(answered, c, 400, API_BAD_REQUEST, err, NULL);
        return;
    }
    if (!job.topic || !job.body) {
        job_release(&job);
        answer_send(answered, c, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    snprintf(job.id, sizeof(job.id), "%s", id);
    intake_add_job(jobs, &job, answered, c);
}

/* /push: an add of a pull job, with ouqiang's checks and words first. */
static void push(struct intake *jobs, json_t *req, compat_done_fn done, void *opaque)
{
    char *id = trimmed(req, "id"), *topic = trimmed(req, "topic"), *body = trimmed(req, "body");
    json_int_t delay, ttr;
    struct call *c;

    if (!id || !topic || !body || integer(req, "delay", &delay) < 0 ||
        integer(req, "ttr", &ttr) < 0)
        reply(done, opaque, 1, OQ_BAD_JSON, NULL);
    else if (!id[0])
        reply(done, opaque, 1, OQ_NO_ID, NULL);
    else if (!topic[0])
        reply(done, opaque, 1, OQ_NO_PUSH_TOPIC, NULL);
    else if (delay <= 0 || delay > OQ_DELAY_MAX)
        reply(done, opaque, 1, OQ_BAD_DELAY, NULL);
    else if (ttr <= 0 || ttr > OQ_TTR_MAX)
        reply(done, opaque, 1, OQ_BAD_TTR, NULL);
    else if ((c = call_new(PUSH, done, opaque)))
        add_pull(jobs, id, topic, delay, body, ttr, 0, c);
    free(id);
    free(topic);
    free(body);
}

/* /pop: the first ready job of the comma-separated topics, waiting as ouqiang's BLPOP does. */
static void pop(struct intake *jobs, const struct config *cfg, json_t *req, compat_done_fn done,
                answer_wanted_fn wanted, void *opaque)
{
    char *topics = trimmed(req, "topic"), *save = NULL, why[TOPIC_NAME_MAX + 128];
    struct api_pop p = { .ntopics = 0, .wait_ms = COMPAT_OUQIANG_WAIT_MS, .max = 1 };
    struct call *c;

    if (!topics) {
        reply(done, opaque, 1, OQ_BAD_JSON, NULL);
        return;
    }
    for (char *t = strtok_r(topics, ",", &save); t && p.ntopics < API_POP_TOPICS_MAX;
         t = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*t))
            t++;
        if (*t && levels_check_target(&cfg->delay.levels, cfg->delay.dlq_topic, t, strlen(t), why,
                                      sizeof(why)) == TARGET_OK)
            snprintf(p.topics[p.ntopics++], sizeof(p.topics[0]), "%s", t);
    }
    free(topics);
    if (p.ntopics == 0)
        reply(done, opaque, 1, OQ_NO_POP_TOPIC, NULL);
    else if ((c = call_new(POP, done, opaque))) {
        c->wanted = wanted;
        intake_pop_request(jobs, &p, answered, call_wanted, c);
    }
}

/* /finish, /delete and /get: by the job's id. */
static void by_id(struct intake *jobs, enum verb verb, json_t *req, compat_done_fn done, void *opaque)
{
    char *id = trimmed(req, "id"), err[256];
    struct call *c;

    if (!id)
        reply(done, opaque, 1, OQ_BAD_JSON, NULL);
    else if (!id[0])
        reply(done, opaque, 1, OQ_NO_ID, NULL);
    else if (job_id_valid(id, strlen(id), err, sizeof(err)) < 0)
        reply(done, opaque, 1, err, NULL);
    else if ((c = call_new(verb, done, opaque)))
        (verb == GET ? intake_get : intake_remove)(jobs, id, answered, c);
    free(id);
}

/* The topic and id of a changsongl path /topic/<topic>/job[/<id>] into topic and id ("" when
 * none). 0, or -1 when the path is none of its routes. */
static int cs_path(const char *path, char topic[TOPIC_NAME_MAX + 1], char id[CS_ID_MAX + 1])
{
    const char *t = path + strlen(COMPAT_TOPIC_PREFIX), *slash = strchr(t, '/');
    size_t tlen = slash ? (size_t)(slash - t) : 0;

    if (!slash || tlen == 0 || tlen > TOPIC_NAME_MAX || strncmp(slash, "/job", 4) != 0)
        return -1;
    snprintf(topic, TOPIC_NAME_MAX + 1, "%.*s", (int)tlen, t);
    id[0] = '\0';
    if (slash[4] == '\0')
        return 0;
    if (slash[4] != '/' || !slash[5] || strlen(slash + 5) > CS_ID_MAX || strchr(slash + 5, '/'))
        return -1;
    snprintf(id, CS_ID_MAX + 1, "%s", slash + 5);
    return 0;
}

/* POST /topic/<topic>/job: an add of a pull job. */
static void cs_add(struct intake *jobs, const char *topic, const struct compat_request *req,
                   compat_done_fn done, void *opaque)
{
    json_t *o = json_loadb(req->body, req->len, 0, NULL);
    json_int_t delay, ttr;
    char *id, *body;
    struct call *c;

    id = json_is_object(o) ? trimmed(o, "id") : NULL;
    body = json_is_object(o) ? trimmed(o, "body") : NULL;
    if (!id || !body || integer(o, "delay", &delay) < 0 || integer(o, "ttr", &ttr) < 0)
        cs_reply(done, opaque, 0, "invalid JSON body: id and body are strings, delay and ttr "
                 "integers", NULL);
    else if (!id[0] || strlen(id) > CS_ID_MAX)
        cs_reply(done, opaque, 0, "id is required, at most 200 characters", NULL);
    else if (delay < 0 || ttr < 0 || ttr > OQ_TTR_MAX)
        cs_reply(done, opaque, 0, "delay must not be negative; ttr is 0 to 86400", NULL);
    else if ((c = call_new(CS_ADD, done, opaque)))
        add_pull(jobs, id, topic, delay, body, ttr, json_is_true(json_object_get(o, "override")), c);
    free(id);
    free(body);
    json_decref(o);
}

/* changsongl's routes. */
static void changsongl(struct intake *jobs, const struct config *cfg,
                       const struct compat_request *req, compat_done_fn done,
                       answer_wanted_fn wanted, void *opaque)
{
    char topic[TOPIC_NAME_MAX + 1], id[CS_ID_MAX + 1], why[TOPIC_NAME_MAX + 128];
    struct api_pop p = { .ntopics = 1, .max = 1, .wait_ms = COMPAT_CHANGSONGL_WAIT_S * 1000 };
    int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;
    struct call *c;
    char *end;

    if (!req->path || cs_path(req->path, topic, id) < 0 || (!id[0] && !get && !post) ||
        (id[0] && (get || post))) {
        cs_reply(done, opaque, 0, "no such route: /topic/<topic>/job takes POST (add) and GET "
                 "(pop), /topic/<topic>/job/<id> PUT (finish) and DELETE", NULL);
        return;
    }
    if (levels_check_target(&cfg->delay.levels, cfg->delay.dlq_topic, topic, strlen(topic), why,
                            sizeof(why)) != TARGET_OK) {
        cs_reply(done, opaque, 0, why, NULL);
        return;
    }
    if (post) {
        cs_add(jobs, topic, req, done, opaque);
        return;
    }
    if (get) {
        if (req->timeout && req->timeout[0]) {
            long v = strtol(req->timeout, &end, 10);
            if (*end || v < 0 || v > API_POP_WAIT_MAX_MS / 1000) {
                cs_reply(done, opaque, 0, "timeout must be 0 to 180 seconds", NULL);
                return;
            }
            p.wait_ms = v * 1000;
        }
        snprintf(p.topics[0], sizeof(p.topics[0]), "%s", topic);
        if ((c = call_new(CS_POP, done, opaque))) {
            c->wanted = wanted;
            intake_pop_request(jobs, &p, answered, call_wanted, c);
        }
        return;
    }
    if ((c = call_new(strcmp(req->method, "PUT") == 0 ? CS_FINISH : CS_DELETE, done, opaque)))
        intake_remove(jobs, id, answered, c);
}

void compat_serve(struct intake *jobs, const struct config *cfg, const struct compat_request *req,
                  compat_done_fn done, answer_wanted_fn wanted, void *opaque)
{
    json_t *o;

    if (req->path && strncmp(req->path, COMPAT_TOPIC_PREFIX, strlen(COMPAT_TOPIC_PREFIX)) == 0) {
        changsongl(jobs, cfg, req, done, wanted, opaque);
        return;
    }
    o = json_loadb(req->body, req->len, 0, NULL);
    if (!json_is_object(o))
        reply(done, opaque, 1, OQ_BAD_JSON, NULL);
    else if (strcmp(req->path, "/push") == 0)
        push(jobs, o, done, opaque);
    else if (strcmp(req->path, "/pop") == 0)
        pop(jobs, cfg, o, done, wanted, opaque);
    else if (strcmp(req->path, "/get") == 0)
        by_id(jobs, GET, o, done, opaque);
    else
        by_id(jobs, REMOVE, o, done, opaque);   /* /finish and /delete */
    json_decref(o);
}
