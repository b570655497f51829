#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>
#include <msgpack.h>

#include "core/api.h"
#include "core/apidata.h"
#include "core/apijson.h"
#include "core/calljson.h"
#include "core/pending.h"
#include "unit.h"

#define NOW 1700000000000LL
#define MAX_DELAY_MS (2592000LL * 1000)   /* the default job.max_delay_s */

/* Limits with delay topics delay_topic_1s and delay_topic_5s. */
static const struct api_limits *limits(void)
{
    static const char *const names[] = { "1s", "5s" };
    static struct levels lv;
    static struct api_limits lim;
    static struct config_endpoint endpoint;
    char err[256];

    if (!lim.levels) {
        if (levels_init(&lv, names, 2, "delay_topic_%s", err, sizeof(err)) < 0)
            abort();
        lim.levels = &lv;
        lim.dlq_topic = "delay_topic_dlq";
        lim.max_delay_ms = MAX_DELAY_MS;
        snprintf(endpoint.name, sizeof(endpoint.name), "billing");
        snprintf(endpoint.url, sizeof(endpoint.url), "https://billing.example/hook");
        lim.endpoints = &endpoint;
        lim.nendpoints = 1;
    }
    return &lim;
}

static int add(const char *json, struct job *j, int *id_given, struct api_error *e)
{
    memset(e, 0, sizeof(*e));
    return api_parse_add(json, strlen(json), limits(), NOW, j, id_given, e);
}

/* api_parse_add of json must fail with status, code and a message containing want. */
static int add_fails(const char *json, int status, int code, const char *want)
{
    struct job j;
    struct api_error e;
    int id_given, rc = add(json, &j, &id_given, &e);

    job_release(&j);
    if (rc == -1 && e.status == status && e.code == code && strstr(e.message, want))
        return 1;
    fprintf(stderr, "add %s: rc %d status %d code %d message \"%s\"; wanted %d %d \"%s\"\n", json,
            rc, e.status, e.code, e.message, status, code, want);
    return 0;
}

/* api_parse_add of json must succeed; the job is the caller's. */
static int add_ok(const char *json, struct job *j, int *id_given)
{
    struct api_error e;

    if (add(json, j, id_given, &e) == 0)
        return 1;
    fprintf(stderr, "add %s: status %d code %d message \"%s\"\n", json, e.status, e.code,
            e.message);
    job_release(j);
    return 0;
}

static void add_go_delayqueue_body(void)
{
    struct job j;
    int given = -1;

    CHECK(add_ok("{\"topic\":\"orders\",\"delay\":30,\"body\":\"hello\"}", &j, &given));
    CHECK_EQ_INT(given, 0);
    CHECK_STR(j.id, "");
    CHECK_STR(j.topic, "orders");
    CHECK_EQ_INT(j.delay_ms, 30000);
    CHECK_EQ_INT(j.due_ms, NOW + 30000);
    CHECK_EQ_INT(j.created_ms, NOW);
    CHECK_EQ_INT(j.body_len, 5);
    CHECK_STR(j.body, "hello");
    CHECK(j.key == NULL);
    CHECK_EQ_INT(j.nheaders, 0);
    job_release(&j);
}

static void add_with_id(void)
{
    struct job j;
    int given = 0;

    CHECK(add_ok("{\"id\":\"order:1\",\"topic\":\"orders\",\"delay\":1,\"body\":\"x\"}", &j, &given));
    CHECK_EQ_INT(given, 1);
    CHECK_STR(j.id, "order:1");
    job_release(&j);
}

static void add_empty_or_null_id_is_generated(void)
{
    struct job j;
    int given = 1;

    CHECK(add_ok("{\"id\":\"\",\"topic\":\"orders\",\"delay\":1,\"body\":\"x\"}", &j, &given));
    CHECK_EQ_INT(given, 0);
    CHECK_STR(j.id, "");
    job_release(&j);
    given = 1;
    CHECK(add_ok("{\"id\":null,\"topic\":\"orders\",\"delay\":1,\"body\":\"x\"}", &j, &given));
    CHECK_EQ_INT(given, 0);
    job_release(&j);
}

static void add_bad_id(void)
{
    char json[512], id[JOB_ID_MAX + 2];

    memset(id, 'a', JOB_ID_MAX + 1);
    id[JOB_ID_MAX + 1] = '\0';
    snprintf(json, sizeof(json), "{\"id\":\"%s\",\"topic\":\"t\",\"delay\":1,\"body\":\"\"}", id);
    CHECK(add_fails(json, 400, API_BAD_REQUEST, "id"));
    CHECK(add_fails("{\"id\":\"a b\",\"topic\":\"t\",\"delay\":1}", 400, API_BAD_REQUEST, "id"));
    CHECK(add_fails("{\"id\":7,\"topic\":\"t\",\"delay\":1}", 400, API_BAD_REQUEST, "id"));
    CHECK(add_fails("{\"id\":\"a\\u0000b\",\"topic\":\"t\",\"delay\":1}", 400, API_BAD_REQUEST,
                    ""));
}

static void add_id_of_max_length(void)
{
    char json[512], id[JOB_ID_MAX + 1];
    struct job j;
    int given = 0;

    memset(id, 'a', JOB_ID_MAX);
    id[JOB_ID_MAX] = '\0';
    snprintf(json, sizeof(json), "{\"id\":\"%s\",\"topic\":\"t\",\"delay\":1,\"body\":\"\"}", id);
    CHECK(add_ok(json, &j, &given));
    CHECK_STR(j.id, id);
    job_release(&j);
}

static void add_delay_ms(void)
{
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"t\",\"delay_ms\":1500,\"body\":\"x\"}", &j, &given));
    CHECK_EQ_INT(j.delay_ms, 1500);
    CHECK_EQ_INT(j.due_ms, NOW + 1500);
    job_release(&j);
    CHECK(add_ok("{\"topic\":\"t\",\"delay\":0,\"body\":\"x\"}", &j, &given));
    CHECK_EQ_INT(j.due_ms, NOW);
    job_release(&j);
}

static void add_deliver_at_ms(void)
{
    char json[256];
    struct job j;
    int given;

    snprintf(json, sizeof(json), "{\"topic\":\"t\",\"deliver_at_ms\":%lld,\"body\":\"x\"}",
             NOW + 5000);
    CHECK(add_ok(json, &j, &given));
    CHECK_EQ_INT(j.delay_ms, 5000);
    CHECK_EQ_INT(j.due_ms, NOW + 5000);
    job_release(&j);
    snprintf(json, sizeof(json), "{\"topic\":\"t\",\"deliver_at_ms\":%lld,\"body\":\"x\"}",
             NOW - 60000);
    CHECK(add_ok(json, &j, &given));
    CHECK_EQ_INT(j.delay_ms, 0);
    CHECK_EQ_INT(j.due_ms, NOW);
    job_release(&j);
}

