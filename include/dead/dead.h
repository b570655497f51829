/* dead: the dead-letter routes. Lists the dead-letter topic newest first (deadq.h), shows one
 * letter whole, and redrives letters: each is added again as a job (from its record when that is
 * still there and failed, else from the letter's own topic, body, key, headers and callback),
 * at most once per letter (redrive.h). Requests are queued to one worker, which holds its own
 * Kafka consumer (made at the first request) and Redis connections: no HTTP thread waits on
 * Kafka or Redis. Thread-safe. */
#ifndef DQ_DEAD_H
#define DQ_DEAD_H

#include <stddef.h>

#include "core/config.h"
#include "intake/intake.h"

struct dead;

/* Starts the worker; jobs (not owned) must outlive it. NULL with err set. */
struct dead *dead_new(const struct config *cfg, struct intake *jobs, char *err, size_t errlen);
/* Answers the queued requests 503 and waits for the running one. */
void dead_free(struct dead *d);

/* A request to /delay-queue/api/dead[/...]: the method, the path below that prefix ("",
 * "/<partition>/<offset>", "/redrive"), the body, and the query values it may take (NULL when
 * absent). */
struct dead_request {
    const char *method;
    const char *path;
    const char *body;
    size_t len;
    const char *limit, *before, *topic, *reason;
};

/* The methods a path below /delay-queue/api/dead takes, as an Allow header lists them; NULL
 * for a path that is none of its routes. */
const char *dead_allow(const char *path);

/* Serves r; done is called exactly once, at once for a bad request, else from the worker. */
void dead_serve(struct dead *d, const struct dead_request *r, answer_fn done, void *opaque);

#endif
