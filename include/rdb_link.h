/* rdb_link: the inside of rdb, shared by its two files and nothing else: rdb.c (the pipeline's
 * transport, calls, replies) and rdb_where.c (where the master is: the Sentinels' answer, or a
 * Redis Cluster's slot map, which every rdb of the process shares). rdb.c calls rdb_where.c,
 * both call rlink.c (one connection), never the other way. Callers use include/rdb.h. */
#ifndef DQ_RDB_LINK_H
#define DQ_RDB_LINK_H

#include <stdint.h>

#include "config.h"
#include "rdb.h"
#include "rlink.h"
#include "rpipe.h"
#include "slots.h"

/* A Sentinel is asked this long at most (connect and answer), so that a dead one costs little
 * before the next is asked; never longer than redis.timeout_ms. */
#define SENTINEL_TIMEOUT_MS 500

struct rdb {
    const struct config *cfg;
    struct link_conf lc;        /* the scripts every link loads, and their SHA-1s */
    struct link one;            /* the one server, or the master the Sentinels name */
    int order[CONFIG_ADDRS_MAX];   /* the Sentinels, in the order they are asked */
    unsigned seen_gen;          /* the watch's generation one was connected in */
    struct slots_topo *topo;    /* cluster: the process's slot map; NULL otherwise */
    struct link *links;         /* cluster: links[id] to node number id, nlinks of them */
    int nlinks;
    struct rpipe pipe;          /* the engine, with this rdb as its transport */
    int unconfirmed;            /* rdb_call: its writes lack redis.wait_replicas replicas */
    char wait_err[160];         /* why, when unconfirmed */
    enum rdb_code code;         /* rdb_call: the kind of its failure */
};

/* Where the master is (rdb_where.c). */
int open_one(struct rdb *db, char *err, size_t errlen);   /* db->one to the master */
int rdb_watched(const struct rdb *db);                    /* db->one follows the Sentinel watch */
void prefer_announcer(struct rdb *db);                    /* ask the Sentinel that told of a move first */
struct slots_topo *shared_topo(void);                     /* the process's slot map; NULL out of memory */
void refresh_map(struct rdb *db);                         /* reads the cluster's slot map again */

#endif
