/* addrs: how many connections each client address holds, for the whole process, so that
 * http.max_connections_per_ip is exact whatever http.threads is and whichever thread accepts.
 * Pure logic: a table of counts keyed by the address's bytes. Thread-safe. */
#ifndef DQ_ADDRS_H
#define DQ_ADDRS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define ADDRS_KEY_MAX 16    /* an IPv6 address; IPv4 takes 4 */

struct addrs_entry {
    uint8_t key[ADDRS_KEY_MAX];
    uint8_t len;            /* 0: a free slot */
    uint8_t gone;           /* a slot once used, now free: probing goes on past it */
    unsigned count;
};

struct addrs {
    pthread_mutex_t mu;
    struct addrs_entry *slot;
    size_t cap;             /* a power of two, at least twice the addresses that can be held */
    unsigned limit;         /* connections per address */
};

/* A table for up to max_conns connections (so as many addresses at most), limit per address.
 * 0, or -1 out of memory. */
int addrs_init(struct addrs *a, unsigned max_conns, unsigned limit);
void addrs_release(struct addrs *a);

/* One more connection from key (len bytes): 0 when the address had fewer than the limit (it
 * now holds one more), -1 when it is at its limit or the table is full (nothing counted). */
int addrs_take(struct addrs *a, const void *key, size_t len);
/* One connection of key closed. */
void addrs_give(struct addrs *a, const void *key, size_t len);
/* How many connections key holds. */
unsigned addrs_count(struct addrs *a, const void *key, size_t len);

#endif
