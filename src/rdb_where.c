/* rdb_where: where the Redis master is: the one the Sentinels name (asked in turn, checked
 * with ROLE), or for each slot of a Redis Cluster the master that serves it (CLUSTER SLOTS).
 * Part of rdb; the contract is in include/rdb.h, the shared inside in include/rdb_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "rdb_link.h"
#include "sentinel.h"
#include "watch.h"

/* ------------------------------------------------------------------ where the master is */

/* Asks the Sentinel at position i of db->order where the master is. 0 with host and port, or
 * -1 with err set. */
static int ask_sentinel(struct rdb *db, int i, char host[SENTINEL_HOST_MAX], int *port,
                        char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    const char *addr = cfg->redis.sentinels[db->order[i]];
    int64_t timeout = cfg->redis.timeout_ms < SENTINEL_TIMEOUT_MS ? cfg->redis.timeout_ms
                                                                  : SENTINEL_TIMEOUT_MS;
    struct link s = { 0 };
    char shost[SENTINEL_HOST_MAX], why[256];
    redisReply *r = NULL;
    int sport, rc = -1;

    if (sentinel_split_addr(addr, shost, &sport) < 0) {
        snprintf(err, errlen, "Sentinel %s: not host:port", addr);
        return -1;
    }
    if (link_connect(db, &s, shost, sport, timeout, why, sizeof(why)) < 0 ||
        link_auth(db, &s, "", cfg->redis.sentinel_password, why, sizeof(why)) < 0 ||
        !(r = redisCommand(s.c, "SENTINEL get-master-addr-by-name %s", cfg->redis.master_name))) {
        snprintf(err, errlen, "Sentinel %.64s: %.180s", addr, s.c ? link_error(db, &s) : why);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
        rc = sentinel_master_addr(r->element[0]->str, r->element[0]->len, r->element[1]->str,
                                  r->element[1]->len, host, port, why, sizeof(why));
        if (rc < 0)
            snprintf(err, errlen, "Sentinel %.64s: %.180s", addr, why);
    } else {
        snprintf(err, errlen, "Sentinel %.64s: %.180s", addr,
                 r->type == REDIS_REPLY_ERROR ? r->str : "knows no master of that name");
    }
    if (r)
        freeReplyObject(r);
    link_drop(&s);
    return rc;
}

/* 0 when the connected server says it is a master (ROLE), else -1 with err set: a Sentinel may
 * name a node that has not taken its new role yet. */
static int check_role(struct rdb *db, struct link *l, char *err, size_t errlen)
{
    redisReply *r = redisCommand(l->c, "ROLE");
    int rc = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0
                 ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis: the server Sentinel named is not a master (yet): %s",
                 !r ? link_error(db, l) : r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->type == REDIS_REPLY_STRING
                     ? r->element[0]->str : "no role");
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Connects db->one to the master: the configured server, or the one the Sentinels name, asked
 * in turn (the first that answers is asked first from then on) and checked with ROLE. */
int open_one(struct rdb *db, char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    char host[SENTINEL_HOST_MAX];
    int port;

    if (!cfg->redis.nsentinels)
        return link_open(db, &db->one, cfg->redis.host, (int)cfg->redis.port, err, errlen);
    for (int i = 0; i < cfg->redis.nsentinels; i++) {
        if (ask_sentinel(db, i, host, &port, err, errlen) < 0)
            continue;
        sentinel_prefer(db->order, i);
        if (link_open(db, &db->one, host, port, err, errlen) < 0)
            return -1;
        if (check_role(db, &db->one, err, errlen) < 0) {
            link_drop(&db->one);
            return -1;
        }
        return 0;
    }
    return -1;   /* err: the last Sentinel's reason */
}

/* 1 when db's calls follow the Sentinel watch. */
int rdb_watched(const struct rdb *db)
{
    return db->cfg->redis.nsentinels && watch_running();
}

/* After the master moved, the Sentinel that told of it is asked first. */
void prefer_announcer(struct rdb *db)
{
    int a = watch_announcer();

    for (int i = 0; a >= 0 && i < db->cfg->redis.nsentinels; i++)
        if (db->order[i] == a)
            sentinel_prefer(db->order, i);
}

/* ------------------------------------------------------------------ the cluster's slot map */

/* A slot number or port of a CLUSTER SLOTS answer: an integer, or (as some releases send them)
 * its text. -1 when neither. */
static long long int_of(const redisReply *r)
{
    char *end;
    long long v;

    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type != REDIS_REPLY_STRING || !r->len)
        return -1;
    v = strtoll(r->str, &end, 10);
    return *end ? -1 : v;
}

/* Reads CLUSTER SLOTS' answer into m: per range [first, last, [host, port, id...], replicas...].
 * An empty host is the node that answered (from). 0, or -1 with err set. */
