#include <stdio.h>
#include <stdlib.h>

#include "core/job.h"
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

/* pack then read back as the record of in's id; 0 or -1. */
static int round_trip(const struct job *in, struct job *out, struct job_record *rec, char *err,
                      size_t errlen)
{
    msgpack_sbuffer sb;
    int rc;

    msgpack_sbuffer_init(&sb);
    rc = job_record_pack(in, &sb);
    if (rc == 0)
        rc = job_record_read(in->id, sb.data, sb.size, out, rec, err, errlen);
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
    struct job_record rec;
    char err[256] = "";
    int rc, same;

    make_full(&in);
    rc = round_trip(&in, &out, &rec, err, sizeof(err));
    same = rc == 0 && same_job(&in, &out);
    job_release(&in);
    job_release(&out);
    CHECK_STR(err, "");
    CHECK_EQ_INT(rc, 0);
    CHECK(same);
    CHECK_EQ_INT(rec.state, JOB_PENDING);
    CHECK_EQ_INT(rec.stamp_ms, -1);
}

static void round_trip_minimal(void)
{
    struct job in = { .id = "x" }, out;
    struct job_record rec;
    char err[256] = "";
    int rc, same, nokey;

    in.topic = dup_text("t", 1);
    in.body = dup_text("", 0);
    in.due_ms = 5;
    in.created_ms = 5;
    rc = round_trip(&in, &out, &rec, err, sizeof(err));
    same = rc == 0 && same_job(&in, &out);
    nokey = out.key == NULL && out.nheaders == 0 && out.body_len == 0;
    job_release(&in);
    job_release(&out);
    CHECK_EQ_INT(rc, 0);
    CHECK(same);
    CHECK(nokey);
}

/* The value of a new pending record of in, packed, against want (len bytes). */
static int packs_as(const struct job *in, const char *want, size_t len)
{
    msgpack_sbuffer sb;
    int same;

    msgpack_sbuffer_init(&sb);
    same = job_record_pack(in, &sb) == 0 && sb.size == len && memcmp(sb.data, want, len) == 0;
    msgpack_sbuffer_destroy(&sb);
    return same;
}

#define PACKS_AS(in, lit) packs_as(in, lit, sizeof(lit) - 1)

/* The value a new pending record has: a text head a person can read in redis-cli, with room
 * for a claim token, then the msgpack tail; no id and no field names inside, and no key or
 * headers when the job has none. */
static void record_layout(void)
{
    struct job in = { .id = "order:42", .due_ms = 1700000030000LL, .delay_ms = 30000 };
    char topic[] = "orders", body[] = "hi", key[] = "k", name[] = "tr", value[] = "1";
    struct job_header h = { name, value };
    int bare, keyed, headed;

    in.topic = topic;
    in.body = body;
    in.body_len = 2;
    bare = PACKS_AS(&in, "p1700000030000||-------------|\x93\xa6orders\xa2hi\xcd\x75\x30");
    in.key = key;
    keyed = PACKS_AS(&in, "p1700000030000||-------------|\x94\xa6orders\xa2hi\xcd\x75\x30\xa1k");
    in.key = NULL;
    in.headers = &h;
    in.nheaders = 1;
    headed = PACKS_AS(&in, "p1700000030000||-------------|"
                           "\x95\xa6orders\xa2hi\xcd\x75\x30\xc0\x81\xa2tr\xa1" "1");
    CHECK(bare);
    CHECK(keyed);
    CHECK(headed);
    memcpy(in.tag, "Tag-_0123456z", JOB_TAG_LEN + 1);
    CHECK(PACKS_AS(&in, "p1700000030000||Tag-_0123456z|"
                        "\x95\xa6orders\xa2hi\xcd\x75\x30\xc0\x81\xa2tr\xa1" "1"));
}