static void add_needs_exactly_one_time(void)
{
    CHECK(add_fails("{\"topic\":\"t\",\"body\":\"x\"}", 400, API_BAD_REQUEST, "delay"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"delay_ms\":1000}", 400, API_BAD_REQUEST,
                    "only one"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"deliver_at_ms\":1}", 400, API_BAD_REQUEST,
                    "only one"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay_ms\":1,\"deliver_at_ms\":1}", 400, API_BAD_REQUEST,
                    "only one"));
}

static void add_negative_delay(void)
{
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":-1}", 400, API_BAD_DELAY, "negative"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay_ms\":-1}", 400, API_BAD_DELAY, "negative"));
}

static void add_delay_above_max(void)
{
    char json[256];
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"t\",\"delay\":2592000}", &j, &given));
    CHECK_EQ_INT(j.delay_ms, MAX_DELAY_MS);
    job_release(&j);
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":2592001}", 400, API_BAD_DELAY, "at most"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay_ms\":2592000001}", 400, API_BAD_DELAY, "at most"));
    snprintf(json, sizeof(json), "{\"topic\":\"t\",\"deliver_at_ms\":%lld}", NOW + MAX_DELAY_MS + 1);
    CHECK(add_fails(json, 400, API_BAD_DELAY, "at most"));
}

static void add_huge_delay_no_overflow(void)
{
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":9223372036854775807}", 400, API_BAD_DELAY, "at most"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay_ms\":9223372036854775807}", 400, API_BAD_DELAY,
                    "at most"));
    CHECK(add_fails("{\"topic\":\"t\",\"deliver_at_ms\":9223372036854775807}", 400, API_BAD_DELAY,
                    "at most"));
}

static void add_delay_not_integer(void)
{
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":3.5}", 400, API_BAD_DELAY, "integer"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":\"3\"}", 400, API_BAD_DELAY, "integer"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":true}", 400, API_BAD_DELAY, "integer"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay_ms\":null}", 400, API_BAD_DELAY, "integer"));
    CHECK(add_fails("{\"topic\":\"t\",\"deliver_at_ms\":[1]}", 400, API_BAD_DELAY, "integer"));
}

/* A number with a fraction of zero is an integer, as in JSON Schema (1500.0 from a client that
 * computes in floating point); not beyond 2^53, where doubles skip integers. */
static void add_delay_of_a_whole_real(void)
{
    json_t *v = json_real(9007199254740992.0), *w = json_real(1e19), *x = json_real(0.5);
    struct job j;
    int given;
    int64_t n;

    CHECK(v && w && x);
    CHECK(add_ok("{\"topic\":\"t\",\"delay_ms\":1500.0}", &j, &given));
    CHECK_EQ_INT(j.delay_ms, 1500);
    job_release(&j);
    CHECK(add_ok("{\"topic\":\"t\",\"delay\":2e1}", &j, &given));
    CHECK_EQ_INT(j.delay_ms, 20000);
    job_release(&j);
    CHECK(add_fails("{\"topic\":\"t\",\"delay_ms\":-1.0}", 400, API_BAD_DELAY, "negative"));
    CHECK_EQ_INT(api_json_int(v, &n), 0);
    CHECK_EQ_INT(n, 9007199254740992LL);
    CHECK_EQ_INT(api_json_int(w, &n), -1);
    CHECK_EQ_INT(api_json_int(x, &n), -1);
    json_decref(v);
    json_decref(w);
    json_decref(x);
}

/* Bytes as JSON text: what is not UTF-8 becomes U+FFFD, a cut never splits a character, and a
 * sequence cut short by the end of the bytes is read no further than they go. */
static void json_text_of_bytes(void)
{
    static const char bytes[] = "a\xFF" "b\xC3\xA9" "c\xE2\x82";   /* a, bad, b, e-acute, c, half a euro */
    struct { size_t len, max; const char *want; } cases[] = {
        { sizeof(bytes) - 1, sizeof(bytes) - 1, "a\xEF\xBF\xBD" "b\xC3\xA9" "c\xEF\xBF\xBD\xEF\xBF\xBD" },
        { sizeof(bytes) - 1, 4, "a\xEF\xBF\xBD" "b" },   /* e-acute would not fit in 4 */
        { 5, 5, "a\xEF\xBF\xBD" "b\xC3\xA9" },
        { 4, 4, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" },   /* the end cuts e-acute in half */
        { 0, 0, "" },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *j = api_json_text(bytes, cases[i].len, cases[i].max);
        CHECK(json_is_string(j));
        CHECK_STR(json_string_value(j), cases[i].want);
        json_decref(j);
    }
}

static void add_topic_missing_or_wrong_type(void)
{
    CHECK(add_fails("{\"delay\":1,\"body\":\"x\"}", 400, API_BAD_REQUEST, "topic"));
    CHECK(add_fails("{\"topic\":5,\"delay\":1}", 400, API_BAD_REQUEST, "topic"));
    CHECK(add_fails("{\"topic\":null,\"delay\":1}", 400, API_BAD_REQUEST, "topic"));
}

static void add_topic_invalid(void)
{
    char json[512], topic[TOPIC_NAME_MAX + 2];

    CHECK(add_fails("{\"topic\":\"a b\",\"delay\":1}", 400, API_BAD_REQUEST, "invalid topic"));
    CHECK(add_fails("{\"topic\":\"a/b\",\"delay\":1}", 400, API_BAD_REQUEST, "invalid topic"));
    CHECK(add_fails("{\"topic\":\"\",\"delay\":1}", 400, API_BAD_REQUEST, "topic"));
    CHECK(add_fails("{\"topic\":\"..\",\"delay\":1}", 400, API_BAD_REQUEST, "topic"));
    memset(topic, 't', TOPIC_NAME_MAX + 1);
    topic[TOPIC_NAME_MAX + 1] = '\0';
    snprintf(json, sizeof(json), "{\"topic\":\"%s\",\"delay\":1}", topic);
    CHECK(add_fails(json, 400, API_BAD_REQUEST, "longer"));
}

/* An escaped NUL is valid JSON: a body keeps it (bytes with a length); a topic, id, key or
 * header refuses it. */
/* Found by fuzzing: jansson's error text may end inside a UTF-8 sequence; the message must
 * still be readable text, not "(unprintable message)". */
static void add_malformed_utf8_error_text_kept(void)
{
    char *resp;

    CHECK(add_fails("\"\\u0\xc3\xa9", 400, API_BAD_REQUEST, "malformed JSON"));
    resp = api_response(400, "bad \xc3 byte", NULL);
    CHECK(resp && strstr(resp, "bad ? byte"));
    free(resp);
}

static void add_nul_in_strings(void)
{
    struct job j;
    int given;

    CHECK(add_fails("{\"topic\":\"ab\\u0000cd\",\"delay\":1}", 400, API_BAD_REQUEST, "NUL"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"id\":\"a\\u0000b\"}", 400, API_BAD_REQUEST, ""));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"key\":\"a\\u0000b\"}", 400, API_BAD_REQUEST, "NUL"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"headers\":{\"h\":\"a\\u0000\"}}", 400,
                    API_BAD_REQUEST, ""));
    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1,\"body\":\"a\\u0000b\"}", &j, &given));
    CHECK_EQ_INT(j.body_len, 3);
    CHECK(memcmp(j.body, "a\0b", 3) == 0);
    job_release(&j);
}

