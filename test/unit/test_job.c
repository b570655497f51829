#include <stdio.h>
#include <stdlib.h>

#include "job.h"
#include "unit.h"

static char *dup_text(const char *s, size_t len)
{
    char *d = malloc(len + 1);

    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

/* A full job: key, two headers, a body with NUL bytes inside. */
static void make_full(struct job *j)
{
    memset(j, 0, sizeof(*j));
    snprintf(j->id, sizeof(j->id), "order:42");
    j->topic = dup_text("orders", 6);
    j->key = dup_text("customer-7", 10);
    j->body = dup_text("a\0b\0\xff", 5);
    j->body_len = 5;
    j->headers = calloc(2, sizeof(*j->headers));
    j->headers[0] = (struct job_header){ dup_text("trace", 5), dup_text("abc", 3) };
    j->headers[1] = (struct job_header){ dup_text("empty", 5), dup_text("", 0) };
    j->nheaders = 2;
    j->delay_ms = 30000;
    j->due_ms = 1700000030000LL;
    j->created_ms = 1700000000000LL;
}

/* pack then unpack; 0 or -1. */
static int round_trip(const struct job *in, struct job *out, char *err, size_t errlen)
{
    msgpack_sbuffer sb;
    int rc;

    msgpack_sbuffer_init(&sb);
    rc = job_pack(in, &sb);
    if (rc == 0)
        rc = job_unpack(sb.data, sb.size, out, err, errlen);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

static int same_headers(const struct job *a, const struct job *b)
{
    if (a->nheaders != b->nheaders)
        return 0;
    for (size_t i = 0; i < a->nheaders; i++)
        if (strcmp(a->headers[i].name, b->headers[i].name) != 0 ||
            strcmp(a->headers[i].value, b->headers[i].value) != 0)
            return 0;
    return 1;
}

static int same_job(const struct job *a, const struct job *b)
{
    return strcmp(a->id, b->id) == 0 && strcmp(a->topic, b->topic) == 0 &&
           ((!a->key && !b->key) || (a->key && b->key && strcmp(a->key, b->key) == 0)) &&
           a->body_len == b->body_len && memcmp(a->body, b->body, a->body_len) == 0 &&
           b->body[b->body_len] == '\0' && same_headers(a, b) && a->delay_ms == b->delay_ms &&
           a->due_ms == b->due_ms && a->created_ms == b->created_ms;
}

static void round_trip_full(void)
{
    struct job in, out;
    char err[256] = "";
    int rc, same;

    make_full(&in);
    rc = round_trip(&in, &out, err, sizeof(err));
    same = rc == 0 && same_job(&in, &out);
    job_release(&in);
    job_release(&out);
    CHECK_STR(err, "");
    CHECK_EQ_INT(rc, 0);
    CHECK(same);
}

static void round_trip_minimal(void)
{
    struct job in = { .id = "x" }, out;
    char err[256] = "";
    int rc, same, nokey;

    in.topic = dup_text("t", 1);
    in.body = dup_text("", 0);
    in.due_ms = 5;
    rc = round_trip(&in, &out, err, sizeof(err));
    same = rc == 0 && same_job(&in, &out);
    nokey = out.key == NULL && out.nheaders == 0 && out.body_len == 0;
    job_release(&in);
    job_release(&out);
    CHECK_EQ_INT(rc, 0);
    CHECK(same);
    CHECK(nokey);
}

static void round_trip_negative_and_large_times(void)
{
    struct job in = { .id = "x", .delay_ms = -1, .due_ms = INT64_MAX, .created_ms = 0 }, out;
    char err[256] = "";
    int rc, same;

    in.topic = dup_text("t", 1);
    in.body = dup_text("b", 1);
    rc = round_trip(&in, &out, err, sizeof(err));
    same = rc == 0 && same_job(&in, &out);
    job_release(&in);
    job_release(&out);
    CHECK_EQ_INT(rc, 0);
    CHECK(same);
}

/* job_unpack of len bytes must fail with err containing want (and release cleanly). */
static int unpack_fails(const char *data, size_t len, const char *want)
{
    struct job out;
    char err[256] = "";
    int rc = job_unpack(data, len, &out, err, sizeof(err));

    job_release(&out);
    if (rc != -1 || !strstr(err, want)) {
        fprintf(stderr, "job_unpack: rc %d err \"%s\", wanted \"%s\"\n", rc, err, want);
        return 0;
    }
    return 1;
}

static void unpack_garbage(void)
{
    CHECK(unpack_fails("", 0, "map"));
    CHECK(unpack_fails("\xc1", 1, "map"));
    CHECK(unpack_fails("hello world", 11, "map"));
    CHECK(unpack_fails("\x93\x01\x02\x03", 4, "map"));    /* [1, 2, 3] */
    CHECK(unpack_fails("\x2a", 1, "map"));                /* 42 */
    CHECK(unpack_fails("\xa3" "abc", 4, "map"));          /* "abc" */
}

static void unpack_truncated(void)
{
    struct job in;
    msgpack_sbuffer sb;
    int ok;

    make_full(&in);
    msgpack_sbuffer_init(&sb);
    job_pack(&in, &sb);
    ok = unpack_fails(sb.data, sb.size - 1, "map") && unpack_fails(sb.data, sb.size / 2, "map");
    msgpack_sbuffer_destroy(&sb);
    job_release(&in);
    CHECK(ok);
}

/* The four required fields as map pairs, skipping one and giving one a wrong type. */
static void pack_base_pairs(msgpack_packer *pk, const char *skip, const char *wrong)
{
    static const char *const names[] = { "id", "topic", "body", "due_ms" };

    for (int i = 0; i < 4; i++) {
        int is_int = strcmp(names[i], "due_ms") == 0;
        if (skip && strcmp(names[i], skip) == 0)
            continue;
        msgpack_pack_str_with_body(pk, names[i], strlen(names[i]));
        if (wrong && strcmp(names[i], wrong) == 0)
            is_int = !is_int;
        if (is_int)
            msgpack_pack_int64(pk, 7);
        else
            msgpack_pack_str_with_body(pk, "v", 1);
    }
}

static void pack_fields(msgpack_sbuffer *sb, const char *skip, const char *wrong)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, skip ? 3 : 4);
    pack_base_pairs(&pk, skip, wrong);
}

