/* apidata: the data of the HTTP API's answers, built with jansson: a job as get shows it, the
 * answers of an add, a batch, a reschedule, a pop, a worker's verbs and a release, and the
 * stats. The contract is in include/core/apidata.h. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/apidata.h"
#include "lib/base64.h"
#include "core/apijson.h"
#include "core/calljson.h"
#include "core/pending.h"

void *api_job_id_data(const char *id)
{
    return json_pack("{s:s}", "job_id", id);
}

void *api_rescheduled_data(const char *id, int64_t due_ms)
{
    return json_pack("{s:s, s:I, s:I}", "job_id", id, "exec_time", (json_int_t)(due_ms / 1000),
                     "exec_time_ms", (json_int_t)due_ms);
}

void api_body_set(void *obj, const char *body, size_t len)
{
    json_t *o = obj, *text = json_stringn(body ? body : "", len);
    size_t n;
    char *b64;

    if (text) {
        json_object_set_new(o, "body", text);
        return;
    }
    /* not UTF-8: JSON cannot carry its bytes as a string */
    b64 = base64_encode(body, len, &n);
    json_object_set_new(o, "body", b64 ? json_stringn(b64, n) : json_null());
    json_object_set_new(o, "body_encoding", json_string("base64"));
    free(b64);
}

static json_t *headers_object(const struct job *job)
{
    json_t *h = json_object();

    for (size_t i = 0; i < job->nheaders; i++)
        json_object_set_new(h, job->headers[i].name, json_string(job->headers[i].value));
    return h;
}

void *api_job_data(const struct job *job, enum job_state state, int64_t delivered_ms,
                   const char *error)
{
    json_t *d = json_object(), *h = headers_object(job);
    json_object_set_new(d, "id", json_string(job->id));
    json_object_set_new(d, "topic", json_string(job->topic));
    json_object_set_new(d, "delay", json_integer(job->delay_ms / 1000));
    json_object_set_new(d, "exec_time", json_integer(job->due_ms / 1000));
    api_body_set(d, job->body, job->body_len);
    json_object_set_new(d, "key", json_string(job->key ? job->key : job->id));
    json_object_set_new(d, "headers", h);
    json_object_set_new(d, "state", json_string(job_state_name(state)));
    json_object_set_new(d, "delay_ms", json_integer(job->delay_ms));
    json_object_set_new(d, "exec_time_ms", json_integer(job->due_ms));
    json_object_set_new(d, "created_ms", json_integer(job->created_ms));
    json_object_set_new(d, "delivered_ms", delivered_ms >= 0 ? json_integer(delivered_ms) : json_null());
    json_object_set_new(d, "error", error && error[0] ? api_json_str(error) : json_null());
    if (job->deliver != JOB_DELIVER_AUTO)
        json_object_set_new(d, "deliver", json_string(job->deliver == JOB_DELIVER_PULL ? "pull"
                                                                                        : "kafka"));
    if (job->ttr_ms == JOB_TTR_ONCE_MS)
        json_object_set_new(d, "once", json_true());
    else if (job->ttr_ms > 0)
        json_object_set_new(d, "ttr_ms", json_integer(job->ttr_ms));
    if (job->callback)
        json_object_set_new(d, "callback", calljson_view(job->callback, state, job->due_ms));
    if (job->sched)
        json_object_set_new(d, "schedule", json_pack("{s:s, s:I}", "id", job->sched->id,
                                                     "generation", (json_int_t)job->sched->gen));
    return d;
}

void *api_batch_data(const struct api_job_answer *answers, size_t n)
{
    json_t *list = json_array();
    size_t added = 0, ok = 0;

    for (size_t i = 0; i < n; i++) {
        const struct api_job_answer *a = &answers[i];
        char *msg = strdup(a->message);
        if (msg)
            api_json_clean(msg);
        json_array_append_new(list, json_pack("{s:i, s:i, s:s, s:o}", "status", a->status,
                                              "code", a->code, "message", msg ? msg : "out of memory",
                                              "job_id", a->job_id[0] ? json_string(a->job_id)
                                                                     : json_null()));
        free(msg);
        ok += a->code == API_OK;
        added += a->code == API_OK && a->fresh;
    }
    return json_pack("{s:I, s:I, s:I, s:o}", "added", (json_int_t)added, "already",
                     (json_int_t)(ok - added), "failed", (json_int_t)(n - ok), "jobs", list);
}