static void add_topic_is_delay_topic(void)
{
    CHECK(add_fails("{\"topic\":\"delay_topic_5s\",\"delay\":1}", 400, API_BAD_REQUEST,
                    "delay topic"));
    CHECK(add_fails("{\"topic\":\"delay_topic_1s\",\"delay\":1}", 400, API_BAD_REQUEST,
                    "delay_topic_1s"));
    /* A job there would land among the dead letters without dq-error. */
    CHECK(add_fails("{\"topic\":\"delay_topic_dlq\",\"delay\":1}", 400, API_BAD_REQUEST,
                    "topic delay_topic_dlq is the dead-letter topic"));
}

static void add_topic_like_delay_topic_is_fine(void)
{
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"delay_topic_10s\",\"delay\":1}", &j, &given));
    CHECK_STR(j.topic, "delay_topic_10s");
    job_release(&j);
}

static void add_body_object_and_array(void)
{
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1,\"body\": { \"a\" : 1, \"b\" : [ 1, \"x\" ] } }",
                 &j, &given));
    CHECK_STR(j.body, "{\"a\":1,\"b\":[1,\"x\"]}");
    CHECK_EQ_INT(j.body_len, strlen(j.body));
    job_release(&j);
    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1,\"body\":[ ]}", &j, &given));
    CHECK_STR(j.body, "[]");
    job_release(&j);
}

static void add_body_string_bytes(void)
{
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1,\"body\":\"a\\n\\\"b\\u00e9\"}", &j, &given));
    CHECK_EQ_INT(j.body_len, 6);
    CHECK(memcmp(j.body, "a\n\"b\xc3\xa9", 6) == 0);
    job_release(&j);
    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1}", &j, &given));
    CHECK_EQ_INT(j.body_len, 0);
    CHECK_STR(j.body, "");
    job_release(&j);
}

static void add_body_wrong_type(void)
{
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"body\":5}", 400, API_BAD_REQUEST, "body"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"body\":true}", 400, API_BAD_REQUEST, "body"));
}

static void add_key(void)
{
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1,\"key\":\"customer-7\"}", &j, &given));
    CHECK_STR(j.key, "customer-7");
    job_release(&j);
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"key\":\"\"}", 400, API_BAD_REQUEST, "key"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"key\":7}", 400, API_BAD_REQUEST, "key"));
}

static void add_headers(void)
{
    struct job j;
    int given;

    CHECK(add_ok("{\"topic\":\"t\",\"delay\":1,\"headers\":{\"trace\":\"abc\",\"x-empty\":\"\"}}",
                 &j, &given));
    CHECK_EQ_INT(j.nheaders, 2);
    CHECK_STR(j.headers[0].name, "trace");
    CHECK_STR(j.headers[0].value, "abc");
    CHECK_STR(j.headers[1].name, "x-empty");
    CHECK_STR(j.headers[1].value, "");
    job_release(&j);
}

static void add_headers_refused(void)
{
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"headers\":{\"dq-topic\":\"x\"}}", 400,
                    API_BAD_REQUEST, "dq-"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"headers\":{\"h\":5}}", 400, API_BAD_REQUEST,
                    "h"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"headers\":{\"h\":null}}", 400,
                    API_BAD_REQUEST, "string"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"headers\":[\"h\"]}", 400, API_BAD_REQUEST,
                    "headers"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,\"headers\":{\"\":\"v\"}}", 400, API_BAD_REQUEST,
                    "header"));
}

/* {"topic":"t","delay":1,"headers":{"h0":"v", ... n of them}} into json. */
static void headers_json(char *json, size_t size, int n)
{
    size_t off = (size_t)snprintf(json, size, "{\"topic\":\"t\",\"delay\":1,\"headers\":{");

    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(json + off, size - off, "%s\"h%d\":\"v\"", i ? "," : "", i);
    snprintf(json + off, size - off, "}}");
}

static void add_too_many_headers(void)
{
    char json[4096];
    struct job j;
    int given;

    headers_json(json, sizeof(json), JOB_HEADERS_MAX);
    CHECK(add_ok(json, &j, &given));
    CHECK_EQ_INT(j.nheaders, JOB_HEADERS_MAX);
    job_release(&j);
    headers_json(json, sizeof(json), JOB_HEADERS_MAX + 1);
    CHECK(add_fails(json, 400, API_BAD_REQUEST, "headers"));
}

static void add_malformed_json(void)
{
    CHECK(add_fails("{", 400, API_BAD_REQUEST, "malformed JSON"));
    CHECK(add_fails("", 400, API_BAD_REQUEST, "malformed JSON"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1,}", 400, API_BAD_REQUEST, "malformed JSON"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":1} x", 400, API_BAD_REQUEST, "malformed JSON"));
    CHECK(add_fails("{\"topic\":\"t\xff\",\"delay\":1}", 400, API_BAD_REQUEST, "malformed JSON"));
}

static void add_not_an_object(void)
{
    CHECK(add_fails("[{\"topic\":\"t\",\"delay\":1}]", 400, API_BAD_REQUEST, "object"));
    CHECK(add_fails("\"x\"", 400, API_BAD_REQUEST, ""));
    CHECK(add_fails("null", 400, API_BAD_REQUEST, ""));
}

static void add_duplicate_keys(void)
{
    CHECK(add_fails("{\"topic\":\"a\",\"topic\":\"b\",\"delay\":1}", 400, API_BAD_REQUEST,
                    "topic"));
    CHECK(add_fails("{\"topic\":\"a\",\"delay\":1,\"delay\":2}", 400, API_BAD_REQUEST, "delay"));
}

