#include <stdio.h>

#include "core/envelope.h"
#include "unit.h"

/* A header whose value is the text v (or no value when v is NULL). */
static struct hdr H(const char *name, const char *v)
{
    return (struct hdr){ .name = name, .value = v, .len = v ? strlen(v) : 0 };
}

/* envelope_parse of n headers; returns its result, err gets the reason. */
static int parse(const struct hdr *h, size_t n, struct envelope *env, char *err)
{
    err[0] = '\0';
    return envelope_parse(h, n, env, err, 256);
}

static void parse_all_headers(void)
{
    struct hdr h[] = { H("trace", "x"), H(HDR_TOPIC, "orders"), H(HDR_ID, "job-1"),
                       H(HDR_DUE, "1700000000123"), H(HDR_HOPS, "2") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 5, &env, err), 0);
    CHECK_EQ_INT(env.topic_len, 6);
    CHECK(memcmp(env.topic, "orders", 6) == 0);
    CHECK_EQ_INT(env.id_len, 5);
    CHECK(memcmp(env.id, "job-1", 5) == 0);
    CHECK_EQ_INT(env.has_due, 1);
    CHECK_EQ_INT(env.due_ms, 1700000000123LL);
    CHECK_EQ_INT(env.hops, 2);
}

static void parse_topic_only(void)
{
    struct hdr h[] = { H(HDR_TOPIC, "orders") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 1, &env, err), 0);
    CHECK(env.id == NULL);
    CHECK_EQ_INT(env.has_due, 0);
    CHECK_EQ_INT(env.hops, 0);
}

static void parse_value_not_nul_terminated(void)
{
    const char buf[] = "orders123";
    struct hdr h[] = { { HDR_TOPIC, buf, 6 }, { HDR_DUE, buf + 6, 3 } };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 2, &env, err), 0);
    CHECK_EQ_INT(env.topic_len, 6);
    CHECK_EQ_INT(env.due_ms, 123);
}

static void parse_missing_topic(void)
{
    struct hdr h[] = { H(HDR_DUE, "5"), H("topic", "orders") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 2, &env, err), -1);
    CHECK_HAS(err, HDR_TOPIC);
    CHECK_EQ_INT(parse(h, 0, &env, err), -1);
    CHECK_HAS(err, HDR_TOPIC);
}

static void parse_empty_or_null_topic(void)
{
    struct hdr empty[] = { H(HDR_TOPIC, "") };
    struct hdr null[] = { H(HDR_TOPIC, NULL) };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(empty, 1, &env, err), -1);
    CHECK_HAS(err, HDR_TOPIC);
    CHECK_EQ_INT(parse(null, 1, &env, err), -1);
    CHECK_HAS(err, HDR_TOPIC);
}

static void parse_null_values_elsewhere(void)
{
    struct hdr other[] = { H(HDR_TOPIC, "orders"), H("trace", NULL) };
    struct hdr due[] = { H(HDR_TOPIC, "orders"), H(HDR_DUE, NULL) };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(other, 2, &env, err), 0);
    CHECK_EQ_INT(parse(due, 2, &env, err), -1);
    CHECK_HAS(err, HDR_DUE);
}

static void parse_repeated_header(void)
{
    struct hdr topic[] = { H(HDR_TOPIC, "a"), H(HDR_TOPIC, "b") };
    struct hdr due[] = { H(HDR_TOPIC, "a"), H(HDR_DUE, "1"), H(HDR_DUE, "1") };
    struct hdr id[] = { H(HDR_ID, "x"), H(HDR_TOPIC, "a"), H(HDR_ID, "y") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(topic, 2, &env, err), -1);
    CHECK_HAS(err, HDR_TOPIC);
    CHECK_HAS(err, "repeated");
    CHECK_EQ_INT(parse(due, 3, &env, err), -1);
    CHECK_HAS(err, HDR_DUE);
    CHECK_EQ_INT(parse(id, 3, &env, err), -1);
    CHECK_HAS(err, HDR_ID);
}

