/* fuzz_api: the JSON request parser of the HTTP API (api_parse_add, api_parse_batch,
 * api_parse_reschedule, api_parse_job_id, api_check_job_id) and the answers built from its
 * results.
 *
 * An input is a request body. Invariants checked (abort() on violation):
 *  - every error answer is a JSON object {"code": e.code, "message": string, "data": null};
 *  - an accepted add has a valid topic, due_ms = created_ms + delay_ms within the limits, and
 *    survives the trip through the Redis record (job_pack, job_unpack) and the get answer
 *    (api_job_data): what a client adds is what it gets back;
 *  - an accepted job id is a valid one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/api.h"
#include "core/apidata.h"
#include "core/apijson.h"
#include "core/job.h"
#include "core/levels.h"
#include "fuzz.h"

#define NOW_MS 1700000000000LL             /* a fixed clock: runs are reproducible */
#define MAX_DELAY_MS (2592000LL * 1000)     /* the default job.max_delay_s, 30 days */
#define FUZZ_ID "fuzz:generated"            /* stands in for the UUID the server would make */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);



static const struct api_limits *limits(void)
{
    static const char *const names[] = { "1s", "5s", "10s" };
    static struct levels lv;
    static struct api_limits lim;
    char err[256];

    if (!lim.levels) {
        if (levels_init(&lv, names, 3, "delay_topic_%s", err, sizeof(err)) < 0)
            fuzz_fail(__FILE__, __LINE__, err);
        lim.levels = &lv;
        lim.dlq_topic = "delay_topic_dlq";
        lim.max_delay_ms = MAX_DELAY_MS;
    }
    return &lim;
}

/* Parses an answer built by api_response; the caller releases it. */
static json_t *load_answer(char *text)
{
    json_t *root;

    ASSERT(text != NULL);
    root = json_loads(text, JSON_ALLOW_NUL, NULL);
    free(text);
    ASSERT(json_is_object(root));
    ASSERT(json_is_integer(json_object_get(root, "code")));
    ASSERT(json_is_string(json_object_get(root, "message")));
    ASSERT(json_object_get(root, "data") != NULL);
    return root;
}

static void check_error(const struct api_error *e)
{
    json_t *root;

    ASSERT(e->status >= 400 && e->status <= 599);
    ASSERT(memchr(e->message, '\0', sizeof(e->message)) != NULL);
    ASSERT(e->message[0] != '\0');
    root = load_answer(api_response(e->code, e->message, NULL));
    ASSERT(json_integer_value(json_object_get(root, "code")) == e->code);
    ASSERT(json_is_null(json_object_get(root, "data")));
    json_decref(root);
}

static void check_job_fields(const struct job *j, int id_given)
{
    char why[128];

    ASSERT(j->topic != NULL);
    ASSERT(topic_name_valid(j->topic, why, sizeof(why)) == 0);
    ASSERT(levels_find_topic(limits()->levels, j->topic) < 0);
    ASSERT(id_given ? job_id_valid(j->id, strlen(j->id), why, sizeof(why)) == 0 : j->id[0] == '\0');
    ASSERT(j->delay_ms >= 0 && j->delay_ms <= MAX_DELAY_MS);
    ASSERT(j->created_ms == NOW_MS && j->due_ms == NOW_MS + j->delay_ms);
    ASSERT(j->body != NULL && j->body[j->body_len] == '\0');
    ASSERT(j->key == NULL || j->key[0] != '\0');
    ASSERT(j->nheaders <= JOB_HEADERS_MAX);
    for (size_t i = 0; i < j->nheaders; i++) {
        ASSERT(j->headers[i].name[0] != '\0');
        ASSERT(strncmp(j->headers[i].name, "dq-", 3) != 0);
    }
}



/* The get answer of job j: the fields a client sent come back unchanged. */
static void check_get_answer(const struct job *j)
{
    json_t *root = load_answer(api_response(API_OK, "ok", api_job_data(j, JOB_PENDING, -1, NULL)));
    json_t *d = json_object_get(root, "data"), *body = json_object_get(d, "body");

    ASSERT(json_is_object(d));
    ASSERT(same_str(json_string_value(json_object_get(d, "id")), j->id));
    ASSERT(same_str(json_string_value(json_object_get(d, "topic")), j->topic));
    ASSERT(same_str(json_string_value(json_object_get(d, "key")), j->key ? j->key : j->id));
    ASSERT(json_is_string(body) && json_string_length(body) == j->body_len &&
           memcmp(json_string_value(body), j->body, j->body_len) == 0);
    ASSERT(json_object_size(json_object_get(d, "headers")) == j->nheaders);
    ASSERT(json_integer_value(json_object_get(d, "exec_time_ms")) == j->due_ms);
    json_decref(root);
}

