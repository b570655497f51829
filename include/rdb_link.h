/* rdb_link: the inside of rdb, shared by its two files and nothing else: rdb.c (connections,
 * pipelines, replies) and rdb_where.c (where the master is: the Sentinels' answer, or a Redis
 * Cluster's slot map). Callers use include/rdb.h. */
#ifndef DQ_RDB_LINK_H
#define DQ_RDB_LINK_H

#include <stdint.h>
#include <sys/time.h>

#include <hiredis.h>

#include "config.h"
#include "rdb.h"
#include "slots.h"

/* A Sentinel is asked this long at most (connect and answer), so that a dead one costs little
 * before the next is asked; never longer than redis.timeout_ms. */
#define SENTINEL_TIMEOUT_MS 500

/* One connection to one server. */
struct link {
    redisContext *c;
    char host[SLOTS_HOST_MAX];  /* a cluster node's address; unused for the one master */
    int port;
    int elsewhere;              /* a reply said this is not the master: reconnect before use */
    int used;                   /* took calls in this round of a pipeline */
    int reload;                 /* answered NOSCRIPT in this round: load the scripts again */
    int64_t retry_at_ms;        /* connecting failed: not again before then */
    int64_t backoff_ms;
    char last_err[256];         /* why connecting failed */
    char fail[320];             /* why it takes no calls in this round */
};

struct rdb {
    const struct config *cfg;
    const char *const *scripts;
    int nscripts;
    char (*sha)[41];
    int cluster;                /* redis.cluster: many masters, a slot map */
    struct link one;            /* the one server, or the master the Sentinels name */
    int order[CONFIG_ADDRS_MAX];   /* the Sentinels, in the order they are asked */
    unsigned seen_gen;          /* the watch's generation one was connected in */
    struct slots_map *map;      /* cluster: which node serves each slot */
    int map_stale;              /* cluster: read the map again before the next round */
    struct link *links;         /* cluster: links[i] to map->nodes[i] */
    int unconfirmed;            /* the last pipeline's writes lack redis.wait_replicas replicas */
    char wait_err[160];         /* why, when unconfirmed */
    char why[96];               /* conn_error's text for a timeout */
};

/* One connection's helpers (rdb.c). Each returns 0, or -1 with err set. */
void link_drop(struct link *l);
const char *link_error(struct rdb *db, const struct link *l);   /* its error, for a message */
struct timeval link_timeval(int64_t ms);
int link_connect(struct rdb *db, struct link *l, const char *host, int port, int64_t timeout_ms,
                 char *err, size_t errlen);
int link_auth(struct rdb *db, struct link *l, const char *user, const char *password, char *err,
              size_t errlen);
/* A setup command (fmt with one string argument): its reply, or NULL with err set. */
redisReply *link_cmd(struct rdb *db, struct link *l, const char *what, char *err, size_t errlen,
                     const char *fmt, const char *arg);
/* Connects l to the master at host:port: AUTH, SELECT, the scripts. */
int link_open(struct rdb *db, struct link *l, const char *host, int port, char *err, size_t errlen);

/* Where the master is (rdb_where.c). */
int open_one(struct rdb *db, char *err, size_t errlen);   /* db->one to the master */
int rdb_watched(const struct rdb *db);                    /* db->one follows the Sentinel watch */
void prefer_announcer(struct rdb *db);                    /* ask the Sentinel that told of a move first */
int refresh_map(struct rdb *db, char *err, size_t errlen); /* read the cluster's slot map again */
/* The node index of host:port, added to the map when new (an ASK target); -1 when full. */
int node_of_addr(struct rdb *db, const char *host, int port);

#endif