static void parse_tag(void)
{
    char long_tag[ENVELOPE_TAG_MAX + 2];
    struct hdr ok[] = { H(HDR_TOPIC, "a"), H(HDR_ID, "x"), H(HDR_TAG, "Tag-_0123456z") };
    struct hdr twice[] = { H(HDR_TOPIC, "a"), H(HDR_TAG, "t"), H(HDR_TAG, "t") };
    struct hdr empty[] = { H(HDR_TOPIC, "a"), H(HDR_TAG, "") };
    struct hdr too_long[2];
    struct envelope env;
    char err[256];

    memset(long_tag, 't', ENVELOPE_TAG_MAX + 1);
    long_tag[ENVELOPE_TAG_MAX + 1] = '\0';
    too_long[0] = H(HDR_TOPIC, "a");
    too_long[1] = H(HDR_TAG, long_tag);
    CHECK_EQ_INT(parse(ok, 3, &env, err), 0);
    CHECK_EQ_INT(env.tag_len, 13);
    CHECK(memcmp(env.tag, "Tag-_0123456z", 13) == 0);
    CHECK_EQ_INT(parse(ok, 2, &env, err), 0);
    CHECK(env.tag == NULL);
    CHECK_EQ_INT(parse(twice, 3, &env, err), -1);
    CHECK_STR(err, "header dq-tag is repeated");
    CHECK_EQ_INT(parse(empty, 2, &env, err), -1);
    CHECK_STR(err, "header dq-tag is empty");
    CHECK_EQ_INT(parse(too_long, 2, &env, err), -1);
    CHECK_STR(err, "header dq-tag is longer than 64 characters");
    too_long[1].len = ENVELOPE_TAG_MAX;
    CHECK_EQ_INT(parse(too_long, 2, &env, err), 0);
}

/* Key, body, every header and the record's overhead count; a byte more of any part is a byte
 * more in all. */
static void delivery_bytes(void)
{
    char topic[] = "orders", body[] = "0123456789", key[] = "kk", name[] = "trace", value[] = "abc";
    struct job_header h = { name, value };
    struct job job = { .id = "job-1", .topic = topic, .body = body, .body_len = 10 };
    size_t bare = envelope_delivery_bytes(&job);

    /* key (the id) 5, body 10, dq-id 5+5, dq-due-ms and dq-sent-ms 9+10 and 10+20 */
    CHECK_EQ_INT(bare, 128 + 5 + 10 + (5 + 5 + 10) + (9 + 20 + 10) + (10 + 20 + 10));
    job.key = key;
    CHECK_EQ_INT(envelope_delivery_bytes(&job), bare - 5 + 2);
    job.headers = &h;
    job.nheaders = 1;
    CHECK_EQ_INT(envelope_delivery_bytes(&job), bare - 5 + 2 + 5 + 3 + 10);
    job.body_len = 1000000;
    CHECK_EQ_INT(envelope_delivery_bytes(&job), bare - 5 + 2 + 5 + 3 + 10 - 10 + 1000000);
}

/* envelope_parse with dq-due-ms set to v must fail naming the header. */
static int due_refused(const char *v)
{
    struct hdr h[] = { H(HDR_TOPIC, "orders"), H(HDR_DUE, v) };
    struct envelope env;
    char err[256];

    if (parse(h, 2, &env, err) != -1)
        return 0;
    return strstr(err, HDR_DUE) != NULL;
}

static void parse_malformed_due(void)
{
    CHECK(due_refused("abc"));
    CHECK(due_refused("-5"));
    CHECK(due_refused("+5"));
    CHECK(due_refused("12x"));
    CHECK(due_refused(" 12"));
    CHECK(due_refused("1.5"));
    CHECK(due_refused(""));
    CHECK(due_refused("9223372036854775808"));
    CHECK(due_refused("99999999999999999999"));
}

static void parse_due_limits(void)
{
    struct hdr h[] = { H(HDR_TOPIC, "orders"), H(HDR_DUE, "9223372036854775807") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 2, &env, err), 0);
    CHECK_EQ_INT(env.due_ms, INT64_MAX);
    h[1] = H(HDR_DUE, "0");
    CHECK_EQ_INT(parse(h, 2, &env, err), 0);
    CHECK_EQ_INT(env.has_due, 1);
    CHECK_EQ_INT(env.due_ms, 0);
}

static void parse_hops(void)
{
    struct hdr h[] = { H(HDR_TOPIC, "orders"), H(HDR_HOPS, "3") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 2, &env, err), 0);
    CHECK_EQ_INT(env.hops, 3);
    h[1] = H(HDR_HOPS, "x");
    CHECK_EQ_INT(parse(h, 2, &env, err), -1);
    CHECK_HAS(err, HDR_HOPS);
    h[1] = H(HDR_HOPS, "-1");
    CHECK_EQ_INT(parse(h, 2, &env, err), -1);
    h[1] = H(HDR_HOPS, "99999999999");
    CHECK_EQ_INT(parse(h, 2, &env, err), -1);
    CHECK_HAS(err, HDR_HOPS);
}

