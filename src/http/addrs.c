/* addrs: connections per client address. The contract is in include/http/addrs.h. */
#include <stdlib.h>
#include <string.h>

#include "http/addrs.h"

int addrs_init(struct addrs *a, unsigned max_conns, unsigned limit)
{
    size_t cap = 16;

    while (cap < 2 * (size_t)max_conns)
        cap *= 2;
    memset(a, 0, sizeof(*a));
    if (!(a->slot = calloc(cap, sizeof(*a->slot))))
        return -1;
    a->cap = cap;
    a->limit = limit;
    pthread_mutex_init(&a->mu, NULL);
    return 0;
}

void addrs_release(struct addrs *a)
{
    free(a->slot);
    a->slot = NULL;
    pthread_mutex_destroy(&a->mu);
}

/* FNV-1a of the key. */
static size_t hash(const uint8_t *key, size_t len)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 1099511628211ULL;
    return (size_t)h;
}

/* The slot of key, or (when it has none) the first free one on its probe path (*found 0);
 * NULL when the table has neither. Lock held. */
static struct addrs_entry *find(struct addrs *a, const void *key, size_t len, int *found)
{
    struct addrs_entry *free_slot = NULL;
    size_t at = hash(key, len) & (a->cap - 1);

    *found = 0;
    for (size_t n = 0; n < a->cap; n++, at = (at + 1) & (a->cap - 1)) {
        struct addrs_entry *e = &a->slot[at];
        if (e->len == len && memcmp(e->key, key, len) == 0) {
            *found = 1;
            return e;
        }
        if (!e->len && !free_slot)
            free_slot = e;
        if (!e->len && !e->gone)
            break;   /* the end of key's probe path */
    }
    return free_slot;
}

int addrs_take(struct addrs *a, const void *key, size_t len)
{
    struct addrs_entry *e;
    int found, rc = -1;

    if (len == 0 || len > ADDRS_KEY_MAX)
        return -1;
    pthread_mutex_lock(&a->mu);
    if ((e = find(a, key, len, &found)) && (!found || e->count < a->limit)) {
        if (!found) {
            memcpy(e->key, key, len);
            e->len = (uint8_t)len;
            e->count = 0;
        }
        e->count++;
        rc = 0;
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void addrs_give(struct addrs *a, const void *key, size_t len)
{
    struct addrs_entry *e;
    int found;

    if (len == 0 || len > ADDRS_KEY_MAX)
        return;
    pthread_mutex_lock(&a->mu);
    if ((e = find(a, key, len, &found)) && found && --e->count == 0) {
        e->len = 0;
        e->gone = 1;
    }
    pthread_mutex_unlock(&a->mu);
}

unsigned addrs_count(struct addrs *a, const void *key, size_t len)
{
    struct addrs_entry *e;
    unsigned n = 0;
    int found;

    if (len == 0 || len > ADDRS_KEY_MAX)
        return 0;
    pthread_mutex_lock(&a->mu);
    if ((e = find(a, key, len, &found)) && found)
        n = e->count;
    pthread_mutex_unlock(&a->mu);
    return n;
}
