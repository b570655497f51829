/* sentinel: parsing Sentinel's answers, classifying error replies, and the order of asking. The
 * contract is in include/redis/sentinel.h. */
#include <stdio.h>
#include <string.h>

#include "redis/sentinel.h"

int sentinel_split_addr(const char *addr, char host[SENTINEL_HOST_MAX], int *port)
{
    const char *colon = strrchr(addr, ':');
    size_t hlen;
    long v = 0;

    if (!colon || colon == addr || !colon[1])
        return -1;
    hlen = (size_t)(colon - addr);
    if (addr[0] == '[' && colon[-1] == ']') {
        addr++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= SENTINEL_HOST_MAX)
        return -1;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9' || (v = v * 10 + (*p - '0')) > 65535)
            return -1;
    }
    if (v < 1)
        return -1;
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    *port = (int)v;
    return 0;
}

int sentinel_master_addr(const char *h, size_t hlen, const char *p, size_t plen,
                         char host[SENTINEL_HOST_MAX], int *port, char *err, size_t errlen)
{
    long v = 0;

    if (hlen == 0 || hlen >= SENTINEL_HOST_MAX || memchr(h, '\0', hlen)) {
        snprintf(err, errlen, "Sentinel named no usable master host");
        return -1;
    }
    for (size_t i = 0; i < plen; i++) {
        if (p[i] < '0' || p[i] > '9' || (v = v * 10 + (p[i] - '0')) > 65535) {
            v = 0;
            break;
        }
    }
    if (v < 1) {
        snprintf(err, errlen, "Sentinel named the master's port \"%.*s\", which is no port",
                 (int)(plen > 16 ? 16 : plen), p);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (int)v;
    return 0;
}

int sentinel_error_means_elsewhere(const char *errstr)
{
    static const char *const codes[] = {
        "READONLY", "LOADING", "MASTERDOWN", "NOREPLICAS", "MOVED", "ASK", "TRYAGAIN",
        "CLUSTERDOWN",
    };

    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        size_t n = strlen(codes[i]);
        if (strncmp(errstr, codes[i], n) == 0 && (errstr[n] == ' ' || errstr[n] == '\0'))
            return 1;
    }
    return 0;
}

void sentinel_prefer(int *order, int i)
{
    int first = order[i];

    memmove(order + 1, order, (size_t)i * sizeof(*order));
    order[0] = first;
}

/* The master a Sentinel event is about: the first word of +switch-master ("<name> <old ip>
 * <old port> <new ip> <new port>"), the word after "@" of an event on a replica ("slave
 * <ip:port> <ip> <port> @ <name> <ip> <port>"), or the second word of one on the master itself
 * ("master <name> <ip> <port>"). 1 when it is master_name. */
static int about(const char *channel, const char *payload, const char *master_name)
{
    size_t n = strlen(master_name);
    const char *at = strstr(payload, " @ ");
    const char *name = strcmp(channel, "+switch-master") == 0 ? payload
                       : at ? at + 3
                       : strncmp(payload, "master ", 7) == 0 ? payload + 7 : NULL;

    return name && strncmp(name, master_name, n) == 0 && (name[n] == ' ' || name[n] == '\0');
}

enum sentinel_event sentinel_event_of(const char *channel, const char *payload,
                                      const char *master_name)
{
    static const char *const begins[] = {
        "+try-failover", "+elected-leader", "+failover-state-select-slave", "+selected-slave",
        "+failover-state-send-slaveof-noone", "+failover-state-wait-promotion",
    };

    if (!about(channel, payload, master_name))
        return SENTINEL_EV_NONE;
    if (strcmp(channel, "+switch-master") == 0)
        return SENTINEL_EV_SWITCH;
    if (strcmp(channel, "+promoted-slave") == 0)
        return SENTINEL_EV_PROMOTED;
    if (strncmp(channel, "+failover-end", 13) == 0 || strncmp(channel, "-failover-abort-", 16) == 0)
        return SENTINEL_EV_OVER;
    for (size_t i = 0; i < sizeof(begins) / sizeof(begins[0]); i++)
        if (strcmp(channel, begins[i]) == 0)
            return SENTINEL_EV_FAILOVER;
    return SENTINEL_EV_NONE;
}

int sentinel_event_addr(enum sentinel_event ev, const char *payload,
                        char host[SENTINEL_HOST_MAX], int *port)
{
    int skip = ev == SENTINEL_EV_PROMOTED ? 2 : ev == SENTINEL_EV_SWITCH ? 3 : -1;
    const char *h = payload, *p, *end;

    for (int w = 0; w < skip && h; w++)
        if ((h = strchr(h, ' ')))
            h++;
    if (skip < 0 || !h || !(p = strchr(h, ' ')))
        return -1;
    end = strchr(p + 1, ' ');
    return sentinel_master_addr(h, (size_t)(p - h), p + 1, end ? (size_t)(end - p - 1) : strlen(p + 1),
                                host, port, (char[8]){ 0 }, 8);
}