/* A pending record holds its tag where a delivering one holds its claim token. */
static void read_tag_and_error(void)
{
    static const char pending[] = "p17||Tag-_0123456z|\x93\xa1t\xa1" "b\x07";
    static const char untagged[] = "p17||-------------|\x93\xa1t\xa1" "b\x07";
    static const char delivering[] = "s17||abcdef:ghijkl|\x93\xa1t\xa1" "b\x07";
    static const char failed[] = "f17|1700000000123|abcdef:ghijkl|\x93\xa1t\xa1" "b\x07\xa4" "why!";
    static const char failed8[] = "f17|1700000000123|abcdef:ghijkl|\x93\xa1t\xa1" "b\x07\xd9\x03" "abc";
    static const char cut[] = "f17|1700000000123|abcdef:ghijkl|\x93\xa1t\xa1" "b\x07\xa9" "why";
    struct job out;
    struct job_record rec;
    char err[256] = "";

    CHECK_EQ_INT(job_record_read("a", pending, sizeof(pending) - 1, &out, &rec, err, sizeof(err)), 0);
    job_release(&out);
    CHECK_STR(rec.tag, "Tag-_0123456z");
    CHECK_EQ_INT(rec.stamp_ms, -1);
    CHECK_STR(rec.error, "");
    CHECK_EQ_INT(job_record_read("a", untagged, sizeof(untagged) - 1, &out, &rec, err, sizeof(err)), 0);
    job_release(&out);
    CHECK_STR(rec.tag, "");
    CHECK_EQ_INT(job_record_read("a", delivering, sizeof(delivering) - 1, &out, &rec, err, sizeof(err)), 0);
    job_release(&out);
    CHECK_STR(rec.tag, "");
    CHECK_EQ_INT(job_record_read("a", failed, sizeof(failed) - 1, &out, &rec, err, sizeof(err)), 0);
    job_release(&out);
    CHECK_EQ_INT(rec.state, JOB_FAILED);
    CHECK_EQ_INT(rec.stamp_ms, 1700000000123LL);
    CHECK_STR(rec.tag, "");
    CHECK_STR(rec.error, "why!");
    CHECK_EQ_INT(job_record_read("a", failed8, sizeof(failed8) - 1, &out, &rec, err, sizeof(err)), 0);
    job_release(&out);
    CHECK_STR(rec.error, "abc");
    /* a reason cut short is no reason, and the record still reads */
    CHECK_EQ_INT(job_record_read("a", cut, sizeof(cut) - 1, &out, &rec, err, sizeof(err)), 0);
    job_release(&out);
    CHECK_STR(rec.error, "");
}

static void new_tag_is_random_text(void)
{
    char a[JOB_TAG_LEN + 1], b[JOB_TAG_LEN + 1];

    job_new_tag(a);
    job_new_tag(b);
    CHECK_EQ_INT(strlen(a), JOB_TAG_LEN);
    CHECK_EQ_INT(strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                 JOB_TAG_LEN);
    CHECK(strcmp(a, b) != 0);
}

/* A record written before the claim room (empty claim field, delay_ms last in a tail of five)
 * reads as the same job. */
static void read_record_before_claim_room(void)
{
    static const char v[] = "p1700000030000|||\x95\xa6orders\xa2hi\xa1k\x81\xa2tr\xa1" "1\xcd\x75\x30";
    struct job out;
    struct job_record rec;
    char err[256] = "";
    int rc = job_record_read("order:42", v, sizeof(v) - 1, &out, &rec, err, sizeof(err));
    int fields = rc == 0 && strcmp(out.topic, "orders") == 0 && strcmp(out.body, "hi") == 0 &&
                 out.key && strcmp(out.key, "k") == 0 && out.nheaders == 1 &&
                 strcmp(out.headers[0].name, "tr") == 0 && out.delay_ms == 30000 &&
                 out.due_ms == 1700000030000LL && out.created_ms == 1700000000000LL;

    job_release(&out);
    CHECK_STR(err, "");
    CHECK(fields);
    CHECK_EQ_INT(rec.state, JOB_PENDING);
}

