/* slots: hash slots, redirections and the slot map of Redis Cluster. The contract is in
 * include/redis/slots.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/slots.h"

/* CRC16-CCITT (XModem, polynomial 0x1021) of each byte value, as in the specification's
 * reference implementation: a byte at a time instead of a bit. */
static const uint16_t crc16_table[256] = {
    0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
    0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
    0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
    0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
    0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
    0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
    0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
    0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
    0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
    0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
    0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
    0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
    0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
    0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
    0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
    0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
    0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
    0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
    0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
    0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
    0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
    0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
    0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
    0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
    0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
    0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
    0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
    0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
    0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
    0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
    0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
    0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

uint16_t slots_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)(crc << 8) ^ crc16_table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff];
    return crc;
}

int slots_of_key(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return slots_crc16(open + 1, (size_t)(close - open - 1)) & (SLOTS_COUNT - 1);
    }
    return slots_crc16(key, len) & (SLOTS_COUNT - 1);
}

/* A decimal number of at most max_digits digits in [lo, hi] at *p, which it moves past it.
 * -1 when there is none. */
static long number(const char **p, int max_digits, long lo, long hi)
{
    long v = 0;
    int n = 0;

    while (**p >= '0' && **p <= '9' && n < max_digits)
        v = v * 10 + (*(*p)++ - '0'), n++;
    return n == 0 || (**p >= '0' && **p <= '9') || v < lo || v > hi ? -1 : v;
}

enum slots_redirect slots_parse_redirect(const char *err, int *slot, char host[SLOTS_HOST_MAX],
                                         int *port)
{
    enum slots_redirect kind = strncmp(err, "MOVED ", 6) == 0 ? SLOTS_MOVED
                               : strncmp(err, "ASK ", 4) == 0 ? SLOTS_ASK : SLOTS_NO_REDIRECT;
    const char *p = err + (kind == SLOTS_MOVED ? 6 : 4), *addr, *colon;
    long s, v;

    if (kind == SLOTS_NO_REDIRECT || (s = number(&p, 5, 0, SLOTS_COUNT - 1)) < 0 || *p++ != ' ')
        return SLOTS_NO_REDIRECT;
    addr = p;
    p += strcspn(p, " ");   /* the address ends the message, or a space does */
    colon = memrchr(addr, ':', (size_t)(p - addr));
    if (!colon || (size_t)(colon - addr) >= SLOTS_HOST_MAX)
        return SLOTS_NO_REDIRECT;
    {
        const char *q = colon + 1;
        if ((v = number(&q, 5, 1, 65535)) < 0 || q != p)
            return SLOTS_NO_REDIRECT;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *slot = (int)s;
    *port = (int)v;
    return kind;
}

int slots_topo_init(struct slots_topo *t)
{
    memset(t, 0, sizeof(*t));
    for (int i = 0; i < SLOTS_COUNT; i++)
        t->node_of[i] = -1;
    t->stale = 1;   /* no map read yet */
    return pthread_mutex_init(&t->mu, NULL) == 0 ? 0 : -1;
}

void slots_topo_release(struct slots_topo *t)
{
    free(t->nodes);
    t->nodes = NULL;
    pthread_mutex_destroy(&t->mu);
}

/* slots_node_id with the lock held. */
static int node_id(struct slots_topo *t, const char *host, int port)
{
    for (int i = 0; i < t->nnodes; i++)
        if (t->nodes[i].port == port && strcmp(t->nodes[i].host, host) == 0)
            return i;
    if (t->nnodes == SLOTS_NODES_MAX || strlen(host) >= SLOTS_HOST_MAX || port < 1 || port > 65535)
        return -1;
    if (t->nnodes == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        struct slots_node *nodes = realloc(t->nodes, (size_t)cap * sizeof(*nodes));
        if (!nodes)
            return -1;
        t->nodes = nodes;
        t->cap = cap;
    }
    t->nodes[t->nnodes] = (struct slots_node){ .port = port };
    snprintf(t->nodes[t->nnodes].host, SLOTS_HOST_MAX, "%s", host);
    return t->nnodes++;
}

int slots_node_id(struct slots_topo *t, const char *host, int port)
{
    int id;

    pthread_mutex_lock(&t->mu);
    id = node_id(t, host, port);
    pthread_mutex_unlock(&t->mu);
    return id;
}

int slots_node_addr(struct slots_topo *t, int id, char host[SLOTS_HOST_MAX], int *port)
{
    int rc = -1;

    pthread_mutex_lock(&t->mu);
    if (id >= 0 && id < t->nnodes) {
        memcpy(host, t->nodes[id].host, SLOTS_HOST_MAX);
        *port = t->nodes[id].port;
        rc = 0;
    }
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int slots_nodes(struct slots_topo *t)
{
    int n;

    pthread_mutex_lock(&t->mu);
    n = t->nnodes;
    pthread_mutex_unlock(&t->mu);
    return n;
}

int slots_serves(struct slots_topo *t, int id)
{
    int serves;

    pthread_mutex_lock(&t->mu);
    serves = id >= 0 && id < t->nnodes && t->nodes[id].serves > 0;
    pthread_mutex_unlock(&t->mu);
    return serves;
}

int slots_owner(struct slots_topo *t, int slot)
{
    int id;

    pthread_mutex_lock(&t->mu);
    id = t->node_of[slot];
    pthread_mutex_unlock(&t->mu);
    return id;
}

int slots_any(struct slots_topo *t)
{
    int id = -1;

    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nnodes && id < 0; i++)
        if (t->nodes[i].serves > 0)
            id = i;
    pthread_mutex_unlock(&t->mu);
    return id;
}

int slots_missing(struct slots_topo *t)
{
    int missing = 0;

    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < SLOTS_COUNT; i++)
        missing += t->node_of[i] < 0;
    pthread_mutex_unlock(&t->mu);
    return missing;
}