/* A long UTF-8 header name makes a long error message; the response must still carry it. */
static void add_error_message_stays_valid_json(void)
{
    char name[300], json[1024], *text;
    struct api_error e;
    struct job j;
    json_t *root;
    int given, msg_ok;

    memcpy(name, "dq-", 3);
    for (int i = 0; i < 126; i++)
        memcpy(name + 3 + 2 * i, "\xc3\xa9", 2);
    name[3 + 2 * 126] = '\0';
    snprintf(json, sizeof(json), "{\"topic\":\"t\",\"delay\":1,\"headers\":{\"%s\":\"v\"}}", name);
    CHECK_EQ_INT(add(json, &j, &given, &e), -1);
    job_release(&j);
    text = api_response(e.code, e.message, NULL);
    root = text ? json_loads(text, 0, NULL) : NULL;
    msg_ok = json_is_string(json_object_get(root, "message"));
    json_decref(root);
    free(text);
    CHECK_EQ_INT(e.status, 400);
    CHECK(msg_ok);
}

static int job_id_result(const char *json, char *out, struct api_error *e)
{
    memset(e, 0, sizeof(*e));
    return api_parse_job_id(json, strlen(json), out, e);
}

static void parse_job_id(void)
{
    char out[JOB_ID_MAX + 1];
    struct api_error e;

    CHECK_EQ_INT(job_id_result("{\"job_id\":\"order:1\"}", out, &e), 0);
    CHECK_STR(out, "order:1");
    CHECK_EQ_INT(job_id_result("{\"job_id\":\"x\",\"other\":1}", out, &e), 0);
    CHECK_STR(out, "x");
}

/* api_parse_job_id of json must fail with 400 and a message containing want. */
static int job_id_fails(const char *json, const char *want)
{
    char out[JOB_ID_MAX + 1];
    struct api_error e;

    if (job_id_result(json, out, &e) == -1 && e.status == 400 && e.code == API_BAD_REQUEST &&
        strstr(e.message, want))
        return 1;
    fprintf(stderr, "job_id %s: status %d message \"%s\"\n", json, e.status, e.message);
    return 0;
}

static void parse_job_id_refused(void)
{
    CHECK(job_id_fails("{}", "job_id"));
    CHECK(job_id_fails("{\"job_id\":\"\"}", "job_id"));
    CHECK(job_id_fails("{\"job_id\":5}", "job_id"));
    CHECK(job_id_fails("{\"job_id\":null}", "job_id"));
    CHECK(job_id_fails("{\"job_id\":\"a b\"}", "job_id"));
    CHECK(job_id_fails("{\"job_id\":\"a\\u0000b\"}", ""));
    CHECK(job_id_fails("{\"job_id\":", "malformed JSON"));
    CHECK(job_id_fails("[\"x\"]", "object"));
    CHECK(job_id_fails("{\"job_id\":\"a\",\"job_id\":\"b\"}", "job_id"));
}

static void check_job_id(void)
{
    char out[JOB_ID_MAX + 1], id[JOB_ID_MAX + 2];
    struct api_error e;

    CHECK_EQ_INT(api_check_job_id("abc-1", out, &e), 0);
    CHECK_STR(out, "abc-1");
    memset(id, 'i', JOB_ID_MAX);
    id[JOB_ID_MAX] = '\0';
    CHECK_EQ_INT(api_check_job_id(id, out, &e), 0);
    CHECK_STR(out, id);
    id[JOB_ID_MAX] = 'i';
    id[JOB_ID_MAX + 1] = '\0';
    CHECK_EQ_INT(api_check_job_id(id, out, &e), -1);
    CHECK_EQ_INT(e.status, 400);
    CHECK_EQ_INT(api_check_job_id(NULL, out, &e), -1);
    CHECK_HAS(e.message, "job_id");
    CHECK_EQ_INT(api_check_job_id("", out, &e), -1);
    CHECK_EQ_INT(api_check_job_id("a\tb", out, &e), -1);
}

/* Parses a response back; NULL unless it is an object of exactly code, message and data. */
static json_t *response_object(char *text)
{
    json_t *root = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;

    free(text);
    if (root && (json_object_size(root) != 3 || !json_is_integer(json_object_get(root, "code")) ||
                 !json_is_string(json_object_get(root, "message")) ||
                 !json_object_get(root, "data"))) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static void response_with_null_data(void)
{
    json_t *r = response_object(api_response(API_BAD_REQUEST, "bad \"thing\"\n", NULL));

    CHECK(r != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(r, "code")), 400);
    CHECK_STR(json_string_value(json_object_get(r, "message")), "bad \"thing\"\n");
    CHECK(json_is_null(json_object_get(r, "data")));
    json_decref(r);
}

static void response_with_job_id(void)
{
    json_t *r = response_object(api_response(API_OK, "success", api_job_id_data("order:1")));
    json_t *data = json_object_get(r, "data");

    CHECK(r != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(r, "code")), 0);
    CHECK_EQ_INT(json_object_size(data), 1);
    CHECK_STR(json_string_value(json_object_get(data, "job_id")), "order:1");
    json_decref(r);
}

static void response_is_compact(void)
{
    char *text = api_response(API_OK, "ok", NULL);
    int compact = text && !strchr(text, '\n') && !strstr(text, ", ");

    free(text);
    CHECK(compact);
}

static void job_for_data(struct job *j)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->id, sizeof(j->id), "j1");
    j->topic = strdup("orders");
    j->body = strdup("hello");
    j->body_len = 5;
    j->delay_ms = 30500;
    j->due_ms = NOW + 30500;
    j->created_ms = NOW;
}

static void job_data_fields(void)
{
    struct job j;
    json_t *d;

    job_for_data(&j);
    d = api_job_data(&j, JOB_PENDING, -1, NULL);
    job_release(&j);
    CHECK_STR(json_string_value(json_object_get(d, "id")), "j1");
    CHECK_STR(json_string_value(json_object_get(d, "topic")), "orders");
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "delay")), 30);
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "exec_time")), (NOW + 30500) / 1000);
    CHECK_STR(json_string_value(json_object_get(d, "body")), "hello");
    CHECK_STR(json_string_value(json_object_get(d, "state")), "pending");
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "exec_time_ms")), NOW + 30500);
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "created_ms")), NOW);
    CHECK(json_is_null(json_object_get(d, "delivered_ms")));
    CHECK_STR(json_string_value(json_object_get(d, "key")), "j1");
    CHECK(json_is_null(json_object_get(d, "error")));
    json_decref(d);
}

