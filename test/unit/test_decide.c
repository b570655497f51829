/* decide_message: every action, and the order in which the faults are looked at. */
#include <stdio.h>

#include "core/decide.h"
#include "unit.h"

static struct decide_facts due_job(void)
{
    return (struct decide_facts){ .envelope_ok = 1, .target = TARGET_OK, .has_id = 1, .id_valid = 1,
                                 .due_ms = 10000, .now_ms = 10000, .max_delay_ms = 86400000,
                                 .smallest_level_ms = 1000 };
}

static void due_messages_are_claimed_or_delivered(void)
{
    struct decide_facts f = due_job();
    enum dlq_reason why = DLQ_REASONS;

    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_CLAIM);
    f.now_ms = 20000;   /* late: still delivered */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_CLAIM);
    f.has_id = 0;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DELIVER);
    CHECK_EQ_INT(why, DLQ_REASONS);   /* untouched unless dead-lettered */
}

static void the_time_left_picks_move_wait_or_now(void)
{
    struct decide_facts f = due_job();
    enum dlq_reason why;

    f.now_ms = f.due_ms - 1000;   /* exactly the smallest level left: one more hop */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_MOVE);
    f.now_ms = f.due_ms - 999;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_WAIT);
    f.now_ms = f.due_ms - 1;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_WAIT);
    f.now_ms = f.due_ms - 3600000;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_MOVE);
}

static void faults_dead_letter_with_their_reason(void)
{
    struct decide_facts f = due_job();
    enum dlq_reason why;

    f.envelope_ok = 0;
    f.target = TARGET_INVALID;   /* the envelope is looked at first */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_ENVELOPE);
    f = due_job();
    f.target = TARGET_INVALID;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_TOPIC);
    f.target = TARGET_DELAY_TOPIC;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_LOOP);
    f.target = TARGET_DEAD_LETTER;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_DEAD_LETTER_TOPIC);
    f = due_job();
    f.due_ms = f.now_ms + f.max_delay_ms + 1;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_TOO_FAR);
    f.due_ms = f.now_ms + f.max_delay_ms;   /* at the limit: moved down */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_MOVE);
    f = due_job();
    f.id_valid = 0;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_ID);
    f.due_ms = f.now_ms + 500;    /* an invalid id waits until due like any other */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_WAIT);
}

static void only_direct_messages_are_refused_for_good(void)
{
    struct decide_facts f = due_job();
    enum dlq_reason why;

    f.refused_for_good = 1;   /* a job's refusals are the record's to tell (its mark) */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_CLAIM);
    f.has_id = 0;
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
    CHECK_EQ_INT(why, DLQ_REFUSED);
    f.due_ms = f.now_ms + 5000;   /* even before it is due: a refused move */
    CHECK_EQ_INT(decide_message(&f, &why), DECIDE_DEAD);
}

static void pull_topics_by_name_pattern_or_ask(void)
{
    struct config cfg;

    config_defaults(&cfg);
    CHECK_EQ_INT(decide_pulls(&cfg, "orders", 6, JOB_DELIVER_AUTO), 0);
    CHECK_EQ_INT(decide_pulls(&cfg, "orders", 6, JOB_DELIVER_PULL), 1);
    snprintf(cfg.pull.topics[0], CONFIG_STR_MAX, "mail");
    snprintf(cfg.pull.topics[1], CONFIG_STR_MAX, "work.*");
    cfg.pull.ntopics = 2;
    CHECK_EQ_INT(decide_pulls(&cfg, "mail", 4, JOB_DELIVER_AUTO), 1);
    CHECK_EQ_INT(decide_pulls(&cfg, "mailer", 4, JOB_DELIVER_AUTO), 1);   /* len counts */
    CHECK_EQ_INT(decide_pulls(&cfg, "mailer", 6, JOB_DELIVER_AUTO), 0);
    CHECK_EQ_INT(decide_pulls(&cfg, "work.resize", 11, JOB_DELIVER_AUTO), 1);
    CHECK_EQ_INT(decide_pulls(&cfg, "work.resize", 11, JOB_DELIVER_KAFKA), 0);
    CHECK_EQ_INT(decide_pulls(&cfg, "works", 5, JOB_DELIVER_AUTO), 0);
}

/* One target at a time: the callback until it answered 2xx, then the topic's kind. */
static void a_due_job_goes_to_one_target(void)
{
    static struct config cfg;

    snprintf(cfg.pull.topics[0], sizeof(cfg.pull.topics[0]), "work.*");
    cfg.pull.ntopics = 1;
    CHECK_EQ_INT(decide_dest(&cfg, "orders", 6, JOB_DELIVER_AUTO, 0, 0), DEST_KAFKA);
    CHECK_EQ_INT(decide_dest(&cfg, "work.mail", 9, JOB_DELIVER_AUTO, 0, 0), DEST_PULL);
    CHECK_EQ_INT(decide_dest(&cfg, "work.mail", 9, JOB_DELIVER_KAFKA, 0, 0), DEST_KAFKA);
    CHECK_EQ_INT(decide_dest(&cfg, "orders", 6, JOB_DELIVER_PULL, 0, 0), DEST_PULL);
    CHECK_EQ_INT(decide_dest(&cfg, "orders", 6, JOB_DELIVER_PULL, 1, 0), DEST_CALLBACK);
    CHECK_EQ_INT(decide_dest(&cfg, "orders", 6, JOB_DELIVER_PULL, 1, 1), DEST_PULL);
    CHECK_EQ_INT(decide_dest(&cfg, "work.mail", 9, JOB_DELIVER_AUTO, 1, 1), DEST_PULL);
    CHECK_EQ_INT(decide_dest(&cfg, "orders", 6, JOB_DELIVER_AUTO, 1, 1), DEST_KAFKA);
    CHECK_EQ_INT(decide_dest(&cfg, "", 0, JOB_DELIVER_AUTO, 1, 0), DEST_CALLBACK);
    CHECK_EQ_INT(decide_dest(&cfg, "", 0, JOB_DELIVER_AUTO, 1, 1), DEST_DONE);
}

void unit_route(void)
{
    RUN(a_due_job_goes_to_one_target);
    RUN(pull_topics_by_name_pattern_or_ask);
    RUN(due_messages_are_claimed_or_delivered);
    RUN(the_time_left_picks_move_wait_or_now);
    RUN(faults_dead_letter_with_their_reason);
    RUN(only_direct_messages_are_refused_for_good);
}
