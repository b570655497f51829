/* apijson: the ground of the HTTP API's JSON, wire compatible with go-delayqueue: the answer
 * codes and a request's error, the {"code","message","data"} envelope, reading a request's
 * object and its integers, and text made a valid JSON string whatever bytes it holds. Pure
 * logic: jansson only. */
#ifndef DQ_APIJSON_H
#define DQ_APIJSON_H

#include <stddef.h>
#include <stdint.h>

/* Response codes. 0, 400 and 10001-10004 are go-delayqueue's; the others equal the HTTP status. */
enum api_code {
    API_OK = 0,
    API_BAD_REQUEST = 400,
    API_UNAUTHORIZED = 401,
    API_NOT_FOUND = 404,
    API_CONFLICT = 409,
    API_TOO_LARGE = 413,
    API_INTERNAL = 500,          /* what delayq keeps does not read */
    API_NOT_IMPLEMENTED = 501,
    API_UNAVAILABLE = 503,
    API_BAD_DELAY = 10001,
    API_ADD_FAILED = 10002,
    API_REMOVE_FAILED = 10003,
    API_GET_FAILED = 10004,
    API_RESCHEDULE_FAILED = 10005,
};

struct api_error {
    int status;            /* HTTP status */
    int code;              /* enum api_code */
    char message[256];
};

/* Sets e (its message made valid UTF-8) and returns -1, so that error paths read
 * `return api_fail(e, ...)`. */
int api_fail(struct api_error *e, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Builds {"code":..,"message":..,"data":..}; takes ownership of data (may be NULL for null).
 * Returns a malloc'd NUL-terminated string (caller frees), or NULL when out of memory. */
char *api_response(int code, const char *message, void *data);

/* Frees data made for api_response that will not be answered. Safe on NULL. */
void api_data_free(void *data);

/* data with one more reference, for an api_response made from data its caller still frees.
 * Safe on NULL. */
void *api_data_ref(void *data);

/* A request body (len bytes) as a JSON object (a json_t *, caller json_decref's it), or NULL
 * with e set to a 400: not JSON, a duplicate member, or not an object. */
void *api_json_object(const char *body, size_t len, struct api_error *e);

/* A query value v (NULL: absent, *out left as it is) as a decimal integer from lo to hi into
 * *out: 0, or -1 when it is not one. */
int api_query_int(const char *v, int64_t lo, int64_t hi, int64_t *out);

/* A JSON integer v (a json_t *) into *out: 0, or -1 when v is none. A number with a fraction of
 * zero (1500.0, as clients that compute in floating point send it) is one too, as in JSON
 * Schema, up to 2^53. */
int api_json_int(const void *v, int64_t *out);

/* An optional integer member name of the JSON object obj (a json_t *) into *out, from lo to hi:
 * 0 (also when absent or null), or -1 with e set to a 400 naming what then name. */
int api_json_member_int(const void *obj, const char *what, const char *name, int64_t lo,
                        int64_t hi, int64_t *out, struct api_error *e);

/* 0 when every member of the JSON object obj (a json_t *) is one of known[0..n), else -1 with e
 * set to a 400: "<member> is not a member of <what> (<known, listed>)". */
int api_json_only(const void *obj, const char *const *known, size_t n, const char *what,
                  struct api_error *e);

/* Bytes s (len of them) as a JSON string (a json_t *): at most max bytes of them, cut before a
 * character that would not fit, and each byte that is not part of UTF-8 as U+FFFD. */
void *api_json_text(const char *s, size_t len, size_t max);

/* The whole NUL-terminated text s as api_json_text makes it (a json_t *). */
void *api_json_str(const char *s);

/* Replaces in place every byte of the NUL-terminated s that is not part of valid UTF-8 with
 * '?': a message may quote client text or a library's, cut by snprintf anywhere, and must stay
 * a JSON string. */
void api_json_clean(char *s);

#endif