void *api_stats_data(const struct pending_view *v, const struct levels *lv)
{
    json_t *d = json_object(), *level = json_object(), *due = json_object();

    for (int i = 0; i < lv->n; i++)
        json_object_set_new(level, lv->name[i], json_integer(v->by_level[i]));
    for (int k = 0; k < PENDING_DUES; k++)
        json_object_set_new(due, pending_due_names[k], json_integer(v->by_due[k]));
    json_object_set_new(d, "pending", json_integer(v->pending));
    json_object_set_new(d, "by_level", level);
    json_object_set_new(d, "by_due", due);
    json_object_set_new(d, "overdue_ms", json_integer(v->overdue_ms));
    return d;
}

void *api_release_data(int group, const char *owner)
{
    return json_pack("{s:i, s:s?}", "group", group, "owner", owner[0] ? owner : NULL);
}

void *api_pop_data(const struct api_popped *jobs, size_t n)
{
    json_t *list = json_array();

    for (size_t i = 0; i < n; i++) {
        const struct job *job = jobs[i].job;
        json_t *j = json_object();
        json_object_set_new(j, "id", json_string(job->id));
        json_object_set_new(j, "topic", json_string(job->topic));
        api_body_set(j, job->body, job->body_len);
        json_object_set_new(j, "key", json_string(job->key ? job->key : job->id));
        json_object_set_new(j, "headers", headers_object(job));
        json_object_set_new(j, "due_ms", json_integer(job->due_ms));
        json_object_set_new(j, "delay_ms", json_integer(job->delay_ms));
        json_object_set_new(j, "ttr_ms", json_integer(job->ttr_ms));
        json_object_set_new(j, "attempt", json_integer(jobs[i].attempt));
        json_object_set_new(j, "receipt", json_string(jobs[i].receipt));
        json_object_set_new(j, "reserved_until_ms", json_integer(jobs[i].until_ms));
        json_array_append_new(list, j);
    }
    return json_pack("{s:o}", "jobs", list);
}

void *api_pull_op_data(const char *id, const char *state, int64_t until_ms)
{
    json_t *d = json_pack("{s:s, s:s}", "job_id", id, "state", state);

    if (d && until_ms >= 0)
        json_object_set_new(d, "reserved_until_ms", json_integer(until_ms));
    return d;
}

void *api_pull_batch_data(const struct api_pull_answer *answers, size_t n)
{
    json_t *list = json_array();

    for (size_t i = 0; list && i < n; i++) {
        json_t *o = json_pack("{s:i, s:s, s:s}", "code", answers[i].code, "message",
                              answers[i].message, "job_id", answers[i].job_id);
        if (o && answers[i].data)
            json_object_update_missing(o, (json_t *)answers[i].data);
        json_array_append_new(list, o ? o : json_null());
    }
    return list ? json_pack("{s:o}", "jobs", list) : NULL;
}

void api_job_pull_state(void *data, const char *state, int64_t attempt, int64_t until_ms)
{
    json_t *p = json_pack("{s:s, s:I}", "state", state, "attempt", (json_int_t)attempt);

    if (!p)
        return;
    json_object_set_new(p, "reserved_until_ms", until_ms >= 0 ? json_integer(until_ms) : json_null());
    json_object_set_new((json_t *)data, "pull", p);
    json_object_set_new((json_t *)data, "state", json_string(state));
}

void api_stats_callbacks(void *data, int64_t waiting)
{
    json_object_set_new(data, "callbacks", json_pack("{s:I}", "waiting_for_retry", (json_int_t)waiting));
}

void api_stats_schedules(void *data, int64_t count)
{
    json_object_set_new(data, "schedules", json_pack("{s:I}", "count", (json_int_t)count));
}

void api_stats_redis(void *data, const char *policy, int evicts)
{
    json_object_set_new(data, "redis", json_pack("{s:s?, s:b}", "maxmemory_policy",
                                                 policy[0] ? policy : NULL, "evicts", evicts));
}

static json_t *pull_figures_json(const struct pull_figures *f)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:o, s:b}", "ready", (json_int_t)f->ready,
                     "delayed", (json_int_t)f->delayed, "reserved", (json_int_t)f->reserved,
                     "dead_letter", (json_int_t)f->buried, "oldest_ready_age_ms",
                     f->oldest_age_ms < 0 ? json_null() : json_integer(f->oldest_age_ms),
                     "paused", f->paused);
}

void *api_pull_topic_data(const char *topic, const struct pull_figures *f)
{
    json_t *d = pull_figures_json(f);

    if (d)
        json_object_set_new(d, "topic", json_string(topic));
    return d;
}

void *api_pull_paused_data(const char *topic, int paused)
{
    return json_pack("{s:s, s:b}", "topic", topic, "paused", paused);
}

