/* parked: the pops that wait for a job, oldest first, each also in a queue of every topic it
 * waits on, found by a hash of the topic: an announcement of a topic reaches its oldest pops
 * without a look at any other. Part of pull; the shared inside is include/pull/pull_link.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/fnv.h"
#include "pull/pull_link.h"

#define BUCKETS 4096   /* topic queues' hash buckets (chained) */

/* The pops waiting on one topic, oldest first. */
struct waitq {
    char topic[TOPIC_NAME_MAX + 1];
    struct wnode *head, *tail;
    struct waitq *chain;
};

static size_t bucket_of(const char *topic)
{
    return fnv1a(FNV1A_BASIS, topic) % BUCKETS;
}

/* The queue of topic; made when make is 1 (NULL when out of memory, or none and make 0). */
static struct waitq *queue_of(struct pull *p, const char *topic, int make)
{
    struct waitq **b, *q;

    if (!p->waitqs && (!make || !(p->waitqs = calloc(BUCKETS, sizeof(*p->waitqs)))))
        return NULL;
    b = &p->waitqs[bucket_of(topic)];
    for (q = *b; q; q = q->chain)
        if (strcmp(q->topic, topic) == 0)
            return q;
    if (!make || !(q = calloc(1, sizeof(*q))))
        return NULL;
    memcpy(q->topic, topic, strlen(topic) + 1);
    q->chain = *b;
    *b = q;
    p->nwaitqs++;
    return q;
}

static void drop_queue(struct pull *p, struct waitq *q)
{
    struct waitq **at = &p->waitqs[bucket_of(q->topic)];

    while (*at != q)
        at = &(*at)->chain;
    *at = q->chain;
    p->nwaitqs--;
    free(q);
}

int parked_add(struct pull *p, struct req *r, int front)
{
    int t;

    for (t = 0; t < r->pop.ntopics; t++) {
        struct wnode *w = &r->wn[t];
        struct waitq *q = queue_of(p, r->pop.topics[t], 1);
        if (!q)
            break;
        *w = (struct wnode){ .r = r, .q = q };
        if (front) {
            w->next = q->head;
            *(q->head ? &q->head->prev : &q->tail) = w;
            q->head = w;
        } else {
            w->prev = q->tail;
            *(q->tail ? &q->tail->next : &q->head) = w;
            q->tail = w;
        }
    }
    r->nwn = t;
    if (t < r->pop.ntopics) {   /* out of memory: not parked */
        parked_remove(p, r);
        return -1;
    }
    r->prev = front ? NULL : p->parked_tail;
    r->next = front ? p->parked : NULL;
    *(r->prev ? &r->prev->next : &p->parked) = r;
    *(r->next ? &r->next->prev : &p->parked_tail) = r;
    r->parked = 1;
    return 0;
}

void parked_remove(struct pull *p, struct req *r)
{
    for (int t = 0; t < r->nwn; t++) {
        struct wnode *w = &r->wn[t];
        struct waitq *q = w->q;
        *(w->prev ? &w->prev->next : &q->head) = w->next;
        *(w->next ? &w->next->prev : &q->tail) = w->prev;
        if (!q->head)
            drop_queue(p, q);
    }
    r->nwn = 0;
    if (!r->parked)
        return;
    *(r->prev ? &r->prev->next : &p->parked) = r->next;
    *(r->next ? &r->next->prev : &p->parked_tail) = r->prev;
    r->prev = r->next = NULL;
    r->parked = 0;
}

struct req *parked_first_of(struct pull *p, const char *topic)
{
    struct waitq *q = queue_of(p, topic, 0);

    return q && q->head ? q->head->r : NULL;
}

const char **parked_topics(struct pull *p, size_t *n)
{
    const char **out = malloc((p->nwaitqs ? p->nwaitqs : 1) * sizeof(*out));

    *n = 0;
    for (size_t b = 0; out && p->waitqs && b < BUCKETS; b++)
        for (struct waitq *q = p->waitqs[b]; q; q = q->chain)
            out[(*n)++] = q->topic;
    return out;
}

void parked_free(struct pull *p)
{
    for (size_t b = 0; p->waitqs && b < BUCKETS; b++)
        while (p->waitqs[b])
            drop_queue(p, p->waitqs[b]);
    free(p->waitqs);
    p->waitqs = NULL;
}
