/* gen_record_corpus: writes the seed records of fuzz_record, made by the real job_record_pack.
 * Rebuild the corpus (from the repo root):
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude test/fuzz/gen_record_corpus.c src/core/job.c -lmsgpackc \
 *      -o /tmp/gen_record_corpus && /tmp/gen_record_corpus test/fuzz/corpus/record */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"

static char h_trace[] = "trace", v_trace[] = "abc", h_empty[] = "empty", v_empty[] = "";
static char h_type[] = "content-type", v_type[] = "application/json";
static struct job_header headers[] = {
    { h_trace, v_trace }, { h_empty, v_empty }, { h_type, v_type },
};
static char orders[] = "orders", plain_body[] = "close order 42", customer[] = "customer-9";
static char json_body[] = "{\"order\":42,\"action\":\"close\"}", binary_body[] = "a\0b\0\xff";
static char empty_body[] = "";

static void write_record(const char *dir, const char *name, const struct job *j)
{
    char path[4096];
    msgpack_sbuffer sb;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    msgpack_sbuffer_init(&sb);
    job_record_pack(j, &sb);
    if (!(f = fopen(path, "wb")) || fwrite(sb.data, 1, sb.size, f) != sb.size || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    msgpack_sbuffer_destroy(&sb);
}

/* A go-delayqueue style job: generated id, no key, no headers. */
static void base(struct job *j)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->id, sizeof(j->id), "6da1805d-9a64-4006-9e67-e9ee6d28c738");
    j->topic = orders;
    j->body = plain_body;
    j->body_len = strlen(j->body);
    j->delay_ms = 1800000;
    j->created_ms = 1700000000000LL;
    j->due_ms = j->created_ms + j->delay_ms;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    struct job j;

    base(&j);
    write_record(dir, "plain", &j);
    snprintf(j.id, sizeof(j.id), "order:42");
    j.key = customer;
    j.headers = headers;
    j.nheaders = 1;
    j.body = json_body;
    j.body_len = strlen(j.body);
    j.delay_ms = 7250;
    j.due_ms = j.created_ms + 7250;
    write_record(dir, "key-headers", &j);
    j.nheaders = 3;
    write_record(dir, "three-headers", &j);
    base(&j);
    j.body = binary_body;
    j.body_len = 5;
    write_record(dir, "binary-body", &j);
    j.body = empty_body;
    j.body_len = 0;
    j.delay_ms = 0;
    j.due_ms = j.created_ms;
    write_record(dir, "empty-body", &j);
    j.due_ms = 999999999999999999LL;   /* the most digits a head holds */
    j.delay_ms = j.due_ms;
    j.created_ms = 0;
    write_record(dir, "extreme-times", &j);
    return 0;
}