static void job_data_failed_says_why(void)
{
    struct job j;
    json_t *d;

    job_for_data(&j);
    d = api_job_data(&j, JOB_FAILED, -1, "delivery to topic orders refused: too large");
    job_release(&j);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "failed");
    CHECK_STR(json_string_value(json_object_get(d, "error")), "delivery to topic orders refused: too large");
    json_decref(d);
    job_for_data(&j);
    d = api_job_data(&j, JOB_FAILED, -1, "bad \xff byte");   /* a record's bytes, whatever they are */
    job_release(&j);
    CHECK_STR(json_string_value(json_object_get(d, "error")), "bad \xEF\xBF\xBD byte");
    json_decref(d);
    /* overlong, surrogate, above U+10FFFF: jansson refuses them, so they are replaced too */
    job_for_data(&j);
    d = api_job_data(&j, JOB_FAILED, -1, "a\xe0\x8b\x90 b\xed\xa0\x80 c\xf4\x90\x80\x80 d\xc3\xa9");
    job_release(&j);
#define R "\xEF\xBF\xBD"   /* U+FFFD */
    CHECK_STR(json_string_value(json_object_get(d, "error")), "a" R R R " b" R R R " c" R R R R " d\xc3\xa9");
#undef R
    json_decref(d);
}

static void job_data_delivered_with_key_and_headers(void)
{
    struct job j;
    json_t *d, *h;

    job_for_data(&j);
    j.key = strdup("k9");
    j.headers = calloc(1, sizeof(*j.headers));
    j.headers[0] = (struct job_header){ strdup("trace"), strdup("abc") };
    j.nheaders = 1;
    d = api_job_data(&j, JOB_DELIVERED, NOW + 31000, "");
    job_release(&j);
    h = json_object_get(d, "headers");
    CHECK_STR(json_string_value(json_object_get(d, "key")), "k9");
    CHECK_STR(json_string_value(json_object_get(d, "state")), "delivered");
    CHECK(json_is_integer(json_object_get(d, "delivered_ms")));
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "delivered_ms")), NOW + 31000);
    CHECK_STR(json_string_value(json_object_get(h, "trace")), "abc");
    json_decref(d);
}

static void job_data_in_response(void)
{
    struct job j;
    json_t *r, *d;

    job_for_data(&j);
    r = response_object(api_response(API_OK, "ok", api_job_data(&j, JOB_CANCELLED, -1, NULL)));
    job_release(&j);
    d = json_object_get(r, "data");
    CHECK(r != NULL);
    CHECK_STR(json_string_value(json_object_get(d, "state")), "cancelled");
    CHECK_STR(json_string_value(json_object_get(d, "id")), "j1");
    json_decref(r);
}

/* Jobs of a batch are parsed each on their own, in order; the batch itself may be refused. */
static void batch_parse(void)
{
    static const char ok[] = "{\"jobs\": [{\"topic\": \"a\", \"delay\": 1}, {\"delay\": 1},"
                             " 7, {\"id\": \"x\", \"topic\": \"b\", \"delay\": -1}]}";
    struct api_batch_job *b;
    struct api_error e;
    size_t n;

    CHECK(api_parse_batch(ok, strlen(ok), 4, limits(), NOW, &b, &n, &e) == 0);
    CHECK_EQ_INT(n, 4);
    CHECK(b[0].ok && !b[0].id_given && strcmp(b[0].job.topic, "a") == 0);
    CHECK(!b[1].ok && b[1].e.status == 400 && strstr(b[1].e.message, "topic"));
    CHECK(!b[2].ok && strstr(b[2].e.message, "object"));
    CHECK(!b[3].ok && b[3].id_given && b[3].e.code == API_BAD_DELAY && strcmp(b[3].job.id, "x") == 0);
    api_batch_free(b, n);
    CHECK(api_parse_batch(ok, strlen(ok), 3, limits(), NOW, &b, &n, &e) < 0);
    CHECK(e.status == 413 && strstr(e.message, "max_batch_jobs"));
    api_batch_free(b, n);
    CHECK(api_parse_batch("{\"jobs\": []}", 12, 3, limits(), NOW, &b, &n, &e) < 0 && e.status == 400);
    api_batch_free(b, n);
    CHECK(api_parse_batch("[1]", 3, 3, limits(), NOW, &b, &n, &e) < 0 && e.status == 400);
    api_batch_free(b, n);
}

/* A reschedule names its job and one new time, from a body or from a query string. */
static void reschedule_parse(void)
{
    static const char body[] = "{\"job_id\": \"j1\", \"delay_ms\": 1500}";
    const char *query[API_RESCHEDULE_ARGS] = { "j2", NULL, NULL, "1700000009000" };
    const char *bad[API_RESCHEDULE_ARGS] = { "j2", "5s", NULL, NULL };
    const char *two[API_RESCHEDULE_ARGS] = { "j2", "5", "5000", NULL };
    char id[JOB_ID_MAX + 1];
    struct api_error e;
    int64_t due;

    CHECK(api_parse_reschedule(body, strlen(body), limits(), NOW, id, &due, &e) == 0);
    CHECK_STR(id, "j1");
    CHECK(due == NOW + 1500);
    CHECK(api_reschedule_query(query, limits(), NOW, id, &due, &e) == 0);
    CHECK(due == 1700000009000LL && strcmp(id, "j2") == 0);
    CHECK(api_reschedule_query(bad, limits(), NOW, id, &due, &e) < 0 && e.code == API_BAD_DELAY);
    CHECK(api_reschedule_query(two, limits(), NOW, id, &due, &e) < 0 && e.status == 400);
    query[0] = NULL;
    CHECK(api_reschedule_query(query, limits(), NOW, id, &due, &e) < 0 && strstr(e.message, "job_id"));
}

static void stats_data_fields(void)
{
    struct pending_view v = { .pending = 12, .by_level = { 7, 5 },
                              .by_due = { 7, 5, 0, 0, 0 }, .overdue_ms = 250 };
    json_t *r = response_object(api_response(API_OK, "ok", api_stats_data(&v, limits()->levels)));
    json_t *d = json_object_get(r, "data");

    CHECK(d != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "pending")), 12);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(d, "by_level"), "1s")), 7);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(d, "by_level"), "5s")), 5);
    CHECK_EQ_INT(json_object_size(json_object_get(d, "by_level")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(d, "by_due"), "10m")), 5);
    CHECK_EQ_INT(json_object_size(json_object_get(d, "by_due")), 5);
    CHECK(json_object_get(json_object_get(d, "by_due"), "later") != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(d, "overdue_ms")), 250);
    json_decref(r);
}

