/* pullq_link: the inside of pullq, shared by its files and nothing else: pullq.c (the keys, the
 * registry, the pipelines) and pullq_lua.c (the scripts' text). Callers use
 * include/pull/pullq.h. */
#ifndef DQ_PULLQ_LINK_H
#define DQ_PULLQ_LINK_H

#include "core/job.h"

/* The pull queues' scripts, loaded once per connection by conn and called by their SHA-1. */
enum script { S_READY, S_POP, S_OP, S_SWEEP, S_SENT, S_FORGET, S_COUNT };

/* The text of each script, by enum script (pullq_lua.c). */
extern const char *const pullq_script_text[S_COUNT];

#endif
