/* answer: what a request came to, as every module answers it. Typed for the callers inside
 * delayqd (the compatibility routes, redrive, schedules), which act on `is`, never on the
 * message's words; the HTTP layer alone renders it as the {"code","message","data"} text. */
#ifndef DQ_ANSWER_H
#define DQ_ANSWER_H

#include "core/apijson.h"

/* What came of a request. */
enum answer_is {
    ANSWER_DONE,        /* did what was asked */
    ANSWER_NO_JOB,      /* there is no such job (the native API answers 200 "no such job") */
    ANSWER_ALREADY,     /* nothing was left to do: a job removed before */
    ANSWER_EXISTS,      /* an add's id is taken by another job */
    ANSWER_CONFLICT,    /* the job's state does not allow it (delivered, reserved, ...) */
    ANSWER_REFUSED,     /* the request is wrong: sending it again will not help */
    ANSWER_FAILED,      /* Redis, Kafka or memory failed: sending it again may help */
};

struct answer {
    int status;             /* the HTTP status */
    int code;               /* enum api_code */
    enum answer_is is;
    const char *message;
    void *data;             /* a json_t (see apidata.h) the callee may read but not keep; NULL */
};

/* Called exactly once per request, from whatever thread has its answer. */
typedef void (*answer_fn)(void *opaque, const struct answer *a);

/* For a request that may wait long (a pop): 1 while the one who asked still waits for the
 * answer, 0 once it is gone (its client closed the connection). Called from any thread, with
 * the opaque of its answer_fn, until that is called. */
typedef int (*answer_wanted_fn)(void *opaque);

/* The `is` an answer of status has when nothing more particular is known. */
static inline enum answer_is answer_is_of(int status)
{
    if (status >= 200 && status < 300)
        return ANSWER_DONE;
    if (status == 404)
        return ANSWER_NO_JOB;
    if (status == 409)
        return ANSWER_CONFLICT;
    if (status >= 400 && status < 500)
        return ANSWER_REFUSED;
    return ANSWER_FAILED;
}

/* Answers done with is, status, code, message and data, then frees data (NULL: none). */
void answer_give(answer_fn done, void *opaque, enum answer_is is, int status, int code,
                 const char *message, void *data);

/* The same with the `is` of status. */
void answer_send(answer_fn done, void *opaque, int status, int code, const char *message,
                 void *data);

#endif