/* Packs a record per pack_fields and checks job_unpack's error names want. */
static int fields_fail(const char *skip, const char *wrong, const char *want)
{
    msgpack_sbuffer sb;
    int ok;

    msgpack_sbuffer_init(&sb);
    pack_fields(&sb, skip, wrong);
    ok = unpack_fails(sb.data, sb.size, want);
    msgpack_sbuffer_destroy(&sb);
    return ok;
}

static void unpack_missing_fields(void)
{
    CHECK(fields_fail("id", NULL, "field id is missing"));
    CHECK(fields_fail("topic", NULL, "field topic is missing"));
    CHECK(fields_fail("body", NULL, "field body is missing"));
    CHECK(fields_fail("due_ms", NULL, "field due_ms is missing"));
}

static void unpack_wrong_types(void)
{
    CHECK(fields_fail(NULL, "id", "field id"));
    CHECK(fields_fail(NULL, "topic", "field topic"));
    CHECK(fields_fail(NULL, "body", "field body"));
    CHECK(fields_fail(NULL, "due_ms", "field due_ms"));
}

static void unpack_minimal_record(void)
{
    msgpack_sbuffer sb;
    struct job out;
    char err[256] = "";
    int rc;

    msgpack_sbuffer_init(&sb);
    pack_fields(&sb, NULL, NULL);
    rc = job_unpack(sb.data, sb.size, &out, err, sizeof(err));
    msgpack_sbuffer_destroy(&sb);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR(out.id, "v");
    CHECK_STR(out.topic, "v");
    CHECK_EQ_INT(out.due_ms, 7);
    CHECK(out.key == NULL);
    job_release(&out);
}

/* A valid record led by one more pair: name -> the value add writes. */
static void pack_with_extra(msgpack_sbuffer *sb, const char *name, void (*add)(msgpack_packer *))
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    msgpack_pack_str_with_body(&pk, name, strlen(name));
    add(&pk);
    pack_base_pairs(&pk, NULL, NULL);
}

/* job_unpack of that record: 1 when it fails naming want (or succeeds when want is NULL). */
static int extra_field_result(const char *name, void (*add)(msgpack_packer *), const char *want)
{
    msgpack_sbuffer sb;
    struct job out;
    char err[256];
    int ok;

    msgpack_sbuffer_init(&sb);
    pack_with_extra(&sb, name, add);
    if (want) {
        ok = unpack_fails(sb.data, sb.size, want);
    } else {
        ok = job_unpack(sb.data, sb.size, &out, err, sizeof(err)) == 0;
        job_release(&out);
    }
    msgpack_sbuffer_destroy(&sb);
    return ok;
}

static void add_int(msgpack_packer *pk) { msgpack_pack_int64(pk, 3); }
static void add_str(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "3", 1); }
static void add_nil(msgpack_packer *pk) { msgpack_pack_nil(pk); }
static void add_long_id(msgpack_packer *pk)
{
    char id[JOB_ID_MAX + 1];

    memset(id, 'a', sizeof(id));
    msgpack_pack_str_with_body(pk, id, sizeof(id));
}
static void add_bad_headers(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 1);
    msgpack_pack_str_with_body(pk, "h", 1);
    msgpack_pack_int64(pk, 1);
}
static void add_array(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 2);
    msgpack_pack_int64(pk, 1);
    msgpack_pack_int64(pk, 2);
}

static void unpack_optional_fields_checked(void)
{
    CHECK(extra_field_result("key", add_int, "field key"));
    CHECK(extra_field_result("headers", add_str, "field headers"));
    CHECK(extra_field_result("headers", add_bad_headers, "field headers"));
    CHECK(extra_field_result("delay_ms", add_str, "field delay_ms"));
    CHECK(extra_field_result("created_ms", add_nil, "field created_ms"));
}