/* job_record_read of len bytes (as job "order:42") must fail with err containing want. */
static int read_fails(const char *data, size_t len, const char *want)
{
    struct job out;
    struct job_record rec;
    char err[256] = "";
    int rc = job_record_read("order:42", data, len, &out, &rec, err, sizeof(err));

    job_release(&out);
    if (rc != -1 || !strstr(err, want)) {
        fprintf(stderr, "job_record_read: rc %d err \"%s\", wanted \"%s\"\n", rc, err, want);
        return 0;
    }
    return 1;
}

#define READ_FAILS(lit, want) read_fails(lit, sizeof(lit) - 1, want)

static void read_bad_heads(void)
{
    CHECK(READ_FAILS("", "state"));
    CHECK(READ_FAILS("x17|||\x90", "state"));          /* no such state */
    CHECK(READ_FAILS("P17|||\x90", "state"));
    CHECK(READ_FAILS("p|||\x90", "due"));
    CHECK(READ_FAILS("p17", "head"));
    CHECK(READ_FAILS("p17||", "no end"));
    CHECK(READ_FAILS("p17|x||\x90", "head"));
    CHECK(READ_FAILS("p-17|||\x90", "head"));
    CHECK(READ_FAILS("p1234567890123456789|||\x90", "head"));   /* 19 digits */
    CHECK(READ_FAILS("\x01not msgpack", "state"));
}

static void read_bad_tails(void)
{
    CHECK(READ_FAILS("p17||-------------|", "array"));
    CHECK(READ_FAILS("p17||-------------|\xc1", "array"));
    CHECK(READ_FAILS("p17||-------------|\x2a", "array"));                  /* 42 */
    CHECK(READ_FAILS("p17||-------------|\x92\xa1t\xa1" "b", "array"));     /* 2 elements */
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\xa1" "b\xa1" "1", "array"));   /* no delay */
    CHECK(READ_FAILS("p17||-------------|\x93\x01\xa1" "b\x01", "field topic"));
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\x01\x01", "field body"));
    CHECK(READ_FAILS("p17||-------------|\x94\xa1t\xa1" "b\x01\x01", "field key"));
    CHECK(READ_FAILS("p17||-------------|\x95\xa1t\xa1" "b\x01\xc0\x90", "field headers"));
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\xa1" "b\x12", "field delay_ms"));   /* 18 > due */
    /* the layout before the claim room */
    CHECK(READ_FAILS("p17|||\x94\xa1t\xa1" "b\xc0\x80", "array"));   /* 4 elements */
    CHECK(READ_FAILS("p17|||\x95\x01\xa1" "b\xc0\x80\x01", "field topic"));
    CHECK(READ_FAILS("p17|||\x95\xa1t\x01\xc0\x80\x01", "field body"));
    CHECK(READ_FAILS("p17|||\x95\xa1t\xa1" "b\x90\x80\x01", "field key"));
    CHECK(READ_FAILS("p17|||\x95\xa1t\xa1" "b\xc0\x90\x01", "field headers"));
    CHECK(READ_FAILS("p17|||\x95\xa1t\xa1" "b\xc0\x81\xa1h\x01\x01", "field headers"));
    CHECK(READ_FAILS("p17|||\x95\xa1t\xa1" "b\xc0\x80\xa1" "1", "field delay_ms"));
    CHECK(READ_FAILS("p17|||\x95\xa1t\xa1" "b\xc0\x80\xff", "field delay_ms"));   /* -1 */
    CHECK(READ_FAILS("p17|||\x95\xa1t\xa1" "b\xc0\x80\x12", "field delay_ms"));   /* 18 > due */
}

/* Headers that claim more elements or bytes than the record holds are refused before msgpack-c
 * allocates for them (an array of 2^32 - 1 once made it try for 96 GiB). */
