/* fuzz_record: the job record kept in Redis (job_record_read, job_record_pack), and the get
 * answer built from a record (api_job_data).
 *
 * An input is a raw record value, read as the record of job FUZZ_ID. Invariants checked (abort()
 * on violation):
 *  - an accepted record has every required field, and a NUL after the body;
 *  - it re-packs and unpacks to the same job, and packing that again gives the same bytes;
 *  - its get answer is a JSON object {"code", "message", "data"}. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/apidata.h"
#include "core/apijson.h"
#include "core/job.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ID "order:42"



static void check_fields(const struct job *j)
{
    ASSERT(j->id[0] != '\0');
    ASSERT(j->topic != NULL);
    ASSERT(j->body != NULL && j->body[j->body_len] == '\0');
    ASSERT(j->nheaders <= JOB_HEADERS_MAX);
    ASSERT(j->nheaders == 0 || j->headers != NULL);
    for (size_t i = 0; i < j->nheaders; i++)
        ASSERT(j->headers[i].name != NULL && j->headers[i].value != NULL);
}



static void pack(const struct job *j, msgpack_sbuffer *sb)
{
    msgpack_sbuffer_init(sb);
    ASSERT(job_record_pack(j, sb) == 0);
}

static void check_round_trip(const struct job *j)
{
    msgpack_sbuffer first, second;
    struct job back;
    struct job_record rec;
    char err[256];

    pack(j, &first);
    if (job_record_read(FUZZ_ID, first.data, first.size, &back, &rec, err, sizeof(err)) < 0)
        fuzz_fail(__FILE__, __LINE__, err);
    check_fields(&back);
    check_same_job(j, &back);
    ASSERT(rec.state == JOB_PENDING && rec.stamp_ms == -1);
    pack(&back, &second);
    ASSERT(first.size == second.size && memcmp(first.data, second.data, first.size) == 0);
    msgpack_sbuffer_destroy(&second);
    msgpack_sbuffer_destroy(&first);
    job_release(&back);
}

/* The record as a get answer: text a client can parse, whatever bytes the record holds. */
static void check_get_answer(const struct job *j, const struct job_record *rec)
{
    char *text = api_response(API_OK, "ok", api_job_data(j, rec->state, rec->stamp_ms, rec->error));
    json_t *root;

    ASSERT(text != NULL);
    root = json_loads(text, JSON_ALLOW_NUL, NULL);
    ASSERT(json_is_object(root));
    ASSERT(json_is_integer(json_object_get(root, "code")));
    ASSERT(json_is_string(json_object_get(root, "message")));
    ASSERT(json_is_object(json_object_get(root, "data")));
    ASSERT(rec->error[0] ? json_is_string(json_object_get(json_object_get(root, "data"), "error"))
                         : json_is_null(json_object_get(json_object_get(root, "data"), "error")));
    json_decref(root);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct job j;
    struct job_record rec;
    char err[256];

    err[0] = '\0';
    if (job_record_read(FUZZ_ID, (const char *)data, size, &j, &rec, err, sizeof(err)) == 0) {
        check_fields(&j);
        ASSERT(j.delay_ms >= 0 && j.created_ms >= 0 && j.created_ms + j.delay_ms == j.due_ms);
        check_round_trip(&j);
        check_get_answer(&j, &rec);
    } else {
        ASSERT(err[0] != '\0');
    }
    job_release(&j);
    return 0;
}
