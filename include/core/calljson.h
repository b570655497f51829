/* calljson: the JSON of a job's callback: the "callback" object of an add (and of a dq-callback
 * header, its copy on a delivered or dead-lettered message) read and checked, written back in
 * the same form, and shown by get with how its calls went. Pure logic: jansson only. */
#ifndef DQ_CALLJSON_H
#define DQ_CALLJSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/api.h"
#include "core/job.h"

/* Reads a job's callback from the JSON object obj (a json_t *: an add's "callback" member) into
 * *out (malloc'd; caller frees with job_callback_free, also on error). 0, or -1 with what is
 * wrong in e (a 400 naming the field; a 500 when out of memory). */
int calljson_read(void *obj, const struct api_limits *lim, struct job_callback **out,
                  struct api_error *e);

/* The same from JSON text (len bytes: a dq-callback header). *out is NULL when the text is not
 * JSON. */
int calljson_parse(const char *text, size_t len, const struct api_limits *lim,
                   struct job_callback **out, struct api_error *e);

/* A copy of an answer's data (a new reference; NULL for NULL) in which no callback header
 * value shows: each "callback" object's headers, and each dead letter's "dq-callback" text,
 * keep their names with null values. What the read token is answered. */
void *calljson_hidden(void *data);

/* A callback as JSON text in the form calljson_parse reads (for a dead letter's dq-callback,
 * so that it can be added again as it was): malloc'd, NULL when out of memory. */
char *calljson_text(const struct job_callback *cb);

/* A job's callback as get shows it (a json_t *, caller owns it): the target, the method, and
 * how its calls went; "next_attempt_ms" is due_ms (epoch ms) while a failed call waits in
 * state JOB_PENDING to be made again, else null. */
void *calljson_view(const struct job_callback *cb, enum job_state state, int64_t due_ms);

/* 1 when a callback's body (len bytes) is a JSON object or array: it is called back with
 * Content-Type application/json. */
int calljson_body_is_json(const char *body, size_t len);

#endif
