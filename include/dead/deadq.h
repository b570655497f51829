/* deadq: reads the dead-letter topic for the dead-letter routes: newest first across its
 * partitions, page by page from a cursor, and one letter by partition and offset. One consumer
 * of its own (assign only: no group membership, no commits). A struct deadq is one consumer:
 * use it from one thread at a time. */
#ifndef DQ_DEADQ_H
#define DQ_DEADQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

#define DEADQ_PARTITIONS_MAX CONFIG_PARTITIONS_MAX   /* the dead-letter topic's read */
#define DEADQ_CURSOR_MAX (DEADQ_PARTITIONS_MAX * 21 + 8)

struct deadq;

struct dead_header {
    char *name;
    char *value;     /* NULL for a header without a value */
    size_t len;
};

/* One dead letter, copied out of Kafka (all malloc'd). */
struct dead_letter {
    int32_t partition;
    int64_t offset;
    int64_t ts_ms;          /* when it was dead-lettered (the message's timestamp) */
    char *key;              /* NULL: none */
    size_t key_len;
    char *value;            /* NULL: none */
    size_t value_len;
    struct dead_header *hdrs;
    size_t nhdrs;
};
void dead_letter_release(struct dead_letter *l);
void dead_letters_free(struct dead_letter *ls, size_t n);

/* The value of the last header called name (its length into *len), or NULL. */
const char *dead_letter_header(const struct dead_letter *l, const char *name, size_t *len);

/* Where a newest-first reading goes on: per partition, the offset it reads below (exclusive);
 * n 0: from the newest. */
struct deadq_cursor {
    int32_t n;
    int64_t end[DEADQ_PARTITIONS_MAX];
};
/* The cursor's text ("" for none) and back: 0, or -1 when s is not one. */
void deadq_cursor_format(const struct deadq_cursor *c, char *out, size_t outlen);
int deadq_cursor_parse(const char *s, struct deadq_cursor *c);

/* 1 when letter l is one the caller wants; stop set to 1 ends the reading of its partition
 * (a letter older than wanted: the older ones are too). */
typedef int deadq_match_fn(void *ctx, const struct dead_letter *l, int *stop);

struct deadq *deadq_new(const struct config *cfg, char *err, size_t errlen);
void deadq_free(struct deadq *dq);

/* Up to max letters that match, newest first (by timestamp across partitions), from *from
 * (n 0: the newest; or below newest_ms when n is 0 and newest_ms > 0), looking at scan_max
 * letters at most, into *out (malloc'd, *n of them; dead_letters_free). *next: where the next
 * page starts; *more: 0 when no older letter is left. 0; or -1 with err set (Kafka did not
 * answer), -2 (from names another number of partitions than the topic has: no cursor of it). */
int deadq_page(struct deadq *dq, const struct deadq_cursor *from, int64_t newest_ms, size_t max,
               size_t scan_max, deadq_match_fn *match, void *ctx, struct dead_letter **out,
               size_t *n, struct deadq_cursor *next, int *more, char *err, size_t errlen);

/* The n letters at partitions[i] and offsets[i] into out[i], found[i] 1; found[i] 0: there is
 * none; 2: the same as an earlier one of the list (out[i] empty). Letters near each other in
 * a partition are read together. 0, or -1 with err (nothing is out then). */
int deadq_some(struct deadq *dq, size_t n, const int32_t *partitions, const int64_t *offsets,
               struct dead_letter *out, int *found, char *err, size_t errlen);

/* The letter at partition and offset into out (*found 0: there is none). 0, or -1 with err. */
int deadq_one(struct deadq *dq, int32_t partition, int64_t offset, struct dead_letter *out,
              int *found, char *err, size_t errlen);

#endif