static void read_token_answers_hide_callback_header_values(void)
{
    const char *text = "{\"id\":\"s\",\"callback\":{\"url\":\"http://x/\",\"headers\":"
                       "{\"Authorization\":\"Bearer k\"}},\"dead\":[{\"headers\":{\"dq-callback\":"
                       "\"{\\\"url\\\":\\\"http://x/\\\",\\\"headers\\\":{\\\"X-Key\\\":\\\"k2\\\"}}\","
                       "\"x\":\"y\"}}]}";
    json_t *d = json_loads(text, 0, NULL), *h = calljson_hidden(d);
    char *out = json_dumps(h, JSON_COMPACT), *orig = json_dumps(d, JSON_COMPACT);

    CHECK(d && h && out && orig);
    CHECK(strstr(out, "Bearer k") == NULL && strstr(out, "k2") == NULL);
    CHECK(strstr(out, "\"Authorization\":null") != NULL);
    CHECK(strstr(out, "X-Key") != NULL && strstr(out, "\"x\":\"y\"") != NULL);
    CHECK(strstr(orig, "Bearer k") != NULL);   /* the data itself is left whole */
    CHECK(calljson_hidden(NULL) == NULL);
    free(out);
    free(orig);
    json_decref(h);
    json_decref(d);
}

static void pull_topic_requests_parse(void)
{
    struct api_pull_topic t;
    struct api_error e;

    CHECK_EQ_INT(api_parse_pull_topic("mail", 0, NULL, NULL, NULL, limits(), &t, &e), 0);
    CHECK(t.ask == API_TOPIC_FIGURES);
    CHECK_STR(t.topic, "mail");
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, "delayed", "5", "1795572513931:a:b", limits(),
                                      &t, &e), 0);
    CHECK(t.ask == API_TOPIC_JOBS && t.limit == 5 && t.has_after && t.after_ms == 1795572513931);
    CHECK_STR(t.state, "delayed");
    CHECK_STR(t.after_id, "a:b");   /* an id may hold ':' */
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, NULL, NULL, limits(), &t, &e), 0);
    CHECK(t.limit == API_TOPIC_LIMIT_DEFAULT && !t.has_after);
    CHECK_STR(t.state, "ready");
    CHECK_EQ_INT(api_parse_pull_topic("mail/pause", 1, NULL, NULL, NULL, limits(), &t, &e), 0);
    CHECK(t.ask == API_TOPIC_PAUSE);
    CHECK_EQ_INT(api_parse_pull_topic("mail/pause", 0, NULL, NULL, NULL, limits(), &t, &e), -1);
    CHECK(e.status == 405 && strstr(e.message, "POST"));
    CHECK_STR(api_pull_topic_allow("mail/resume"), "POST");
    CHECK_STR(api_pull_topic_allow("mail/jobs"), "GET");
    CHECK_EQ_INT(api_parse_pull_topic("mail/other", 0, NULL, NULL, NULL, limits(), &t, &e), -1);
    CHECK(e.status == 404);
    CHECK_EQ_INT(api_parse_pull_topic("delay_topic_5s", 0, NULL, NULL, NULL, limits(), &t, &e), -1);
    CHECK(e.status == 404 && strstr(e.message, "no such pull topic"));
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, NULL, "", limits(), &t, &e), -1);
    CHECK_EQ_INT(api_parse_pull_topic("", 0, NULL, NULL, NULL, limits(), &t, &e), -1);
    CHECK(e.status == 400 && strstr(e.message, "topic"));
    CHECK_EQ_INT(api_parse_pull_topic("m ail", 0, NULL, NULL, NULL, limits(), &t, &e), -1);
    CHECK(e.status == 400 && strstr(e.message, "invalid topic"));
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, "gone", NULL, NULL, limits(), &t, &e), -1);
    CHECK(strstr(e.message, "state") != NULL);
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, "101", NULL, limits(), &t, &e), -1);
    CHECK(strstr(e.message, "limit") != NULL);
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, "-1", NULL, limits(), &t, &e), -1);
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, NULL, "12", limits(), &t, &e), -1);
    CHECK(strstr(e.message, "after") != NULL);
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, NULL, "x:y", limits(), &t, &e), -1);
    CHECK_EQ_INT(api_parse_pull_topic("mail/jobs", 0, NULL, NULL, "12:", limits(), &t, &e), -1);
}

static void pull_jobs_page_cuts_bodies_on_a_utf8_boundary(void)
{
    /* "é" is two bytes: a preview cut after the first byte of one drops it whole */
    char body[] = "ab\xc3\xa9\xc3";
    char id[] = "j1";
    struct pull_listed l = { .id = id, .at_ms = 5, .state = "ready", .attempt = 0, .due_ms = 4,
                             .body = body, .body_len = 5, .body_size = 300 };
    json_t *d = api_pull_jobs_data("mail", "ready", &l, 1, 1);
    json_t *j = json_array_get(json_object_get(d, "jobs"), 0);

    CHECK_STR(json_string_value(json_object_get(j, "body")), "ab\xc3\xa9");
    CHECK(json_is_true(json_object_get(j, "body_truncated")));
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "body_bytes")), 300);
    CHECK_STR(json_string_value(json_object_get(d, "next")), "5:j1");
    json_decref(d);
    d = api_pull_jobs_data("mail", "ready", &l, 1, 0);
    CHECK(json_is_null(json_object_get(d, "next")));
    json_decref(d);
}