/* The length of body's first len bytes without a UTF-8 sequence cut short at the end. */
static size_t utf8_whole(const char *body, size_t len)
{
    size_t k = 0;

    while (k < 3 && k < len && ((unsigned char)body[len - 1 - k] & 0xC0) == 0x80)
        k++;   /* continuation bytes at the end */
    if (k < len) {
        unsigned char lead = (unsigned char)body[len - 1 - k];
        size_t need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
        if (need > k)
            return len - 1 - k;
    }
    return len;
}

void *api_pull_jobs_data(const char *topic, const char *state, const struct pull_listed *jobs,
                         size_t n, int full)
{
    json_t *list = json_array(), *next = json_null();
    int reserved = strcmp(state, "reserved") == 0;

    for (size_t i = 0; list && i < n; i++) {
        const struct pull_listed *l = &jobs[i];
        int cut = l->body_size > (int64_t)l->body_len;
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:b}", "id", l->id, "state",
                              l->state, "attempt", (json_int_t)l->attempt, "due_ms",
                              (json_int_t)l->due_ms, reserved ? "reserved_until_ms" : "ready_at_ms",
                              (json_int_t)l->at_ms, "body_bytes", (json_int_t)l->body_size,
                              "body_truncated", cut);
        if (!j)
            continue;
        api_body_set(j, l->body, cut ? utf8_whole(l->body, l->body_len) : l->body_len);
        json_array_append_new(list, j);
    }
    if (full && n) {
        char c[24 + JOB_ID_MAX + 2];
        snprintf(c, sizeof(c), "%lld:%s", (long long)jobs[n - 1].at_ms, jobs[n - 1].id);
        next = json_string(c);
    }
    return json_pack("{s:s, s:s, s:o, s:o}", "topic", topic, "state", state, "jobs",
                     list ? list : json_array(), "next", next ? next : json_null());
}

void api_stats_pull(void *data, const char *topic, const struct pull_figures *f)
{
    json_t *pull = json_object_get(data, "pull");

    if (!pull) {
        pull = json_object();
        json_object_set_new(data, "pull", pull);
    }
    json_object_set_new(pull, topic, pull_figures_json(f));
}

/* A group's published partitions as {topic, partition, committed, end, lag, head_due_ms}. */
static json_t *group_status(const struct lease_group *g)
{
    json_t *parts = json_array();

    for (size_t i = 0; i < g->nparts; i++) {
        const struct lease_part *p = &g->parts[i];
        json_array_append_new(parts, json_pack(
            "{s:s,s:i,s:I,s:I,s:I,s:o}", "topic", p->topic, "partition", p->partition,
            "committed", (json_int_t)p->committed, "end", (json_int_t)p->end, "lag",
            (json_int_t)(p->committed >= 0 && p->end >= p->committed ? p->end - p->committed : -1),
            "head_due_ms", p->head_due_ms >= 0 ? json_integer(p->head_due_ms) : json_null()));
    }
    return parts;
}

/* Whether token's heartbeat is alive at now_ms. */
static int alive(const struct lease_view *v, const char *token, int64_t now_ms)
{
    for (size_t i = 0; i < v->nlive; i++)
        if (strcmp(v->live[i].token, token) == 0)
            return v->live[i].until_ms > now_ms;
    return 0;
}

void *api_claims_data(const struct lease_view *v, const struct config *cfg, int64_t now_ms)
{
    json_t *groups = json_array();

    for (size_t i = 0; i < v->ngroups; i++) {
        const struct lease_group *g = &v->groups[i];
        json_t *parts = json_array(), *o;
        for (int p = 0; p < cfg->delay.partitions; p++)
            if (cfg->delay.group_of[p] == g->group)
                json_array_append_new(parts, json_integer(p));
        o = json_pack("{s:i,s:o}", "group", g->group, "partitions", parts);
        json_object_set_new(o, "owner", g->owner[0] ? json_string(g->owner) : json_null());
        json_object_set_new(o, "ttl_ms", g->ttl_ms >= 0 ? json_integer(g->ttl_ms) : json_null());
        if (g->status_owner[0])
            json_object_set_new(o, "status_owner", json_string(g->status_owner));
        if (g->updated_ms >= 0)
            json_object_set_new(o, "updated_ms", json_integer(g->updated_ms));
        if (g->status_read)
            json_object_set_new(o, "status", group_status(g));
        if (g->owner[0])
            json_object_set_new(o, "owner_alive", json_boolean(alive(v, g->owner, now_ms)));
        json_array_append_new(groups, o);
    }
    return json_pack("{s:o}", "groups", groups);
}