static int read_slots(const redisReply *r, const char *from, struct slots_map *m, char *err,
                      size_t errlen)
{
    slots_map_init(m);
    if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "redis CLUSTER SLOTS: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *node;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || (node = e->element[2])->type != REDIS_REPLY_ARRAY ||
            node->elements < 2 || node->element[0]->type != REDIS_REPLY_STRING ||
            slots_map_add(m, (int)int_of(e->element[0]), (int)int_of(e->element[1]),
                          node->element[0]->len ? node->element[0]->str : from,
                          (int)int_of(node->element[1])) < 0) {
            snprintf(err, errlen, "redis CLUSTER SLOTS: range %zu does not read", i);
            return -1;
        }
    }
    return 0;
}

/* Asks host:port for the slot map into m. */
static int ask_slots(struct rdb *db, const char *host, int port, struct slots_map *m, char *err,
                     size_t errlen)
{
    struct link l = { 0 };
    redisReply *r = NULL;
    int rc = -1;

    if (link_connect(db, &l, host, port, db->cfg->redis.timeout_ms, err, errlen) == 0 &&
        link_auth(db, &l, db->cfg->redis.username, db->cfg->redis.password, err, errlen) == 0 &&
        (r = link_cmd(db, &l, "CLUSTER SLOTS", err, errlen, "CLUSTER %s", "SLOTS")))
        rc = read_slots(r, host, m, err, errlen);
    if (r)
        freeReplyObject(r);
    link_drop(&l);
    return rc;
}

/* Puts m in place of db's map: each node keeps its connection when it was in the old map. */
static void adopt_map(struct rdb *db, struct slots_map *m)
{
    struct link *old = db->links, *links = calloc(SLOTS_NODES_MAX, sizeof(*links));

    if (!links)
        return;   /* the old map stays; MOVED keeps it right slot by slot */
    for (int i = 0; i < m->nnodes; i++) {
        snprintf(links[i].host, sizeof(links[i].host), "%s", m->nodes[i].host);
        links[i].port = m->nodes[i].port;
        for (int k = 0; k < db->map->nnodes; k++) {
            if (old[k].port == links[i].port && strcmp(old[k].host, links[i].host) == 0) {
                links[i] = old[k];
                old[k].c = NULL;
            }
        }
    }
    for (int k = 0; k < SLOTS_NODES_MAX; k++)
        link_drop(&old[k]);
    free(old);
    db->links = links;
    memcpy(db->map, m, sizeof(*m));
    db->map_stale = 0;
}

/* Reads the slot map again: from the nodes known, then from the seeds, the first that answers
 * with every slot served. 0, or -1 with err set (the old map stays). */
int refresh_map(struct rdb *db, char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    struct slots_map *m = malloc(sizeof(*m));
    int known = db->map->nnodes, rc = -1;

    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < known + cfg->redis.ncluster && rc < 0; i++) {
        char host[SLOTS_HOST_MAX];
        int port;
        if (i < known) {
            if (db->links[i].retry_at_ms > clock_now_ms())
                continue;   /* it failed lately: a dead or hung node would cost a timeout */
            snprintf(host, sizeof(host), "%s", db->map->nodes[i].host);
            port = db->map->nodes[i].port;
        } else if (sentinel_split_addr(cfg->redis.cluster[i - known], host, &port) < 0) {
            continue;
        }
        if (ask_slots(db, host, port, m, err, errlen) < 0)
            continue;
        if (slots_map_missing(m)) {
            snprintf(err, errlen, "redis cluster: %d slots are served by no node (as %s:%d sees it)",
                     slots_map_missing(m), host, port);
            continue;
        }
        rc = 0;
    }
    if (rc == 0)
        adopt_map(db, m);
    free(m);
    return rc;
}

/* The node index of host:port, added to the map's nodes when new (an ASK target); -1 when the
 * map is full. */
int node_of_addr(struct rdb *db, const char *host, int port)
{
    struct slots_map *m = db->map;
    int n = -1;

    for (int i = 0; i < m->nnodes && n < 0; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            n = i;
    if (n >= 0 || m->nnodes == SLOTS_NODES_MAX || strlen(host) >= SLOTS_HOST_MAX)
        return n;
    n = m->nnodes++;
    snprintf(m->nodes[n].host, SLOTS_HOST_MAX, "%s", host);
    m->nodes[n].port = port;
    snprintf(db->links[n].host, sizeof(db->links[n].host), "%s", host);
    db->links[n].port = port;
    return n;
}

int rdb_slot_of(const struct rdb *db, const char *key, size_t len)
{
    return db->cluster ? slots_of_key(key, len) : -1;
}