/* An accepted job goes to Redis as a record and comes back from it as it was. */
static void check_record(struct job *j)
{
    msgpack_sbuffer sb;
    struct job back;
    struct job_record rec;
    char err[256];

    if (j->id[0] == '\0')
        snprintf(j->id, sizeof(j->id), "%s", FUZZ_ID);
    msgpack_sbuffer_init(&sb);
    ASSERT(job_record_pack(j, &sb) == 0);
    if (job_record_read(j->id, sb.data, sb.size, &back, &rec, err, sizeof(err)) < 0)
        fuzz_fail(__FILE__, __LINE__, err);
    ASSERT(rec.state == JOB_PENDING);
    check_same_job(j, &back);
    check_get_answer(&back);
    job_release(&back);
    msgpack_sbuffer_destroy(&sb);
}

static void fuzz_add(const char *body, size_t len)
{
    struct job j;
    struct api_error e;
    int id_given = -1;

    memset(&e, 0, sizeof(e));
    if (api_parse_add(body, len, limits(), NOW_MS, &j, &id_given, &e) == 0) {
        check_job_fields(&j, id_given);
        check_record(&j);
    } else {
        check_error(&e);
    }
    job_release(&j);
}

static void fuzz_job_id(const char *body, size_t len)
{
    char id[JOB_ID_MAX + 1], why[128], *text;
    struct api_error e;

    memset(&e, 0, sizeof(e));
    if (api_parse_job_id(body, len, id, &e) == 0)
        ASSERT(job_id_valid(id, strlen(id), why, sizeof(why)) == 0);
    else
        check_error(&e);

    /* The same bytes as a query-string id. */
    text = malloc(len + 1);
    ASSERT(text != NULL);
    memcpy(text, body, len);
    text[len] = '\0';
    memset(&e, 0, sizeof(e));
    if (api_check_job_id(text, id, &e) == 0)
        ASSERT(strcmp(id, text) == 0);
    else
        check_error(&e);
    free(text);
}

/* The same bytes as an add_batch body: every job is checked as an add is, and the answer
 * listing them is valid JSON with one entry per job. */
static void fuzz_batch(const char *body, size_t len)
{
    struct api_batch_job *b = NULL;
    struct api_job_answer *answers;
    struct api_error e;
    json_t *root;
    size_t n = 0;

    memset(&e, 0, sizeof(e));
    if (api_parse_batch(body, len, 50, limits(), NOW_MS, &b, &n, &e) < 0) {
        check_error(&e);
        api_batch_free(b, n);
        return;
    }
    ASSERT(n >= 1 && n <= 50 && (answers = calloc(n, sizeof(*answers))) != NULL);
    for (size_t i = 0; i < n; i++) {
        if (b[i].ok) {
            check_job_fields(&b[i].job, b[i].id_given);
            snprintf(answers[i].job_id, sizeof(answers[i].job_id), "%s", b[i].job.id);
        } else {
            check_error(&b[i].e);
            answers[i].status = b[i].e.status;
            answers[i].code = b[i].e.code;
            snprintf(answers[i].message, sizeof(answers[i].message), "%s", b[i].e.message);
        }
    }
    root = load_answer(api_response(API_OK, "ok", api_batch_data(answers, n)));
    ASSERT(json_array_size(json_object_get(json_object_get(root, "data"), "jobs")) == n);
    json_decref(root);
    free(answers);
    api_batch_free(b, n);
}

/* The same bytes as a reschedule body: an accepted one names a valid id and a due time within
 * the limits. */
static void fuzz_reschedule(const char *body, size_t len)
{
    char id[JOB_ID_MAX + 1], why[128];
    struct api_error e;
    int64_t due = -1;

    memset(&e, 0, sizeof(e));
    if (api_parse_reschedule(body, len, limits(), NOW_MS, id, &due, &e) == 0) {
        ASSERT(job_id_valid(id, strlen(id), why, sizeof(why)) == 0);
        ASSERT(due >= NOW_MS && due <= NOW_MS + MAX_DELAY_MS);
    } else {
        check_error(&e);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_add((const char *)data, size);
    fuzz_job_id((const char *)data, size);
    fuzz_batch((const char *)data, size);
    fuzz_reschedule((const char *)data, size);
    return 0;
}
