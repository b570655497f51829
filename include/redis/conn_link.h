/* conn_link: the inside of conn, shared by its two files and nothing else: conn.c (the pipeline's
 * transport, calls, replies) and master.c (where the master is: the Sentinels' answer, or a
 * Redis Cluster's slot map, which every conn of the process shares). conn.c calls master.c,
 * both call rlink.c (one connection), never the other way. Callers use include/redis/conn.h. */
#ifndef DQ_CONN_LINK_H
#define DQ_CONN_LINK_H

#include <stdint.h>

#include "core/config.h"
#include "redis/conn.h"
#include "redis/rlink.h"
#include "redis/rpipe.h"
#include "redis/sentinel.h"
#include "redis/slots.h"

/* A Sentinel is asked this long at most (connect and answer), so that a dead one costs little
 * before the next is asked; never longer than redis.timeout_ms. */
#define SENTINEL_TIMEOUT_MS 500

struct conn {
    const struct config *cfg;
    struct link_conf lc;        /* the scripts every link loads, and their SHA-1s */
    struct link one;            /* the one server, or the master the Sentinels name */
    int order[CONFIG_ADDRS_MAX];   /* the Sentinels, in the order they are asked */
    unsigned seen_gen;          /* the watch's generation one was connected in */
    char at[SENTINEL_HOST_MAX + 8];   /* where one was last connected to: "host:port" */
    struct slots_topo *topo;    /* cluster: the process's slot map; NULL otherwise */
    struct link *links;         /* cluster: links[id] to node number id, nlinks of them */
    int nlinks;
    struct rpipe pipe;          /* the engine, with this conn as its transport */
    int unconfirmed;            /* conn_call: its writes lack redis.wait_replicas replicas */
    char wait_err[160];         /* why, when unconfirmed */
    enum conn_code code;         /* conn_call: the kind of its failure */
    int sub;                    /* conn_subscribe: the link subscribed (-1: one) */
};

/* Where the master is (master.c). */
int open_one(struct conn *db, char *err, size_t errlen);   /* db->one to the master */
int conn_watched(const struct conn *db);                    /* db->one follows the Sentinel watch */
void prefer_announcer(struct conn *db);                    /* ask the Sentinel that told of a move first */
struct slots_topo *shared_topo(void);                     /* the process's slot map; NULL out of memory */
void refresh_map(struct conn *db);                         /* reads the cluster's slot map again */

#endif