static void read_refuses_huge_claims(void)
{
    CHECK(READ_FAILS("p17||-------------|\xdd\xff\xff\xff\xff\xa1t\xa1" "b\x01", "array"));
    CHECK(READ_FAILS("p17||-------------|\xdc\xff\xff\xa1t\xa1" "b\x01", "array"));
    CHECK(READ_FAILS("p17||-------------|\x95\xa1t\xa1" "b\x01\xc0\xdf\xff\xff\xff\xff", "array"));
    CHECK(READ_FAILS("p17||-------------|\x95\xa1t\xa1" "b\x01\xc0\xde\x00\x02\xa1h\xa1v", "array"));
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\xdb\xff\xff\xff\xff" "b\x01", "array"));
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\xc6\x00\x00\x00\x02" "b", "array"));
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\xa1" "b\xcf\x00\x00", "array"));
    CHECK(READ_FAILS("p17||-------------|\x93\xa1t\xa1" "b\xc9\xff\xff\xff\xff", "array"));
    /* nested arrays, each claiming exactly what is there, are fine to walk */
    CHECK(READ_FAILS("p17||-------------|\x93\x91\x91\x90\xa1" "b\x01", "field topic"));
}

static void read_truncated(void)
{
    struct job in;
    msgpack_sbuffer sb;
    int ok;

    make_full(&in);
    msgpack_sbuffer_init(&sb);
    job_record_pack(&in, &sb);
    ok = read_fails(sb.data, sb.size - 1, "array") && read_fails(sb.data, sb.size / 2, "array") &&
         read_fails(sb.data, 10, "head");
    msgpack_sbuffer_destroy(&sb);
    job_release(&in);
    CHECK(ok);
}

/* A record some states on: stamp, claim, and a tail with one element more than today's. */
static void read_later_states(void)
{
    static const char v[] = "d17|1700000000123|4f1c:delay_topic_5s/3/99|\x96\xa1t\xa1" "b\xa1k\x81\xa1h\xa1v\x07\x2a";
    struct job out;
    struct job_record rec;
    char err[256] = "";
    int rc = job_record_read("order:42", v, sizeof(v) - 1, &out, &rec, err, sizeof(err));
    int fields = rc == 0 && strcmp(out.id, "order:42") == 0 && strcmp(out.topic, "t") == 0 &&
                 strcmp(out.body, "b") == 0 && out.key && strcmp(out.key, "k") == 0 &&
                 out.nheaders == 1 && strcmp(out.headers[0].value, "v") == 0 &&
                 out.due_ms == 17 && out.delay_ms == 7 && out.created_ms == 10;

    job_release(&out);
    CHECK_STR(err, "");
    CHECK(fields);
    CHECK_EQ_INT(rec.state, JOB_DELIVERED);
    CHECK_EQ_INT(rec.stamp_ms, 1700000000123LL);
}

/* Found by fuzzing: msgpack-c gives an empty string a NULL pointer, which must not reach memcpy
 * (UBSan in make test SANITIZE=undefined). */
static void read_empty_strings(void)
{
    static const char v[] = "p17|||\x95\xa0\xa0\xa0\x81\xa0\xa0\x01";
    struct job out;
    struct job_record rec;
    char err[256] = "";
    int rc = job_record_read("a", v, sizeof(v) - 1, &out, &rec, err, sizeof(err));
    int empty = rc == 0 && out.topic[0] == '\0' && out.body_len == 0 && out.key[0] == '\0' &&
                out.nheaders == 1 && out.headers[0].name[0] == '\0';

    job_release(&out);
    CHECK_STR(err, "");
    CHECK(empty);
}

