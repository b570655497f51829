/* slots: hash slots, redirections and the slot map of Redis Cluster. The contract is in
 * include/slots.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slots.h"

uint16_t slots_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
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

void slots_map_init(struct slots_map *m)
{
    for (int i = 0; i < SLOTS_COUNT; i++)
        m->node_of[i] = -1;
    m->nnodes = 0;
}

/* The index of host:port in m, added when new; -1 when m is full or the host too long. */
static int node_index(struct slots_map *m, const char *host, int port)
{
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            return i;
    if (m->nnodes == SLOTS_NODES_MAX || strlen(host) >= SLOTS_HOST_MAX)
        return -1;
    snprintf(m->nodes[m->nnodes].host, SLOTS_HOST_MAX, "%s", host);
    m->nodes[m->nnodes].port = port;
    return m->nnodes++;
}

int slots_map_add(struct slots_map *m, int first, int last, const char *host, int port)
{
    int n;

    if (first < 0 || last >= SLOTS_COUNT || first > last || port < 1 || port > 65535 ||
        (n = node_index(m, host, port)) < 0)
        return -1;
    for (int s = first; s <= last; s++)
        m->node_of[s] = (int16_t)n;
    return n;
}

int slots_map_missing(const struct slots_map *m)
{
    int missing = 0;

    for (int i = 0; i < SLOTS_COUNT; i++)
        missing += m->node_of[i] < 0;
    return missing;
}
