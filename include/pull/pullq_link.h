/* pullq_link: the inside of pullq, shared by its files and nothing else: pullq.c (the keys and
 * the pipelines of the scripts), registry.c (the registry of pull topics, the channel, the
 * counts) and pullq_lua.c (the scripts' text). Callers use include/pull/pullq.h. */
#ifndef DQ_PULLQ_LINK_H
#define DQ_PULLQ_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "pull/pullq.h"
#include "redis/conn.h"

#define KEY_MAX (CONFIG_STR_MAX + 2 * TOPIC_NAME_MAX + JOB_ID_MAX + 32)

/* The pull queues' scripts, loaded once per connection by conn and called by their SHA-1. */
enum script { S_READY, S_POP, S_OP, S_SWEEP, S_SENT, S_FORGET, S_PEEK, S_FIGURES, S_PAUSE,
              S_LIST, S_COUNT };

/* The text of each script, by enum script (pullq_lua.c). */
extern const char *const pullq_script_text[S_COUNT];

/* A topic this connection put in the registry, and when. */
struct noted {
    char *topic;
    int64_t at_ms;           /* monotonic */
};

struct pullq {
    const struct config *cfg;
    struct conn *db;
    struct noted *noted;
    size_t nnoted;
    int migrated;            /* the registry of an older delayqd was moved (or was none) */
};

/* pullq.c */
/* The key of part ("ready", "reserved", "dead", or "j:" for a job's hash, then id) of topic. */
void pullq_topic_key(const struct pullq *q, const char *topic, const char *part, const char *id,
                     char *out, size_t outlen);
/* A string reply's bytes, NUL-terminated (caller frees; NULL when out of memory), its length
 * into *len (NULL: not wanted). */
char *pullq_dup_reply(const struct conn_reply *r, size_t *len);
/* An integer reply, or a string of one, as a number (0 when neither). */
int64_t pullq_num_of(const struct conn_reply *r);

/* registry.c */
/* Puts topic in the registry (again when this connection put it there over
 * PULLQ_REGISTER_MS ago), its write confirmed as a ready job's is. 0, or -1 with err. */
int pullq_note_topic(struct pullq *q, const char *topic, char *err, size_t errlen);

#endif
