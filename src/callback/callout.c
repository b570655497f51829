/* callout: the calls of callback jobs, below the forwarder. A due callback job (its record
 * claimed by forwarder.c) or a due direct message with dq-callback is called through
 * callbacks.c, and what callplan.c makes of the result is reported to the forwarder as an
 * outcome: mark the record delivered (or deliver the job to its topic too), move the message on
 * to its next attempt, written into the record here first, copy a direct message into the delay
 * topics for its retry, or dead-letter it with what the calls came to. The contract is in
 * include/callback/callout.h; runs on the holder's thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "core/calljson.h"
#include "callback/callbacks.h"
#include "callback/callout.h"
#include "core/callplan.h"
#include "lib/clock.h"
#include "core/job.h"
#include "core/levels.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/producer.h"
#include "redis/store.h"

#define LOG_MODULE "forwarder"   /* one module in the logs for the whole delivery path */
#define RETRY_COUNT_INTERVAL_MS 1000   /* how old /stats's count of callbacks retrying may be */

/* A callback job whose call is being made: its record as claimed, to write its next attempt
 * into or mark; on the list of calls (struct calls) until its result is taken. */
struct call {
    struct held *m;
    struct job job;             /* a direct message's: made of the message (calls_direct) */
    int direct;                 /* 1: a direct message's callback (no record) */
    char head[CALL_HEAD_MAX];   /* a record job's: its head as claimed, to write it under */
    char tag[ENVELOPE_TAG_MAX + 1];   /* a record job's: its message's dq-tag, "" for none */
    char why[512];              /* what the call came to: the record's and dead letter's reason */
    struct cb_result res;       /* the last call's result, once it came (res_set) */
    int res_set;
    msgpack_sbuffer rec;        /* a record job's next attempt, packed to be written (rec_set) */
    int rec_set;
    char werr[256];             /* why writing the next attempt failed */
    struct call *prev, *next;
};

/* The calls of callback jobs: the HTTP client that makes them, and those made. */
struct callout {
    const struct config *cfg;
    struct store *st;        /* borrowed: the forwarder's, for a record's next attempt */
    struct callbacks *http;  /* the HTTP client of callback jobs */
    struct call *calling;    /* calls made, results not yet taken */
    int called;              /* a callback was called since the start */
    int64_t next_count_ms;   /* monotonic ms: when to count the retries waiting again */
    char err[300];           /* an outcome's why when no call holds it */
    /* The next attempts of one take, written together: scratch, CALLOUT_TAKE_MAX each. */
    struct store_swap *swaps;
    size_t *swapped;         /* the outcome of each swap */
    const char **ids;
    int64_t *ats;
};

void callout_call_free(struct call *c)
{
    if (!c)
        return;
    job_release(&c->job);
    if (c->rec_set)
        msgpack_sbuffer_destroy(&c->rec);
    free(c);
}

/* The URL a callback calls: its own, or its named endpoint's (NULL when the config no longer
 * names it). */
static const char *call_url(const struct config *cfg, const struct job_callback *cb)
{
    if (cb->url)
        return cb->url;
    for (int i = 0; i < cfg->callbacks.nendpoints; i++)
        if (strcmp(cfg->callbacks.endpoints[i].name, cb->endpoint) == 0)
            return cfg->callbacks.endpoints[i].url;
    return NULL;
}

static void call_link(struct callout *co, struct call *c)
{
    c->next = co->calling;
    if (c->next)
        c->next->prev = c;
    co->calling = c;
}

