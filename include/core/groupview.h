/* groupview: what Redis holds of each partition group (its lease, its owner's published
 * status) and of the live instances: the data of GET /delay-queue/api/claims, read by the
 * leases module and rendered by the API's. Pure declarations. */
#ifndef DQ_GROUPVIEW_H
#define DQ_GROUPVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

/* An instance's token, "<host>/<http.listen>/<8 hex>/<pid>.<8 characters>": a hostname (64),
 * the listen address (CONFIG_STR_MAX) and 40 more. */
#define GROUPVIEW_TOKEN_MAX (64 + CONFIG_STR_MAX + 40)

/* What an owner published of one partition of its group. */
struct lease_part {
    char topic[TOPIC_NAME_MAX + 1];
    int partition;
    long long committed, end;   /* offsets; -1 when not known */
    long long head_due_ms;      /* epoch ms when the head next acts; -1 when none */
};

/* One group as Redis holds it: its lease and its owner's published status. */
struct lease_group {
    int group;
    char owner[GROUPVIEW_TOKEN_MAX];          /* the lease's token; "" for none */
    int64_t ttl_ms;                        /* the lease's time left; -1 for none */
    int status_read;                       /* the status hash was read (it may be empty) */
    char status_owner[GROUPVIEW_TOKEN_MAX];   /* who published the status; "" for none */
    int64_t updated_ms;                    /* when it was published, epoch ms; -1 for none */
    struct lease_part *parts;              /* owned, nparts of them */
    size_t nparts;
};

/* A live instance: its token and when its heartbeat expires (epoch ms). */
struct lease_live {
    char token[GROUPVIEW_TOKEN_MAX];
    int64_t until_ms;
};

/* Every group's lease and status, and the live instances: GET /delay-queue/api/claims's data. */
struct lease_view {
    struct lease_group *groups;   /* owned, ngroups (delay.ngroups) of them */
    size_t ngroups;
    struct lease_live *live;      /* owned, nlive of them */
    size_t nlive;
};

#endif
