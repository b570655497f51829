/* recur: when a recurring schedule fires, and what becomes of an occurrence that comes due:
 * run it or skip it, and when the next one is. A cron expression in a time zone (cron.h, tz.h)
 * or a fixed interval; start, end and a cap on runs; catch-up after a time nobody ran the
 * schedule (downtime, pause). Fire times are UTC epoch milliseconds; an occurrence is due at
 * its fire time plus its jitter. Pure logic. */
#ifndef DQ_RECUR_H
#define DQ_RECUR_H

#include <stddef.h>
#include <stdint.h>

#include "lib/cron.h"
#include "lib/tz.h"

#define RECUR_ID_MAX 100          /* "<id>@<13 digits>" stays a job id (JOB_ID_MAX) */
#define RECUR_CRON_MAX 255
#define RECUR_CATCH_UP_MAX 1000   /* the most missed occurrences catch_up "all" runs */
#define RECUR_PREVIEW_MAX 100     /* fire times one preview lists */

/* After a time in which the schedule's occurrences came due and none ran:
 * skip: the missed ones are not run, the schedule goes on at its next fire time after now;
 * once: the first missed one runs at once, then the next after now;
 * all:  every missed one runs, the most recent catch_up_max at most, one after the other. */
enum recur_catch_up { RECUR_SKIP, RECUR_ONCE, RECUR_ALL };

/* What an occurrence that comes due finds of its schedule: still the one that made it (its
 * generation, not paused), or changed, paused or deleted since: then it does not run. */
enum recur_verdict { RECUR_RUNS, RECUR_SCHED_CHANGED, RECUR_SCHED_PAUSED, RECUR_SCHED_GONE,
                     RECUR_OVERLAP };

/* Why an occurrence of that verdict was cancelled, in words. */
const char *recur_verdict_why(enum recur_verdict v);

struct recur_timing {
    char cron_text[RECUR_CRON_MAX + 1];   /* "" for an interval */
    struct cron cron;
    int64_t every_ms;          /* > 0 for an interval: fires at anchor_ms + k * every_ms */
    int64_t anchor_ms;         /* an interval's first fire time (its start, or when made) */
    const struct tz *tz;       /* a cron's zone; never NULL */
    int64_t start_ms;          /* no fire before it; 0: none */
    int64_t end_ms;            /* no fire after it; 0: none */
    int64_t max_runs;          /* 0: no limit */
    enum recur_catch_up catch_up;
    int64_t catch_up_max;      /* catch_up all: at most this many missed ones run */
    int overlap_skip;          /* overlap "skip": an occurrence whose predecessor has not
                                * finished (a callback retrying, a pull job not finished) is
                                * skipped; "allow" (0): it runs */
    int64_t jitter_ms;         /* 0..jitter_ms - 1 added to each due time, the same for the
                                * same occurrence on every instance */
};

/* The fire time strictly after after_ms (epoch ms), or -1 when there is none. */
int64_t recur_next(const struct recur_timing *t, int64_t after_ms);

/* What becomes of the occurrence of schedule id of fire time fire_ms that comes due at now_ms,
 * runs occurrences of the schedule having run before it. It was missed when the next one is due
 * (its fire time and jitter passed) too. */
struct recur_plan {
    int run;                   /* 1: deliver it; 0: skip it (missed, see catch_up) */
    int missed;                /* 1: a later occurrence was due too when it came due */
    int64_t next_ms;           /* the fire time of the occurrence after it; -1: none (ended) */
};
void recur_plan(const struct recur_timing *t, const char *id, int64_t fire_ms, int64_t runs,
                int64_t now_ms, struct recur_plan *out);

/* The fire time of a schedule's first occurrence made at now_ms: the next after now, or, when
 * it is resumed after a pause that cancelled its occurrence of fire time pending_ms (> 0) and
 * catch_up is once or all, that one if it has passed (it is then planned as missed when later
 * ones passed too). -1 when it never fires. */
int64_t recur_first(const struct recur_timing *t, int64_t now_ms, int64_t pending_ms);

/* The jitter of the occurrence of schedule id firing at fire_ms: 0 .. jitter_ms - 1, from a
 * hash of both, so that every instance computes the same. */
int64_t recur_jitter(const char *id, int64_t fire_ms, int64_t jitter_ms);

/* An occurrence due more than max_delay_ms after now is parked: it is not a job yet (a job may
 * not wait longer), and its schedule's index of due times names when the sweep, which looks
 * at an index time up to lag_ms after it, is to make it: up to a minute after due -
 * max_delay_ms, and early enough for the job to be made before it is due. The index time of an
 * occurrence due at due_ms: due_ms itself when it is not parked. */
int recur_parked(int64_t due_ms, int64_t now_ms, int64_t max_delay_ms);
int64_t recur_index_ms(int64_t due_ms, int64_t now_ms, int64_t max_delay_ms, int64_t lag_ms);

/* The name of a catch_up, and back: 0, or -1 when it is none of skip, once, all. */
const char *recur_catch_up_name(enum recur_catch_up c);
int recur_catch_up_of(const char *s, enum recur_catch_up *out);

#endif