/* The id comes from the key; it follows the rules of an added one. */
static void read_refuses_invalid_id(void)
{
    static const char v[] = "p17|||\x95\xa1t\xa1" "b\xc0\x80\x01";
    struct job out;
    struct job_record rec;
    char err[256] = "";
    int bad = job_record_read("a b", v, sizeof(v) - 1, &out, &rec, err, sizeof(err));
    int good;

    job_release(&out);
    good = job_record_read("a", v, sizeof(v) - 1, &out, &rec, err, sizeof(err));
    job_release(&out);
    CHECK_EQ_INT(bad, -1);
    CHECK_EQ_INT(good, 0);
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

static int cmp_ids(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Ids come from a pool of random bytes refilled every 64: across refills each is a UUID v4
 * and none repeats. */
static void new_id_is_uuid_v4(void)
{
    enum { N = 1000 };
    static char ids[N][JOB_ID_GEN_LEN + 1];
    int shaped = 1, distinct = 1;

    for (int i = 0; i < N; i++) {
        job_new_id(ids[i]);
        shaped &= uuid_v4_shape(ids[i]) && id_ok(ids[i], strlen(ids[i]));
    }
    qsort(ids, N, sizeof(ids[0]), cmp_ids);
    for (int i = 1; i < N; i++)
        distinct &= strcmp(ids[i - 1], ids[i]) != 0;
    CHECK(shaped);
    CHECK(distinct);
}

static void state_names(void)
{
    CHECK_STR(job_state_name(JOB_PENDING), "pending");
    CHECK_STR(job_state_name(JOB_DELIVERING), "delivering");
    CHECK_STR(job_state_name(JOB_DELIVERED), "delivered");
    CHECK_STR(job_state_name(JOB_CANCELLED), "cancelled");
}

static void state_letters(void)
{
    enum job_state s = JOB_PENDING;

    for (int i = JOB_PENDING; i <= JOB_FAILED; i++) {
        CHECK_EQ_INT(job_state_of_letter(job_state_letter((enum job_state)i), &s), 0);
        CHECK_EQ_INT(s, i);
    }
    CHECK_EQ_INT(job_state_letter(JOB_PENDING), 'p');
    CHECK_EQ_INT(job_state_letter(JOB_DELIVERING), 's');
    CHECK_EQ_INT(job_state_letter(JOB_FAILED), 'f');
    CHECK_EQ_INT(job_state_of_letter('x', &s), -1);
    CHECK_EQ_INT(job_state_of_letter('P', &s), -1);
    CHECK_EQ_INT(job_state_of_letter('\0', &s), -1);
}

static void release_zeroed_is_safe(void)
{
    struct job j;

    memset(&j, 0, sizeof(j));
    job_release(&j);
    job_release(&j);
    CHECK(j.topic == NULL && j.nheaders == 0);
}

/* A pull job's deliver and ttr travel in the record; a job without them keeps the short tail. */
static void round_trip_pull(void)
{
    struct job in, out;
    struct job_record rec;
    msgpack_sbuffer plain;
    char err[256];

    make_full(&in);
    free(in.key);
    in.key = NULL;
    free(in.headers[0].name), free(in.headers[0].value), free(in.headers[1].name),
        free(in.headers[1].value);
    in.nheaders = 0;
    in.deliver = JOB_DELIVER_PULL;
    in.ttr_ms = 90000;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK_EQ_INT(out.deliver, JOB_DELIVER_PULL);
    CHECK_EQ_INT(out.ttr_ms, 90000);
    CHECK(out.key == NULL && out.nheaders == 0);
    CHECK_EQ_INT(out.max_pops, 0);
    job_release(&out);
    /* a job's own limit of receives comes after a nil callback and schedule */
    in.max_pops = JOB_POPS_NO_LIMIT;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK_EQ_INT(out.max_pops, JOB_POPS_NO_LIMIT);
    CHECK(out.callback == NULL && out.sched == NULL && out.ttr_ms == 90000);
    job_release(&out);
    in.max_pops = 3;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK_EQ_INT(out.max_pops, 3);
    job_release(&out);
    in.max_pops = 0;
    in.deliver = JOB_DELIVER_KAFKA;
    in.ttr_ms = 0;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK_EQ_INT(out.deliver, JOB_DELIVER_KAFKA);
    job_release(&out);
    in.deliver = JOB_DELIVER_AUTO;
    msgpack_sbuffer_init(&plain);
    CHECK_EQ_INT(job_record_pack(&in, &plain), 0);
    CHECK((unsigned char)plain.data[job_record_head_len(plain.data, plain.size)] == 0x93);
    msgpack_sbuffer_destroy(&plain);
    job_release(&in);
}

/* An occurrence of a schedule keeps its schedule in the record, with or without a callback
 * before it (element 8; element 7 nil when there is no callback). */
static void round_trip_schedule(void)
{
    struct job in, out;
    struct job_record rec;
    char err[256];

    make_full(&in);
    CHECK((in.sched = calloc(1, sizeof(*in.sched))) != NULL);
    in.sched->id = strdup("nightly");
    in.sched->timing = strdup("{\"cron\":\"30 2 * * *\"}");
    in.sched->gen = 7;
    in.sched->runs = 41;
    in.sched->prev_ms = 1800000000000;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK_EQ_INT(out.sched->prev_ms, 1800000000000);
    CHECK(out.sched != NULL && out.callback == NULL);
    CHECK_STR(out.sched->id, "nightly");
    CHECK_STR(out.sched->timing, "{\"cron\":\"30 2 * * *\"}");
    CHECK_EQ_INT(out.sched->gen, 7);
    CHECK_EQ_INT(out.sched->runs, 41);
    CHECK_STR(out.topic, in.topic);
    job_release(&out);
    CHECK((in.callback = calloc(1, sizeof(*in.callback))) != NULL);
    in.callback->url = strdup("https://example.com/hook");
    in.callback->attempts = 2;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK(out.sched != NULL && out.callback != NULL);
    CHECK_STR(out.callback->url, "https://example.com/hook");
    CHECK_EQ_INT(out.callback->attempts, 2);
    CHECK_EQ_INT(out.sched->gen, 7);
    job_release(&out);
    job_sched_free(in.sched);
    in.sched = NULL;
    CHECK_EQ_INT(round_trip(&in, &out, &rec, err, sizeof(err)), 0);
    CHECK(out.sched == NULL && out.callback != NULL);
    job_release(&out);
    job_release(&in);
}

static void deliver_words(void)
{
    enum job_deliver d = JOB_DELIVER_AUTO;

    CHECK_EQ_INT(job_deliver_of("pull", 4, &d), 0);
    CHECK_EQ_INT(d, JOB_DELIVER_PULL);
    CHECK_EQ_INT(job_deliver_of("kafka", 5, &d), 0);
    CHECK_EQ_INT(d, JOB_DELIVER_KAFKA);
    CHECK_EQ_INT(job_deliver_of("pulls", 5, &d), -1);
    CHECK_EQ_INT(job_deliver_of("pul", 3, &d), -1);
}

void unit_job(void)
{
    RUN(round_trip_pull);
    RUN(round_trip_schedule);
    RUN(deliver_words);
    RUN(round_trip_full);
    RUN(round_trip_minimal);
    RUN(record_layout);
    RUN(read_record_before_claim_room);
    RUN(read_bad_heads);
    RUN(read_bad_tails);
    RUN(read_refuses_huge_claims);
    RUN(read_truncated);
    RUN(read_later_states);
    RUN(read_tag_and_error);
    RUN(new_tag_is_random_text);
    RUN(read_empty_strings);
    RUN(read_refuses_invalid_id);
    RUN(id_valid_rules);
    RUN(id_refuses_invisible);
    RUN(new_id_is_uuid_v4);
    RUN(state_names);
    RUN(state_letters);
    RUN(release_zeroed_is_safe);
}