static void add_nul_id(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "\0", 1); }
static void add_space_id(msgpack_packer *pk) { msgpack_pack_str_with_body(pk, "a b", 3); }

static void unpack_long_id_refused(void)
{
    CHECK(extra_field_result("id", add_long_id, "field id"));
}

/* Found by fuzzing: a record's id must follow the same rules as an added one, or a record
 * decodes with an id that job_pack writes and job_unpack refuses. */
static void unpack_invalid_id_refused(void)
{
    CHECK(extra_field_result("id", add_nul_id, "field id"));
    CHECK(extra_field_result("id", add_space_id, "field id"));
}

static void unpack_ignores_unknown_fields(void)
{
    CHECK(extra_field_result("future_field", add_array, NULL));
    CHECK(extra_field_result("zz", add_nil, NULL));
}

static int id_ok(const char *id, size_t len)
{
    char err[128] = "";
    int rc = job_id_valid(id, len, err, sizeof(err));

    return rc == 0 ? 1 : err[0] ? 0 : -1;
}

static void id_valid_rules(void)
{
    char long_id[JOB_ID_MAX + 2];

    memset(long_id, 'x', sizeof(long_id));
    CHECK_EQ_INT(id_ok("order:42", 8), 1);
    CHECK_EQ_INT(id_ok("~!@#$%^&*()", 11), 1);
    CHECK_EQ_INT(id_ok(long_id, JOB_ID_MAX), 1);
    CHECK_EQ_INT(id_ok(long_id, JOB_ID_MAX + 1), 0);
    CHECK_EQ_INT(id_ok("", 0), 0);
}

static void id_refuses_invisible(void)
{
    CHECK_EQ_INT(id_ok("a b", 3), 0);
    CHECK_EQ_INT(id_ok("a\tb", 3), 0);
    CHECK_EQ_INT(id_ok("a\nb", 3), 0);
    CHECK_EQ_INT(id_ok("a\x7f", 2), 0);
    CHECK_EQ_INT(id_ok("caf\xc3\xa9", 5), 0);
    CHECK_EQ_INT(id_ok("a\0b", 3), 0);
}

static int uuid_v4_shape(const char *s)
{
    if (strlen(s) != JOB_ID_GEN_LEN || s[14] != '4' || !strchr("89ab", s[19]))
        return 0;
    for (int i = 0; i < JOB_ID_GEN_LEN; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : (s[i] == '\0' || !strchr("0123456789abcdef", s[i])))
            return 0;
    }
    return 1;
}

static void new_id_is_uuid_v4(void)
{
    char a[JOB_ID_GEN_LEN + 1], b[JOB_ID_GEN_LEN + 1];

    job_new_id(a);
    job_new_id(b);
    CHECK(uuid_v4_shape(a));
    CHECK(uuid_v4_shape(b));
    CHECK(strcmp(a, b) != 0);
    CHECK_EQ_INT(id_ok(a, strlen(a)), 1);
}

static void state_names(void)
{
    CHECK_STR(job_state_name(JOB_PENDING), "pending");
    CHECK_STR(job_state_name(JOB_DELIVERING), "delivering");
    CHECK_STR(job_state_name(JOB_DELIVERED), "delivered");
    CHECK_STR(job_state_name(JOB_CANCELLED), "cancelled");
}

static void state_parse(void)
{
    enum job_state s = JOB_PENDING;

    for (int i = JOB_PENDING; i <= JOB_CANCELLED; i++) {
        const char *name = job_state_name((enum job_state)i);
        CHECK_EQ_INT(job_state_parse(name, strlen(name), &s), 0);
        CHECK_EQ_INT(s, i);
    }
    CHECK_EQ_INT(job_state_parse("deliver", 7, &s), -1);
    CHECK_EQ_INT(job_state_parse("delivered", 7, &s), -1);
    CHECK_EQ_INT(job_state_parse("pendingx", 8, &s), -1);
    CHECK_EQ_INT(job_state_parse("PENDING", 7, &s), -1);
    CHECK_EQ_INT(job_state_parse("", 0, &s), -1);
}

static void release_zeroed_is_safe(void)
{
    struct job j;

    memset(&j, 0, sizeof(j));
    job_release(&j);
    job_release(&j);
    CHECK(j.topic == NULL && j.nheaders == 0);
}

void unit_job(void)
{
    RUN(round_trip_full);
    RUN(round_trip_minimal);
    RUN(round_trip_negative_and_large_times);
    RUN(unpack_garbage);
    RUN(unpack_truncated);
    RUN(unpack_missing_fields);
    RUN(unpack_wrong_types);
    RUN(unpack_minimal_record);
    RUN(unpack_optional_fields_checked);
    RUN(unpack_long_id_refused);
    RUN(unpack_invalid_id_refused);
    RUN(unpack_ignores_unknown_fields);
    RUN(id_valid_rules);
    RUN(id_refuses_invisible);
    RUN(new_id_is_uuid_v4);
    RUN(state_names);
    RUN(state_parse);
    RUN(release_zeroed_is_safe);
}
