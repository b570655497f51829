#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "job.h"

static const char *const state_names[] = { "pending", "delivering", "delivered", "cancelled", "failed" };

const char *job_state_name(enum job_state state)
{
    return state_names[state];
}

int job_state_parse(const char *name, size_t len, enum job_state *out)
{
    for (size_t i = 0; i < sizeof(state_names) / sizeof(state_names[0]); i++) {
        if (strlen(state_names[i]) == len && memcmp(state_names[i], name, len) == 0) {
            *out = (enum job_state)i;
            return 0;
        }
    }
    return -1;
}

void job_release(struct job *job)
{
    free(job->topic);
    free(job->key);
    free(job->body);
    for (size_t i = 0; i < job->nheaders; i++) {
        free(job->headers[i].name);
        free(job->headers[i].value);
    }
    free(job->headers);
    memset(job, 0, sizeof(*job));
}

int job_id_valid(const char *id, size_t len, char *err, size_t errlen)
{
    if (len == 0) {
        snprintf(err, errlen, "id is empty");
        return -1;
    }
    if (len > JOB_ID_MAX) {
        snprintf(err, errlen, "id is longer than %d characters", JOB_ID_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c <= 0x20 || c >= 0x7f) {
            snprintf(err, errlen, "id may hold only visible ASCII characters (no spaces)");
            return -1;
        }
    }
    return 0;
}

void job_new_id(char out[JOB_ID_GEN_LEN + 1])
{
    unsigned char b[16];
    size_t got = 0;

    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n > 0)
            got += (size_t)n;
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);   /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);   /* RFC 4122 variant */
    snprintf(out, JOB_ID_GEN_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

static void pack_str(msgpack_packer *pk, const char *s, size_t len)
{
    msgpack_pack_str(pk, len);
    msgpack_pack_str_body(pk, s, len);
}

static void pack_kv_str(msgpack_packer *pk, const char *k, const char *v, size_t len)
{
    pack_str(pk, k, strlen(k));
    pack_str(pk, v, len);
}

static void pack_kv_int(msgpack_packer *pk, const char *k, int64_t v)
{
    pack_str(pk, k, strlen(k));
    msgpack_pack_int64(pk, v);
}

int job_pack(const struct job *job, msgpack_sbuffer *buf)
{
    msgpack_packer pk;

    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, job->key ? 8 : 7);
    pack_kv_str(&pk, "id", job->id, strlen(job->id));
    pack_kv_str(&pk, "topic", job->topic, strlen(job->topic));
    if (job->key)
        pack_kv_str(&pk, "key", job->key, strlen(job->key));
    pack_kv_str(&pk, "body", job->body, job->body_len);
    pack_str(&pk, "headers", 7);
    msgpack_pack_map(&pk, job->nheaders);
    for (size_t i = 0; i < job->nheaders; i++)
        pack_kv_str(&pk, job->headers[i].name, job->headers[i].value, strlen(job->headers[i].value));
    pack_kv_int(&pk, "delay_ms", job->delay_ms);
    pack_kv_int(&pk, "due_ms", job->due_ms);
    pack_kv_int(&pk, "created_ms", job->created_ms);
    return 0;
}

static int key_is(const msgpack_object *k, const char *name)
{
    size_t len = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == len &&
           memcmp(k->via.str.ptr, name, len) == 0;
}

/* Copies a msgpack string into a fresh NUL-terminated buffer. */
static char *dup_str(const msgpack_object *o, size_t *len)
{
    char *s;

    if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN)
        return NULL;
    s = malloc(o->via.str.size + 1);
    if (!s)
        return NULL;
    memcpy(s, o->via.str.ptr, o->via.str.size);
    s[o->via.str.size] = '\0';
    if (len)
        *len = o->via.str.size;
    return s;
}

static int get_int(const msgpack_object *o, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return -1;
    return 0;
}

static int unpack_headers(const msgpack_object *o, struct job *out)
{
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > JOB_HEADERS_MAX)
        return -1;
    out->headers = calloc(o->via.map.size ? o->via.map.size : 1, sizeof(*out->headers));
    if (!out->headers)
        return -1;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        struct job_header *h = &out->headers[out->nheaders];
        h->name = dup_str(&o->via.map.ptr[i].key, NULL);
        h->value = dup_str(&o->via.map.ptr[i].val, NULL);
        out->nheaders++;
        if (!h->name || !h->value)
            return -1;
    }
    return 0;
}

static int unpack_field(const msgpack_object *k, const msgpack_object *v, struct job *out,
                        unsigned *seen)
{
    size_t len;
    char *s;

    if (key_is(k, "id")) {
        char why[128];
        if (v->type != MSGPACK_OBJECT_STR ||
            job_id_valid(v->via.str.ptr, v->via.str.size, why, sizeof(why)) < 0)
            return -1;
        memcpy(out->id, v->via.str.ptr, v->via.str.size);
        out->id[v->via.str.size] = '\0';
        *seen |= 1;
    } else if (key_is(k, "topic")) {
        if (out->topic || !(out->topic = dup_str(v, NULL)))
            return -1;
        *seen |= 2;
    } else if (key_is(k, "body")) {
        if (out->body || !(out->body = dup_str(v, &out->body_len)))
            return -1;
        *seen |= 4;
    } else if (key_is(k, "due_ms")) {
        if (get_int(v, &out->due_ms) < 0)
            return -1;
        *seen |= 8;
    } else if (key_is(k, "key")) {
        if (out->key || !(s = dup_str(v, &len)))
            return -1;
        out->key = s;
    } else if (key_is(k, "headers")) {
        if (out->headers || unpack_headers(v, out) < 0)
            return -1;
    } else if (key_is(k, "delay_ms")) {
        return get_int(v, &out->delay_ms);
    } else if (key_is(k, "created_ms")) {
        return get_int(v, &out->created_ms);
    }
    return 0;
}

int job_unpack(const char *data, size_t len, struct job *out, char *err, size_t errlen)
{
    static const char *const required[] = { "id", "topic", "body", "due_ms" };
    msgpack_unpacked u;
    size_t off = 0;
    unsigned seen = 0;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, data, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        u.data.type != MSGPACK_OBJECT_MAP) {
        snprintf(err, errlen, "record is not a msgpack map");
        goto out;
    }
    for (uint32_t i = 0; i < u.data.via.map.size; i++) {
        const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
        if (unpack_field(&kv->key, &kv->val, out, &seen) < 0) {
            snprintf(err, errlen, "record field %.*s is malformed",
                     kv->key.type == MSGPACK_OBJECT_STR ? (int)kv->key.via.str.size : 1,
                     kv->key.type == MSGPACK_OBJECT_STR ? kv->key.via.str.ptr : "?");
            goto out;
        }
    }
    for (unsigned i = 0; i < 4; i++) {
        if (!(seen & (1u << i))) {
            snprintf(err, errlen, "record field %s is missing", required[i]);
            goto out;
        }
    }
    rc = 0;
out:
    msgpack_unpacked_destroy(&u);
    return rc;
}