static void pull_requests_parse(void)
{
    struct api_pop pop;
    struct api_pull_op op;
    struct api_error e;
    struct job j;
    int id_given;
    const char *p;

    p = "{\"topic\":\"mail\",\"wait_ms\":5000,\"ttr\":30,\"max\":10}";
    CHECK_EQ_INT(api_parse_pop(p, strlen(p), limits(), &pop, &e), 0);
    CHECK_STR(pop.topics[0], "mail");
    CHECK_EQ_INT(pop.ntopics, 1);
    CHECK_EQ_INT(pop.wait_ms, 5000);
    CHECK_EQ_INT(pop.ttr_ms, 30000);
    CHECK_EQ_INT(pop.max, 10);
    p = "{\"topic\":\"mail\"}";
    CHECK_EQ_INT(api_parse_pop(p, strlen(p), limits(), &pop, &e), 0);
    CHECK(pop.wait_ms == 0 && pop.ttr_ms == 0 && pop.max == 1);
    p = "{\"topic\":\"mail\",\"ttr\":1,\"ttr_ms\":1000}";
    CHECK_EQ_INT(api_parse_pop(p, strlen(p), limits(), &pop, &e), -1);
    CHECK(e.status == 400 && strstr(e.message, "only one"));
    p = "{\"topic\":\"delay_topic_5s\"}";
    CHECK_EQ_INT(api_parse_pop(p, strlen(p), limits(), &pop, &e), -1);
    p = "{\"topic\":\"mail\",\"max\":0}";
    CHECK_EQ_INT(api_parse_pop(p, strlen(p), limits(), &pop, &e), -1);
    CHECK(strstr(e.message, "max") != NULL);

    p = "{\"job_id\":\"a\",\"receipt\":\"Xy1.1:mail\",\"delay_ms\":2500}";
    CHECK_EQ_INT(api_parse_pull_op(p, strlen(p), API_RELEASE, limits(), &op, &e), 0);
    CHECK_STR(op.id, "a");
    CHECK_STR(op.receipt, "Xy1.1:mail");
    CHECK_EQ_INT(op.delay_ms, 2500);
    p = "{\"job_id\":\"a\",\"receipt\":\"Xy1.1:mail\",\"ttr\":60}";
    CHECK_EQ_INT(api_parse_pull_op(p, strlen(p), API_TOUCH, limits(), &op, &e), 0);
    CHECK_EQ_INT(op.ttr_ms, 60000);
    p = "{\"job_id\":\"a\",\"receipt\":\"no topic\"}";
    CHECK_EQ_INT(api_parse_pull_op(p, strlen(p), API_FINISH, limits(), &op, &e), -1);
    CHECK(strstr(e.message, "receipt") != NULL);
    p = "{\"job_id\":\"a\",\"receipt\":\"R1.1:mail\",\"reason\":\"bad input\"}";
    CHECK_EQ_INT(api_parse_pull_op(p, strlen(p), API_BURY, limits(), &op, &e), 0);
    CHECK_STR(op.reason, "bad input");

    CHECK(add_ok("{\"topic\":\"mail\",\"delay\":1,\"deliver\":\"pull\",\"ttr_ms\":4000}", &j,
                 &id_given));
    CHECK_EQ_INT(j.deliver, JOB_DELIVER_PULL);
    CHECK_EQ_INT(j.ttr_ms, 4000);
    job_release(&j);
    CHECK(add_fails("{\"topic\":\"mail\",\"delay\":1,\"ttr\":0}", 400, 400, "ttr"));
    CHECK(add_fails("{\"topic\":\"mail\",\"delay\":1,\"deliver\":1}", 400, 400, "deliver"));
}

/* A callback job: its target, method, headers, timeout and own retry bounds, kept through its
 * record; and every bad field named. */
static void callback_add_parses_and_keeps(void)
{
    struct job j, back;
    struct job_record rec;
    msgpack_sbuffer sb;
    char err[256];
    int id_given;

    CHECK(add_ok("{\"delay\":5,\"body\":{\"order\":7},\"callback\":{\"url\":\"https://shop.example/"
                 "expire\",\"method\":\"PUT\",\"headers\":{\"X-Trace\":\"t1\"},\"timeout_ms\":2500,"
                 "\"retry\":{\"max_attempts\":3,\"min_backoff_ms\":200}}}", &j, &id_given));
    CHECK_STR(j.topic, "");
    CHECK(j.callback && j.callback->put && j.callback->nheaders == 1);
    CHECK_STR(j.callback->url, "https://shop.example/expire");
    CHECK_STR(j.callback->headers[0].name, "X-Trace");
    CHECK_EQ_INT(j.callback->timeout_ms, 2500);
    CHECK_EQ_INT(j.callback->max_attempts, 3);
    CHECK_EQ_INT(j.callback->min_backoff_ms, 200);
    j.callback->attempts = 2;
    j.callback->last_status = 503;
    j.callback->last_error = strdup("HTTP 503");
    j.callback->first_ms = NOW;
    snprintf(j.id, sizeof(j.id), "order-7");
    msgpack_sbuffer_init(&sb);
    CHECK_EQ_INT(job_record_pack(&j, &sb), 0);
    CHECK_EQ_INT(job_record_read("order-7", sb.data, sb.size, &back, &rec, err, sizeof(err)), 0);
    msgpack_sbuffer_destroy(&sb);
    CHECK(back.callback && back.callback->put && back.callback->attempts == 2);
    CHECK_STR(back.callback->url, "https://shop.example/expire");
    CHECK_STR(back.callback->last_error, "HTTP 503");
    CHECK_STR(back.callback->headers[0].value, "t1");
    CHECK_EQ_INT(back.callback->last_status, 503);
    CHECK_EQ_INT(back.callback->first_ms, NOW);
    CHECK_EQ_INT(back.callback->max_attempts, 3);
    CHECK_STR(back.topic, "");
    job_release(&back);
    job_release(&j);
    CHECK(add_ok("{\"topic\":\"orders\",\"delay\":5,\"callback\":{\"endpoint\":\"billing\"}}", &j,
                 &id_given));
    CHECK_STR(j.topic, "orders");
    CHECK_STR(j.callback->endpoint, "billing");
    CHECK(!j.callback->put && !j.callback->url);
    job_release(&j);
}

static void callback_faults_are_named(void)
{
    struct job j;
    int id_given;

    CHECK(add_fails("{\"delay\":5}", 400, API_BAD_REQUEST, "topic is required"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{}}", 400, API_BAD_REQUEST, "exactly one of url, endpoint"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"ftp://x/\"}}", 400, API_BAD_REQUEST,
                    "http:// or https://"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"endpoint\":\"nope\"}}", 400, API_BAD_REQUEST,
                    "callback.endpoint nope"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"https://u:p@x/\"}}", 400, API_BAD_REQUEST,
                    "callback.url may not hold credentials"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://u@x:80?a\"}}", 400, API_BAD_REQUEST,
                    "callback.headers"));
    CHECK(add_ok("{\"delay\":5,\"callback\":{\"url\":\"http://x/a@b?c=d@e#f@g\"}}", &j, &id_given));
    CHECK_STR(j.callback->url, "http://x/a@b?c=d@e#f@g");
    job_release(&j);
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"method\":\"GET\"}}", 400,
                    API_BAD_REQUEST, "callback.method"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"headers\":{\"webhook-id\":\"1\"}}}",
                    400, API_BAD_REQUEST, "delayqd sets it"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"headers\":{\"a b\":\"1\"}}}",
                    400, API_BAD_REQUEST, "token characters"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"headers\":{\"a\":\"1\\r\\nb: 2\"}}}",
                    400, API_BAD_REQUEST, "control characters"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"timeout_ms\":5}}", 400,
                    API_BAD_REQUEST, "callback.timeout_ms must be"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"retry\":{\"max_attempts\":0}}}",
                    400, API_BAD_REQUEST, "callback.retry.max_attempts"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"retry\":{\"tries\":2}}}",
                    400, API_BAD_REQUEST, "callback.retry.tries: unknown"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"http://x/\",\"verb\":1}}", 400,
                    API_BAD_REQUEST, "callback.verb: unknown"));
    CHECK(add_fails("{\"delay\":5,\"callback\":\"http://x/\"}", 400, API_BAD_REQUEST,
                    "callback must be an object"));
    CHECK_EQ_INT(calljson_body_is_json("{\"a\":1}", 7), 1);
    CHECK_EQ_INT(calljson_body_is_json(" [1,2]", 6), 1);
    CHECK_EQ_INT(calljson_body_is_json("hello", 5), 0);
    CHECK_EQ_INT(calljson_body_is_json("{oops", 5), 0);
    CHECK_EQ_INT(calljson_body_is_json("42", 2), 0);
}