static void call_unlink(struct callout *co, struct call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        co->calling = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

/* A call of m, which holds it from now on (m->call). */
static struct call *call_new(struct held *m)
{
    struct call *c = calloc(1, sizeof(*c));

    if (c) {
        c->m = m;
        m->call = c;
    }
    return c;
}

/* Fills out to hand m back for act, with nothing more to say. */
static void outcome_of(struct call_outcome *out, struct held *m, enum call_act act)
{
    *out = (struct call_outcome){ .m = m, .act = act, .now_ms = clock_now_ms() };
}

/* Fills out to dead-letter c's message (or its job) with c->why. */
static void dead_outcome(struct call_outcome *out, struct call *c)
{
    outcome_of(out, c->m, c->direct ? CO_DEAD : CO_DEAD_JOB);
    out->dlq = DLQ_CALLBACK;
    out->job = &c->job;
    out->why = c->why;
}

/* A callback's dead letter says what its calls came to: the callback (JSON; a direct
 * message carries its own already), the calls made, the last status and answer. */
void callout_dead_headers(rd_kafka_headers_t *hdrs, const struct call *c)
{
    const struct cb_result *res = &c->res;
    char *json;

    if (!c->direct && (json = calljson_text(c->job.callback))) {
        headers_add(hdrs, HDR_CALLBACK, json, strlen(json));
        free(json);
    }
    headers_add_int(hdrs, HDR_CALL_ATTEMPTS, c->job.callback->attempts);
    if (c->res_set && res->status)
        headers_add_int(hdrs, HDR_CALL_STATUS, res->status);
    if (c->res_set && res->response_len)
        headers_add(hdrs, HDR_CALL_RESPONSE, res->response, res->response_len);
}

/* Makes c's call (its job's callback, body and id: the webhook-id, the same on every attempt;
 * its result is taken by callout_outcome). One that cannot be made is dead-lettered. */
static void call_submit(struct callout *co, struct call *c, struct call_outcome *out)
{
    const struct job_callback *cb = c->job.callback;
    const char *url = call_url(co->cfg, cb);
    char err[256];

    if (!url)
        snprintf(err, sizeof(err), "callback endpoint %s is not in callbacks.endpoints", cb->endpoint);
    if (!url || callbacks_submit(co->http, &(struct cb_call){
                    .ctx = c, .url = url, .endpoint = cb->endpoint, .put = cb->put,
                    .headers = cb->headers, .nheaders = cb->nheaders, .body = c->job.body,
                    .body_len = c->job.body_len,
                    .json = calljson_body_is_json(c->job.body, c->job.body_len),
                    .timeout_ms = cb->timeout_ms, .webhook_id = c->job.id,
                    .attempt = cb->attempts + 1 },
                    err, sizeof(err)) < 0) {
        snprintf(c->why, sizeof(c->why), "%s (not called)", err);
        dead_outcome(out, c);
        return;
    }
    outcome_of(out, c->m, CO_MADE);
    call_link(co, c);
}

void callout_job(struct callout *co, struct held *m, struct job *job, const char *head,
                 const char *tag, struct call_outcome *out)
{
    struct call *c;

    if (!(c = call_new(m))) {
        log_error("job=%s: out of memory calling back; retrying", job->id);
        outcome_of(out, m, CO_RETRY);
        return;
    }
    c->job = *job;
    memset(job, 0, sizeof(*job));
    snprintf(c->head, sizeof(c->head), "%s", head);
    snprintf(c->tag, sizeof(c->tag), "%s", tag);
    call_submit(co, c, out);
}

/* The job a direct message with dq-callback makes: its id (a retry's dq-call-id, else where
 * the message is), topic (or none), body, callback and the calls made so far. 0, or -1 with
 * why in err. */
static int direct_job(const struct callout *co, const struct held *m, const char *from,
                      struct job *job, char *err, size_t errlen)
{
    const struct envelope *env = &m->env;
    struct api_limits lim = { .endpoints = co->cfg->callbacks.endpoints,
                              .nendpoints = co->cfg->callbacks.nendpoints,
                              .no_urls = !co->cfg->callbacks.direct_urls
                                         ? "a direct producer's callback: callbacks.direct_urls is false"
                                         : !co->cfg->callbacks.raw_urls ? "callbacks.raw_urls is false"
                                                                       : NULL };
    struct api_error e;

    if (env->call_id && env->call_id_len <= JOB_ID_MAX)
        snprintf(job->id, sizeof(job->id), "%.*s", (int)env->call_id_len, env->call_id);
    else
        snprintf(job->id, sizeof(job->id), "%s-%d-%lld", from, m->partition, (long long)m->offset);
    job->due_ms = job->created_ms = m->due_ms;
    job->topic = env->topic ? strndup(env->topic, env->topic_len) : strdup("");
    job->body = malloc(m->value_len + 1);
    if (!job->topic || !job->body) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (m->value_len)
        memcpy(job->body, m->value, m->value_len);
    job->body[m->value_len] = '\0';
    job->body_len = m->value_len;
    if (calljson_parse(env->callback, env->callback_len, &lim, &job->callback, &e) < 0) {
        snprintf(err, errlen, "header %s: %s", HDR_CALLBACK, e.message);
        return -1;
    }
    job->callback->attempts = (int)env->call_attempts;
    job->callback->first_ms = env->call_first_ms;
    return 0;
}

void callout_direct(struct callout *co, struct held *m, const char *from,
                    struct call_outcome *out)
{
    struct call *c;

    if (!(c = call_new(m))) {
        log_error("out of memory calling back; retrying");
        outcome_of(out, m, CO_RETRY);
        return;
    }
    c->direct = 1;
    if (direct_job(co, m, from, &c->job, co->err, sizeof(co->err)) < 0) {
        m->call = NULL;   /* no call was made: a plain dead letter */
        callout_call_free(c);
        outcome_of(out, m, CO_DEAD);
        out->dlq = DLQ_ENVELOPE;
        out->why = co->err;
        return;
    }
    call_submit(co, c, out);
}

/* The retry copy is due at dq-due-ms exactly and carries the webhook-id and the calls made so
 * far, for its next call to go on from there. */
void callout_again_headers(rd_kafka_headers_t *hdrs, const struct call *c, int64_t at_ms)
{
    static const char *const drop[] = { HDR_DUE, HDR_HOPS, HDR_CALL_ID, HDR_CALL_ATTEMPTS,
                                        HDR_CALL_FIRST };

    for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
        rd_kafka_header_remove(hdrs, drop[i]);
    headers_add_int(hdrs, HDR_DUE, at_ms);
    headers_add_int(hdrs, HDR_HOPS, c->m->env.hops + 1);   /* routed: due at dq-due-ms exactly */
    headers_add(hdrs, HDR_CALL_ID, c->job.id, strlen(c->job.id));
    headers_add_int(hdrs, HDR_CALL_ATTEMPTS, c->job.callback->attempts);
    headers_add_int(hdrs, HDR_CALL_FIRST, c->job.callback->first_ms);
}

/* A failed call to be made again at at_ms: the record, still claimed by m, becomes pending
 * again with that due time and what the calls came to so far, and m is to move on to it (down
 * the levels, or held there). The record is packed here and written by write_again with the
 * others of its take, before m moves on: should delayqd stop before m moves on, m is read
 * again, finds the record due later and moves on then. */
static void call_again(struct call *c, int64_t at_ms, struct call_outcome *out)
{
    struct job *job = &c->job;

    free(job->callback->last_error);
    job->callback->last_error = strdup(c->why);
    job->due_ms = at_ms;
    job->delay_ms = at_ms - job->created_ms;
    if (strlen(c->tag) == JOB_TAG_LEN)
        memcpy(job->tag, c->tag, JOB_TAG_LEN + 1);
    msgpack_sbuffer_init(&c->rec);
    c->rec_set = 1;
    out->job = job;
    out->at_ms = at_ms;
    out->act = CO_AGAIN;
    if (job_record_pack(job, &c->rec) < 0) {   /* called again after retry's wait */
        snprintf(c->werr, sizeof(c->werr), "out of memory");
        out->act = CO_WRITE_FAILED;
        out->why = c->werr;
    }
}

/* A record job called back 2xx, with a topic to go on to: its record, still claimed under
 * c->head, is to say so before the onward delivery, so that a retry of that delivery does not
 * call again. Packed here (head as claimed, the tail of how its calls went), written by
 * write_again. 0, or -1 (out of memory: the onward step goes on without it). */
static int pack_called(struct call *c)
{
    msgpack_sbuffer rec;
    size_t head;
    int rc = -1;

    msgpack_sbuffer_init(&rec);
    msgpack_sbuffer_init(&c->rec);
    c->rec_set = 1;
    if (job_record_pack(&c->job, &rec) == 0 && (head = job_record_head_len(rec.data, rec.size)) &&
        msgpack_sbuffer_write(&c->rec, c->head, strlen(c->head)) == 0 &&
        msgpack_sbuffer_write(&c->rec, rec.data + head, rec.size - head) == 0)
        rc = 0;
    msgpack_sbuffer_destroy(&rec);
    if (rc < 0) {
        msgpack_sbuffer_destroy(&c->rec);
        c->rec_set = 0;
    }
    return rc;
}

/* What writing c's next attempt came to (s), into out: moved on, retried, or gone. */
static void again_written(struct call *c, const struct store_swap *s, struct call_outcome *out)
{
    msgpack_sbuffer_destroy(&c->rec);
    c->rec_set = 0;
    if (out->act == CO_DELIVER_JOB) {   /* called back: on to the topic in any case but one */
        if (s->failed)
            log_warn("job=%s: writing that its callback was answered failed (%s): should its "
                     "delivery to its topic be retried, it is called again", c->job.id, s->err);
        else if (!s->replaced)
            out->act = CO_GONE;
        return;
    }
    if (s->failed) {   /* called again after retry's wait: sooner than planned, never lost */
        snprintf(c->werr, sizeof(c->werr), "%s", s->err);
        out->act = CO_WRITE_FAILED;
        out->why = c->werr;
    } else if (!s->replaced) {
        log_info("job=%s: its record changed during its call (removed, or taken over): no "
                 "attempt planned here", c->job.id);
        out->act = CO_GONE;
    }
}

/* Writes the next attempts of the n outcomes of one take in one pipeline, and lists them among
 * the retries planned in one more call: a storm of failing calls costs two round trips a take,
 * not three a call. */
static void write_again(struct callout *co, struct call_outcome *out, size_t n, int64_t now)
{
    size_t k = 0, nid = 0;
    char err[256];

    for (size_t i = 0; i < n; i++) {
        struct call *c = out[i].m->call;
        if ((out[i].act != CO_AGAIN && out[i].act != CO_DELIVER_JOB) || !c || c->direct ||
            !c->rec_set)
            continue;
        co->swapped[k] = i;
        co->swaps[k++] = (struct store_swap){
            .id = c->job.id, .head = c->head, .head_len = strlen(c->head), .value = c->rec.data,
            .len = c->rec.size,
            .ttl_ms = (out[i].act == CO_AGAIN ? out[i].at_ms : c->job.due_ms) - now +
                      co->cfg->job.retention_s * 1000 };
    }
    if (!k)
        return;
    store_replace_many(co->st, k, co->swaps);   /* each swap says how it went */
    for (size_t j = 0; j < k; j++) {
        struct call_outcome *o = &out[co->swapped[j]];
        again_written(o->m->call, &co->swaps[j], o);
        if (o->act == CO_AGAIN) {
            co->ids[nid] = o->job->id;
            co->ats[nid++] = o->at_ms;
        }
    }
    if (nid && store_retries_planned(co->st, nid, co->ids, co->ats, now, err, sizeof(err)) < 0)
        log_debug("listing %zu retries failed: %s", nid, err);
}

/* The retries waiting, for /stats and /metrics: looked up at most once a second by an
 * instance that calls back (one that never did is spared the round trips). */
static void count_retries(struct callout *co)
{
    int64_t now = clock_mono_ms(), n;
    char err[256];

    if (!co->called || now < co->next_count_ms)
        return;
    co->next_count_ms = now + RETRY_COUNT_INTERVAL_MS;
    if (store_retries_waiting(co->st, clock_now_ms(), &n, err, sizeof(err)) == 0)
        metrics_set(M_CALL_RETRIES_WAITING, n);
}

/* A deferred call comes back when the level its wait rounds up to lets it go: its message is
 * held once, not moved down through the shorter levels (a dead endpoint's thousands of calls,
 * moved down level by level, would crowd the short levels every other job passes through).
 * Within max_backoff_ms; no call was made, so a later turn costs the job no attempt. */
static enum callplan_action deferral_held_once(const struct callout *co,
                                               const struct callplan_facts *f,
                                               const struct config_call_retry *rules,
                                               enum callplan_action act, int64_t *at)
{
    int64_t wait = *at - f->now_ms, held;

    if (act != CALL_RETRY || !f->deferred)
        return act;
    held = levels_ceil_ms(&co->cfg->delay.levels, wait);
    if (held <= rules->max_backoff_ms || held <= wait)
        *at = f->now_ms + held;
    return act;
}

/* What a call came to, into out: delivered (marked, or on to its topic too), called again
 * later, or dead-lettered. */
static void on_call_result(struct callout *co, const struct cb_result *r, struct call_outcome *out)
{
    struct call *c = r->ctx;
    struct job_callback *cb = c->job.callback;
    int64_t now = clock_now_ms(), at = 0;
    enum callplan_action act;
    struct config_call_retry rules = callplan_rules(&co->cfg->callbacks.retry, cb);
    struct callplan_facts f = { .status = r->status, .retry_after_ms = r->retry_after_ms,
                                .transient = r->error == CB_E_CONNECT || r->error == CB_E_TIMEOUT ||
                                             r->error == CB_E_INTERNAL,
                                .deferred = r->error == CB_E_BUSY,
                                .error = r->error ? r->error_text : NULL,
                                .attempts = cb->attempts + (r->error != CB_E_BUSY),
                                .now_ms = now, .random = (uint32_t)rand() };

    call_unlink(co, c);
    co->called = 1;
    *out = (struct call_outcome){ .m = c->m, .now_ms = now };
    if (!f.deferred) {   /* a call was made: what it came to is the job's to keep */
        c->res = *r;
        c->res_set = 1;
        cb->attempts = f.attempts;
        cb->last_status = r->status;
        if (!cb->first_ms)
            cb->first_ms = r->sent_ms;
    }
    f.first_ms = cb->first_ms ? cb->first_ms : now;
    act = callplan_decide(&f, &rules, &at, c->why, sizeof(c->why));
    switch (deferral_held_once(co, &f, &rules, act, &at)) {
    case CALL_DONE:
        if (cb->attempts == 1)
            metrics_call_lateness(r->sent_ms - c->job.due_ms);
        out->job = &c->job;
        out->topic = c->job.topic;
        if (c->direct)
            out->act = c->job.topic[0] ? CO_DELIVER_DIRECT : CO_DELIVERED;
        else
            out->act = c->job.topic[0] ? CO_DELIVER_JOB : CO_MARK;
        if (out->act == CO_DELIVER_JOB && pack_called(c) < 0)
            log_warn("job=%s: out of memory noting that its callback was answered", c->job.id);
        break;
    case CALL_DEAD:
        metrics_call_dead(r->endpoint);
        dead_outcome(out, c);
        out->now_ms = now;
        break;
    case CALL_RETRY:
        if (f.deferred) {
            metrics_inc(M_CALL_DEFERRED);
            log_debug("job=%s: %s; called at %lld", c->job.id, c->why, (long long)at);
        } else {
            metrics_call_retry(r->endpoint);
            log_info("job=%s: callback to %s: %s; attempt %d at %lld", c->job.id, r->endpoint,
                     c->why, cb->attempts + 1, (long long)at);
        }
        if (c->direct) {
            out->act = CO_AGAIN_DIRECT;
            out->at_ms = at;
        } else {
            call_again(c, at, out);
        }
        break;
    }
}

size_t callout_outcomes(struct callout *co, struct call_outcome *out, int *more)
{
    struct cb_result r;
    size_t n = 0;

    while (n < CALLOUT_TAKE_MAX && callbacks_result(co->http, &r))
        on_call_result(co, &r, &out[n++]);
    *more = n == CALLOUT_TAKE_MAX;
    write_again(co, out, n, clock_now_ms());
    if (!n)
        count_retries(co);
    return n;
}

struct callout *callout_new(const struct config *cfg, struct store *st, int wake_fd, char *err,
                            size_t errlen)
{
    struct callout *co = calloc(1, sizeof(*co));

    if (!co) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    co->cfg = cfg;
    co->st = st;
    if (!(co->swaps = calloc(CALLOUT_TAKE_MAX, sizeof(*co->swaps))) ||
        !(co->swapped = calloc(CALLOUT_TAKE_MAX, sizeof(*co->swapped))) ||
        !(co->ids = calloc(CALLOUT_TAKE_MAX, sizeof(*co->ids))) ||
        !(co->ats = calloc(CALLOUT_TAKE_MAX, sizeof(*co->ats)))) {
        snprintf(err, errlen, "out of memory");
        callout_free(co);
        return NULL;
    }
    if (!(co->http = callbacks_new(cfg, wake_fd, err, errlen))) {
        callout_free(co);
        return NULL;
    }
    return co;
}

void callout_free(struct callout *co)
{
    if (!co)
        return;
    callbacks_free(co->http);
    while (co->calling) {
        struct call *c = co->calling;
        call_unlink(co, c);
        free(c->m);
        callout_call_free(c);
    }
    free(co->swaps);
    free(co->swapped);
    free(co->ids);
    free(co->ats);
    free(co);
}

const char *callout_why(const struct call *c)
{
    return c->why;
}

const struct job *callout_job_of(const struct call *c)
{
    return &c->job;
}
