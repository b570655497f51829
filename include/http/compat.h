/* compat: the routes of the delay queues delayqd replaces, behind their compat switches, so
 * that their clients work unchanged. Each route is translated into the jobs module's own
 * requests, and its answer written byte for byte as that queue's Go server writes it.
 *   compat.ouqiang (ouqiang/delay-queue): POST /push {topic, id, delay s, ttr s, body} adds a
 *   pull job, replacing the job of its id there; /pop {"topic": "a,b"} (16 topics at most)
 *   waits up to 178 s for a job of those topics and answers data {id, body} or null; /finish
 *   and /delete {id} remove a pull job and free its id (any other job is left alone, answered
 *   as none); /get {id} answers the job {topic, id, delay (due time, Unix s), ttr, body} or
 *   null. Ids are global, any string. Every answer is HTTP 200, text/plain, with {"code": 0 |
 *   1, "message", "data"}, as there.
 *   compat.changsongl (changsongl/delay-queue): POST /topic/<topic>/job {id, delay s, ttr s (0:
 *   handed out once, never again), body, override} adds a pull job (or replaces the one there);
 *   GET /topic/<topic>/job?timeout=<s> (none: at once) pops one and answers it under "data"
 *   {body, delay, id, topic, ttr}, its own delay and ttr; PUT /topic/<topic>/job/<id> finishes
 *   it, DELETE removes it, both freeing its id (a job of the id that is no pull job of <topic>
 *   is left alone, answered as none). Ids live in their topic, kept as they were sent.
 *   Every answer is HTTP 200, application/json, with {"data"?, "message", "success"}, as there. */
#ifndef DQ_COMPAT_H
#define DQ_COMPAT_H

#include <stddef.h>

#include "core/config.h"
#include "intake/intake.h"

#define COMPAT_OUQIANG_WAIT_MS 178000   /* ouqiang's pop holds this long: 2 s under the 180 s
                                         * its clients wait */

#define COMPAT_TOPIC_PREFIX "/topic/"   /* changsongl's routes start so */

/* A request to a compat route, as it came (all strings valid for the call). */
struct compat_request {
    const char *method;         /* "GET", "POST", "PUT" or "DELETE" */
    const char *path;           /* the URL's path; NULL when it could not be kept */
    const char *timeout;        /* the query's timeout value, or NULL */
    const char *body;
    size_t len;
};

/* A compat answer: HTTP status, that queue's JSON text (malloc'd; the callee frees it) and its
 * Content-Type (static). */
typedef void (*compat_done_fn)(void *opaque, int status, char *text, const char *type);

/* Serves a request to a compat route; done is called exactly once. A waiting pop whose asker
 * is gone (wanted says 0; NULL: never) is dropped and takes nothing. */
void compat_serve(struct intake *jobs, const struct config *cfg, const struct compat_request *req,
                  compat_done_fn done, answer_wanted_fn wanted, void *opaque);

#endif