/* Bytes that are not UTF-8 travel as base64 both ways; text stays text. */
static void bodies_that_are_not_text_go_as_base64(void)
{
    static const char bytes[] = { 'a', 0, (char)0xff, (char)0x80, 'z' };
    struct job j;
    struct api_error e;
    int id_given;
    json_t *d;

    CHECK_EQ_INT(add("{\"topic\":\"t\",\"delay\":5,\"body\":\"YQD/gHo=\","
                     "\"body_encoding\":\"base64\"}", &j, &id_given, &e), 0);
    CHECK_EQ_INT(j.body_len, sizeof(bytes));
    CHECK(memcmp(j.body, bytes, sizeof(bytes)) == 0);
    d = api_job_data(&j, JOB_PENDING, -1, NULL);
    CHECK_STR(json_string_value(json_object_get(d, "body")), "YQD/gHo=");
    CHECK_STR(json_string_value(json_object_get(d, "body_encoding")), "base64");
    json_decref(d);
    job_release(&j);
    CHECK_EQ_INT(add("{\"topic\":\"t\",\"delay\":5,\"body\":\"caf\u00e9\",\"body_encoding\":\"text\"}",
                     &j, &id_given, &e), 0);
    d = api_job_data(&j, JOB_PENDING, -1, NULL);
    CHECK_STR(json_string_value(json_object_get(d, "body")), "caf\xc3\xa9");
    CHECK(!json_object_get(d, "body_encoding"));
    json_decref(d);
    job_release(&j);
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":5,\"body\":\"not base64!\",\"body_encoding\":\"base64\"}",
                    400, API_BAD_REQUEST, "body is not base64"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":5,\"body\":\"x\",\"body_encoding\":\"hex\"}",
                    400, API_BAD_REQUEST, "body_encoding must be"));
}

static void combinations_without_a_target_are_refused(void)
{
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"https://x.example/h\"},\"deliver\":\"pull\"}",
                    400, API_BAD_REQUEST, "deliver \"pull\" needs a topic"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":5,\"deliver\":\"kafka\",\"ttr\":30}",
                    400, API_BAD_REQUEST, "deliver \"kafka\" has none"));
    CHECK(add_fails("{\"topic\":\"t\",\"delay\":5,\"deliver\":\"kafka\",\"once\":true}",
                    400, API_BAD_REQUEST, "once, ttr and ttr_ms are for pull jobs"));
    CHECK(add_fails("{\"delay\":5,\"callback\":{\"url\":\"https://x.example/h\"},\"ttr_ms\":5000}",
                    400, API_BAD_REQUEST, "no topic to pop from"));
}

/* A job built in the process is checked as an add would be. */
static void built_jobs_are_checked_as_adds(void)
{
    struct job j = { .id = "ok-1", .due_ms = NOW + 1000, .created_ms = NOW };
    struct job_header h = { .name = (char *)(uintptr_t)"dq-x", .value = (char *)(uintptr_t)"v" };
    struct api_error e;

    j.topic = (char *)(uintptr_t)"orders";
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), 0);
    j.topic = (char *)(uintptr_t)"delay_topic_5s";
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), -1);
    j.topic = (char *)(uintptr_t)"";
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), -1);
    CHECK(strstr(e.message, "a topic or a callback"));
    j.topic = (char *)(uintptr_t)"orders";
    j.due_ms = NOW + MAX_DELAY_MS + 1;
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), -1);
    j.due_ms = NOW;
    j.headers = &h;
    j.nheaders = 1;
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), -1);
    CHECK(strstr(e.message, "dq-x"));
    j.nheaders = 0;
    j.ttr_ms = 500;
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), -1);
    j.ttr_ms = JOB_TTR_ONCE_MS;
    j.deliver = JOB_DELIVER_KAFKA;
    CHECK_EQ_INT(api_check_job(&j, limits(), NOW, &e), -1);
    CHECK(strstr(e.message, "deliver \"kafka\" has none"));
}

void unit_api(void)
{
    RUN(built_jobs_are_checked_as_adds);
    RUN(combinations_without_a_target_are_refused);
    RUN(bodies_that_are_not_text_go_as_base64);
    RUN(callback_add_parses_and_keeps);
    RUN(callback_faults_are_named);
    RUN(pull_requests_parse);
    RUN(pull_topic_requests_parse);
    RUN(read_token_answers_hide_callback_header_values);
    RUN(pull_jobs_page_cuts_bodies_on_a_utf8_boundary);
    RUN(batch_parse);
    RUN(reschedule_parse);
    RUN(add_go_delayqueue_body);
    RUN(add_delay_of_a_whole_real);
    RUN(job_data_failed_says_why);
    RUN(add_with_id);
    RUN(add_empty_or_null_id_is_generated);
    RUN(add_bad_id);
    RUN(add_id_of_max_length);
    RUN(add_delay_ms);
    RUN(add_deliver_at_ms);
    RUN(add_needs_exactly_one_time);
    RUN(add_negative_delay);
    RUN(add_delay_above_max);
    RUN(add_huge_delay_no_overflow);
    RUN(add_delay_not_integer);
    RUN(json_text_of_bytes);
    RUN(add_topic_missing_or_wrong_type);
    RUN(add_topic_invalid);
    RUN(add_nul_in_strings);
    RUN(add_malformed_utf8_error_text_kept);
    RUN(add_topic_is_delay_topic);
    RUN(add_topic_like_delay_topic_is_fine);
    RUN(add_body_object_and_array);
    RUN(add_body_string_bytes);
    RUN(add_body_wrong_type);
    RUN(add_key);
    RUN(add_headers);
    RUN(add_headers_refused);
    RUN(add_too_many_headers);
    RUN(add_malformed_json);
    RUN(add_not_an_object);
    RUN(add_duplicate_keys);
    RUN(add_error_message_stays_valid_json);
    RUN(parse_job_id);
    RUN(parse_job_id_refused);
    RUN(check_job_id);
    RUN(response_with_null_data);
    RUN(response_with_job_id);
    RUN(response_is_compact);
    RUN(job_data_fields);
    RUN(job_data_delivered_with_key_and_headers);
    RUN(job_data_in_response);
    RUN(stats_data_fields);
}