/* Gives slot to node id (or none, -1), keeping the nodes' counts. Lock held. */
static void assign(struct slots_topo *t, int slot, int id)
{
    int was = t->node_of[slot];

    if (was == id)
        return;
    if (was >= 0)
        t->nodes[was].serves--;
    if (id >= 0)
        t->nodes[id].serves++;
    t->node_of[slot] = id;
}

void slots_moved(struct slots_topo *t, int slot, int id, int64_t now_ms)
{
    if (slot < 0 || slot >= SLOTS_COUNT)
        return;
    pthread_mutex_lock(&t->mu);
    if (id >= 0 && id < t->nnodes) {
        assign(t, slot, id);
        t->moved_ms[slot] = now_ms ? now_ms : 1;
        t->stale = 1;
    }
    pthread_mutex_unlock(&t->mu);
}

void slots_mark_stale(struct slots_topo *t)
{
    pthread_mutex_lock(&t->mu);
    t->stale = 1;
    pthread_mutex_unlock(&t->mu);
}

int slots_refresh_begin(struct slots_topo *t, int64_t now_ms)
{
    int go;

    pthread_mutex_lock(&t->mu);
    go = t->stale && !t->refreshing &&
         (!t->refreshes || now_ms - t->refreshed_ms >= SLOTS_REFRESH_MIN_MS);
    if (go) {
        t->refreshing = 1;
        t->refreshed_ms = now_ms;
        t->refreshes++;
    }
    pthread_mutex_unlock(&t->mu);
    return go;
}

void slots_refresh_failed(struct slots_topo *t)
{
    pthread_mutex_lock(&t->mu);
    t->refreshing = 0;
    pthread_mutex_unlock(&t->mu);
}

/* The owner each range gives its slots, into owner[] (-1 where none does). Lock held. 0, or -1
 * when a range does not read. */
static int owners_of(struct slots_topo *t, const struct slots_range *r, size_t n, int32_t *owner)
{
    for (int s = 0; s < SLOTS_COUNT; s++)
        owner[s] = -1;
    for (size_t i = 0; i < n; i++) {
        int id;
        if (r[i].first < 0 || r[i].last >= SLOTS_COUNT || r[i].first > r[i].last ||
            (id = node_id(t, r[i].host, r[i].port)) < 0)
            return -1;
        for (int s = r[i].first; s <= r[i].last; s++)
            owner[s] = id;
    }
    return 0;
}

int slots_adopt(struct slots_topo *t, const struct slots_range *r, size_t n, int64_t now_ms)
{
    int32_t *owner = malloc(SLOTS_COUNT * sizeof(*owner));
    int rc = -1;

    pthread_mutex_lock(&t->mu);
    t->refreshing = 0;
    if (owner && owners_of(t, r, n, owner) == 0) {
        t->stale = 0;
        for (int s = 0; s < SLOTS_COUNT; s++) {
            int trusted = t->moved_ms[s] && now_ms - t->moved_ms[s] < SLOTS_MOVED_TRUST_MS;
            if (trusted && owner[s] != t->node_of[s]) {
                t->stale = 1;   /* the map is older than the MOVED: ask again later */
                continue;
            }
            t->moved_ms[s] = 0;
            assign(t, s, owner[s]);
        }
        rc = 0;
    }
    pthread_mutex_unlock(&t->mu);
    free(owner);
    return rc;
}
