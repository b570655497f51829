/* fuzz_record: the msgpack job record kept in Redis (job_unpack, job_pack), and the get answer
 * built from a record (api_job_data).
 *
 * An input is a raw record. Invariants checked (abort() on violation):
 *  - an accepted record has every required field, and a NUL after the body;
 *  - it re-packs and unpacks to the same job, and packing that again gives the same bytes;
 *  - its get answer is a JSON object {"code", "message", "data"}. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api.h"
#include "job.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);



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
    ASSERT(job_pack(j, sb) == 0);
}

static void check_round_trip(const struct job *j)
{
    msgpack_sbuffer first, second;
    struct job back;
    char err[256];

    pack(j, &first);
    if (job_unpack(first.data, first.size, &back, err, sizeof(err)) < 0)
        fuzz_fail(__FILE__, __LINE__, err);
    check_fields(&back);
    check_same_job(j, &back);
    pack(&back, &second);
    ASSERT(first.size == second.size && memcmp(first.data, second.data, first.size) == 0);
    msgpack_sbuffer_destroy(&second);
    msgpack_sbuffer_destroy(&first);
    job_release(&back);
}

/* The record as a get answer: text a client can parse, whatever bytes the record holds. */
static void check_get_answer(const struct job *j)
{
    char *text = api_response(API_OK, "ok", api_job_data(j, JOB_DELIVERED, j->due_ms));
    json_t *root;

    ASSERT(text != NULL);
    root = json_loads(text, JSON_ALLOW_NUL, NULL);
    ASSERT(json_is_object(root));
    ASSERT(json_is_integer(json_object_get(root, "code")));
    ASSERT(json_is_string(json_object_get(root, "message")));
    ASSERT(json_is_object(json_object_get(root, "data")));
    json_decref(root);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct job j;
    char err[256];

    err[0] = '\0';
    if (job_unpack((const char *)data, size, &j, err, sizeof(err)) == 0) {
        check_fields(&j);
        check_round_trip(&j);
        check_get_answer(&j);
    } else {
        ASSERT(err[0] != '\0');
    }
    job_release(&j);
    return 0;
}
