/* topics: one pull topic's routes, served on the workers: its figures, a page of its jobs, and
 * pause and resume. The contract is in include/intake/intake.h; the shared inside is
 * include/intake/intake_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/answer.h"
#include "core/api.h"
#include "core/apidata.h"
#include "lib/log.h"
#include "lib/workers.h"
#include "pull/pullq.h"
#include "intake/intake_link.h"

#define LOG_MODULE "intake"

void intake_pull_topic(struct intake *in, const struct intake_topic_request *r, answer_fn done,
                       void *opaque)
{
    struct api_pull_topic *ask = calloc(1, sizeof(*ask));
    struct task *t = calloc(1, sizeof(*t));
    struct api_error e;

    if (!ask || !t) {
        free(ask);
        free(t);
        answer_send(done, opaque, 503, API_UNAVAILABLE, "pull topic: out of memory", NULL);
        return;
    }
    if (api_parse_pull_topic(r->path, r->post, r->state, r->limit, r->after, &in->limits, ask,
                             &e) < 0) {
        free(ask);
        free(t);
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    *t = (struct task){ .kind = T_PULL_TOPIC, .ask = ask, .done = done, .opaque = opaque };
    workers_queue(in->workers, t);
}

static void answer_figures(struct pullq *pq, struct task *t)
{
    const char *topic = t->ask->topic;
    struct pull_figures f;

    pullq_figures(pq, 1, &topic, &f);
    if (f.ready < 0)
        answer_send(t->done, t->opaque, 503, API_UNAVAILABLE,
                    "pull topic: redis did not answer", NULL);
    else
        answer_send(t->done, t->opaque, 200, API_OK, "ok", api_pull_topic_data(topic, &f));
}

static void answer_jobs(struct pullq *pq, struct task *t)
{
    const struct api_pull_topic *a = t->ask;
    struct pullq_list l = { .topic = a->topic, .state = a->state, .limit = a->limit,
                            .after_ms = a->after_ms, .after_id = a->has_after ? a->after_id : NULL };
    char msg[320];

    if (pullq_list(pq, &l) < 0) {
        snprintf(msg, sizeof(msg), "pull topic jobs: %s", l.err);
        answer_send(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
        return;
    }
    answer_send(t->done, t->opaque, 200, API_OK, "ok",
                api_pull_jobs_data(a->topic, a->state, l.jobs, l.n, l.n == (size_t)a->limit));
    pullq_list_release(&l);
}

static void answer_pause(struct pullq *pq, struct task *t)
{
    int paused = t->ask->ask == API_TOPIC_PAUSE, changed = 0;
    char err[256], msg[320];

    if (pullq_pause(pq, t->ask->topic, paused, &changed, err, sizeof(err)) < 0) {
        snprintf(msg, sizeof(msg), "%s failed: %s", paused ? "pause" : "resume", err);
        answer_send(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
        return;
    }
    if (changed)
        log_info("pull topic=%s %s", t->ask->topic, paused ? "paused" : "resumed");
    snprintf(msg, sizeof(msg), "%s%s", changed ? "" : "already ", paused ? "paused" : "resumed");
    answer_send(t->done, t->opaque, 200, API_OK, msg, api_pull_paused_data(t->ask->topic, paused));
}

void intake_run_topic_asks(struct intake *in, int worker, struct task **ts, size_t n)
{
    struct pullq *pq = n ? intake_worker_pullq(in, worker) : NULL;

    for (size_t i = 0; i < n; i++) {
        struct task *t = ts[i];
        if (!pq)
            intake_drop_task(NULL, t, "out of memory");
        else {
            if (t->ask->ask == API_TOPIC_FIGURES)
                answer_figures(pq, t);
            else if (t->ask->ask == API_TOPIC_JOBS)
                answer_jobs(pq, t);
            else
                answer_pause(pq, t);
            free(t->ask);
            free(t);
        }
    }
}