static void is_control(void)
{
    CHECK_EQ_INT(envelope_is_control("dq-topic"), 1);
    CHECK_EQ_INT(envelope_is_control("dq-anything"), 1);
    CHECK_EQ_INT(envelope_is_control("dq-"), 1);
    CHECK_EQ_INT(envelope_is_control("dq"), 0);
    CHECK_EQ_INT(envelope_is_control("dqtopic"), 0);
    CHECK_EQ_INT(envelope_is_control("x-dq-topic"), 0);
    CHECK_EQ_INT(envelope_is_control(""), 0);
}

static void parse_int64_cases(void)
{
    int64_t v = -1;

    CHECK_EQ_INT(parse_int64("42", 2, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(parse_int64("425", 2, &v), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(parse_int64("", 0, &v), -1);
    CHECK_EQ_INT(parse_int64(NULL, 3, &v), -1);
    CHECK_EQ_INT(parse_int64("4 2", 3, &v), -1);
    CHECK_EQ_INT(parse_int64("12345678901234567890", 20, &v), -1);
}

/* Times of env in a 5s topic for a message stamped at 100000. */
static void times(const struct envelope *env, int64_t *act, int64_t *due)
{
    envelope_times(env, 100000, 5000, act, due);
}

static void times_direct_without_due(void)
{
    struct envelope env = { .topic = "t", .topic_len = 1 };
    int64_t act, due;

    times(&env, &act, &due);
    CHECK_EQ_INT(due, 105000);
    CHECK_EQ_INT(act, 105000);
}

static void times_direct_earlier_due_waits_its_delay(void)
{
    struct envelope env = { .topic = "t", .topic_len = 1, .has_due = 1, .due_ms = 101000 };
    int64_t act, due;

    times(&env, &act, &due);
    CHECK_EQ_INT(due, 105000);
    CHECK_EQ_INT(act, 105000);
}

static void times_direct_later_due(void)
{
    struct envelope env = { .topic = "t", .topic_len = 1, .has_due = 1, .due_ms = 190000 };
    int64_t act, due;

    times(&env, &act, &due);
    CHECK_EQ_INT(due, 190000);
    CHECK_EQ_INT(act, 105000);
    env.due_ms = 105000;
    times(&env, &act, &due);
    CHECK_EQ_INT(due, 105000);
    CHECK_EQ_INT(act, 105000);
}

static void times_routed_by_id(void)
{
    struct envelope env = { .topic = "t", .topic_len = 1, .id = "j", .id_len = 1,
                            .has_due = 1, .due_ms = 101000 };
    int64_t act, due;

    times(&env, &act, &due);
    CHECK_EQ_INT(due, 101000);
    CHECK_EQ_INT(act, 101000);
    env.due_ms = 190000;
    times(&env, &act, &due);
    CHECK_EQ_INT(due, 190000);
    CHECK_EQ_INT(act, 105000);
}

static void times_routed_by_hops(void)
{
    struct envelope env = { .topic = "t", .topic_len = 1, .hops = 1, .has_due = 1,
                            .due_ms = 100500 };
    int64_t act, due;

    times(&env, &act, &due);
    CHECK_EQ_INT(due, 100500);
    CHECK_EQ_INT(act, 100500);
}

static void times_routed_without_due(void)
{
    struct envelope env = { .topic = "t", .topic_len = 1, .id = "j", .id_len = 1 };
    int64_t act, due;

    times(&env, &act, &due);
    CHECK_EQ_INT(due, 105000);
    CHECK_EQ_INT(act, 105000);
}

/* Headers parsed, then timed: the whole path a direct message takes. */
static void times_from_parsed_headers(void)
{
    struct hdr h[] = { H(HDR_TOPIC, "orders"), H(HDR_DUE, "100001") };
    struct envelope env;
    int64_t act, due;
    char err[256];

    CHECK_EQ_INT(parse(h, 2, &env, err), 0);
    times(&env, &act, &due);
    CHECK_EQ_INT(due, 105000);
    h[1] = H(HDR_HOPS, "1");
    CHECK_EQ_INT(parse(h, 2, &env, err), 0);
    times(&env, &act, &due);
    CHECK_EQ_INT(due, 105000);
}

/* Found by fuzzing: a producer may set any CreateTime; timestamp + level must not overflow. */
static void times_saturate_at_int64_max(void)
{
    struct hdr h[] = { { "dq-topic", "a", 1 } };
    struct envelope env;
    char err[128];
    int64_t act, due;

    CHECK(envelope_parse(h, 1, &env, err, sizeof(err)) == 0);
    envelope_times(&env, INT64_MAX, 1000, &act, &due);
    CHECK(act == INT64_MAX && due == INT64_MAX);
    envelope_times(&env, INT64_MAX - 10, 1000, &act, &due);
    CHECK(act == INT64_MAX && due == INT64_MAX);
}

static void parse_pull_headers(void)
{
    struct hdr h[] = { H(HDR_TOPIC, "orders"), H(HDR_DELIVER, "pull"), H(HDR_TTR, "30000") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 3, &env, err), 0);
    CHECK_EQ_INT(env.deliver, JOB_DELIVER_PULL);
    CHECK_EQ_INT(env.ttr_ms, 30000);
    CHECK_EQ_INT(parse(h, 1, &env, err), 0);
    CHECK_EQ_INT(env.deliver, JOB_DELIVER_AUTO);
    CHECK_EQ_INT(env.ttr_ms, 0);
    h[1] = H(HDR_DELIVER, "later");
    CHECK_EQ_INT(parse(h, 3, &env, err), -1);
    CHECK(strstr(err, HDR_DELIVER) != NULL);
    h[1] = H(HDR_DELIVER, "kafka");
    h[2] = H(HDR_TTR, "999");   /* under a second */
    CHECK_EQ_INT(parse(h, 3, &env, err), -1);
    CHECK(strstr(err, HDR_TTR) != NULL);
    h[2] = H(HDR_TTR, "86400001");
    CHECK_EQ_INT(parse(h, 3, &env, err), -1);
}

/* dq-callback makes dq-topic optional, as dq-id does; a direct callback's retry carries its
 * id and count. */
static void parse_callback_headers(void)
{
    struct hdr h[] = { H(HDR_CALLBACK, "{\"url\":\"http://x/\"}"), H(HDR_CALL_ID, "t-0-7"),
                       H(HDR_CALL_ATTEMPTS, "2"), H(HDR_CALL_FIRST, "1700000000000") };
    struct hdr job[] = { H(HDR_ID, "job-1") };
    struct hdr bad[] = { H(HDR_CALLBACK, "{}"), H(HDR_CALL_ATTEMPTS, "two") };
    struct hdr none[] = { H(HDR_CALL_ID, "t-0-7") };
    struct envelope env;
    char err[256];

    CHECK_EQ_INT(parse(h, 4, &env, err), 0);
    CHECK(!env.topic && env.callback_len == 19 && memcmp(env.callback, "{\"url\"", 6) == 0);
    CHECK(env.call_id_len == 5 && memcmp(env.call_id, "t-0-7", 5) == 0);
    CHECK_EQ_INT(env.call_attempts, 2);
    CHECK_EQ_INT(env.call_first_ms, 1700000000000LL);
    CHECK_EQ_INT(parse(job, 1, &env, err), 0);   /* a job's record names its target */
    CHECK(!env.topic && !env.callback);
    CHECK_EQ_INT(parse(bad, 2, &env, err), -1);
    CHECK_HAS(err, HDR_CALL_ATTEMPTS);
    CHECK_EQ_INT(parse(none, 1, &env, err), -1);
    CHECK_HAS(err, "dq-topic is missing");
    h[1] = H(HDR_CALL_ID, "t-0-7\r\nX-Evil: 1");   /* it would be a header line of its own */
    CHECK_EQ_INT(parse(h, 4, &env, err), -1);
    CHECK_HAS(err, HDR_CALL_ID);
    h[1] = H(HDR_CALL_ID, "");
    CHECK_EQ_INT(parse(h, 4, &env, err), -1);
}

void unit_envelope(void)
{
    RUN(parse_callback_headers);
    RUN(parse_pull_headers);
    RUN(parse_all_headers);
    RUN(parse_topic_only);
    RUN(parse_value_not_nul_terminated);
    RUN(parse_missing_topic);
    RUN(parse_empty_or_null_topic);
    RUN(parse_null_values_elsewhere);
    RUN(parse_repeated_header);
    RUN(parse_malformed_due);
    RUN(parse_due_limits);
    RUN(parse_hops);
    RUN(parse_tag);
    RUN(delivery_bytes);
    RUN(is_control);
    RUN(parse_int64_cases);
    RUN(times_direct_without_due);
    RUN(times_direct_earlier_due_waits_its_delay);
    RUN(times_direct_later_due);
    RUN(times_routed_by_id);
    RUN(times_saturate_at_int64_max);
    RUN(times_routed_by_hops);
    RUN(times_routed_without_due);
    RUN(times_from_parsed_headers);
}
