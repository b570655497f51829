/* master: where the Redis master is: the one the Sentinels name (asked in turn, checked
 * with ROLE), or for each slot of a Redis Cluster the master that serves it (CLUSTER SLOTS).
 * Part of conn; the contract is in include/redis/conn.h, the shared inside in include/redis/conn_link.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "redis/conn_link.h"
#include "redis/sentinel.h"
#include "redis/watch.h"

/* ------------------------------------------------------------------ where the master is */

/* Asks the Sentinel at position i of db->order where the master is. 0 with host and port, or
 * -1 with err set. */
static int ask_sentinel(struct conn *db, int i, char host[SENTINEL_HOST_MAX], int *port,
                        char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    const char *addr = cfg->redis.sentinels[db->order[i]];
    int64_t timeout = cfg->redis.timeout_ms < SENTINEL_TIMEOUT_MS ? cfg->redis.timeout_ms
                                                                  : SENTINEL_TIMEOUT_MS;
    struct link s = { 0 };
    char shost[SENTINEL_HOST_MAX], why[256] = "";
    redisReply *r = NULL;
    int sport, rc = -1;

    if (sentinel_split_addr(addr, shost, &sport) < 0) {
        snprintf(err, errlen, "Sentinel %s: not host:port", addr);
        return -1;
    }
    if (link_connect(&s, shost, sport, timeout, why, sizeof(why)) < 0 ||
        link_auth(&s, "", cfg->redis.sentinel_password, why, sizeof(why)) < 0 ||
        !(r = redisCommand(s.c, "SENTINEL get-master-addr-by-name %s", cfg->redis.master_name))) {
        snprintf(err, errlen, "Sentinel %.64s: %.180s", addr, r || !s.c || why[0] ? why : link_error(&s));
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
static int check_role(struct link *l, char *err, size_t errlen)
{
    redisReply *r = redisCommand(l->c, "ROLE");
    int rc = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0
                 ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis: the server Sentinel named is not a master (yet): %s",
                 !r ? link_error(l) : r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->type == REDIS_REPLY_STRING
                     ? r->element[0]->str : "no role");
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Connects db->one to the master: the configured server, or the one the Sentinels name, asked
 * in turn and checked with ROLE. A Sentinel whose master passed is asked first from then on; one
 * that names a server that is not the master (an old one, or one not promoted yet) is passed
 * over for the next. */
int open_one(struct conn *db, char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    char host[SENTINEL_HOST_MAX];
    int port;

    if (!cfg->redis.nsentinels)
        return link_open(&db->lc, &db->one, cfg->redis.host, (int)cfg->redis.port, err, errlen);
    if (conn_watched(db) && watch_promoted(host, &port)) {
        /* the Sentinels name the old master until the switch, and it takes writes still: only
         * the replica promoted will do */
        if (link_open(&db->lc, &db->one, host, port, err, errlen) < 0)
            return -1;
        if (check_role(&db->one, err, errlen) < 0) {
            link_drop(&db->one);
            return -1;
        }
        snprintf(db->at, sizeof(db->at), "%s:%d", host, port);
        return 0;
    }
    for (int i = 0; i < cfg->redis.nsentinels; i++) {
        if (ask_sentinel(db, i, host, &port, err, errlen) < 0)
            continue;
        if (link_open(&db->lc, &db->one, host, port, err, errlen) < 0)
            continue;
        if (check_role(&db->one, err, errlen) < 0) {
            link_drop(&db->one);
            continue;
        }
        sentinel_prefer(db->order, i);
        snprintf(db->at, sizeof(db->at), "%s:%d", host, port);
        return 0;
    }
    return -1;   /* err: the last Sentinel's reason */
}

/* 1 when db's calls follow the Sentinel watch. */
int conn_watched(const struct conn *db)
{
    return db->cfg->redis.nsentinels && watch_running();
}

/* After the master moved, the Sentinel that told of it is asked first. */
void prefer_announcer(struct conn *db)
{
    int a = watch_announcer();

    for (int i = 0; a >= 0 && i < db->cfg->redis.nsentinels; i++)
        if (db->order[i] == a)
            sentinel_prefer(db->order, i);
}

/* ------------------------------------------------------------------ the cluster's slot map */

/* The process's one slot map: every connection shares what any of them learns. */
static struct slots_topo topo;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static int topo_ok;

static void topo_init(void)
{
    topo_ok = slots_topo_init(&topo) == 0;
}

struct slots_topo *shared_topo(void)
{
    pthread_once(&topo_once, topo_init);
    return topo_ok ? &topo : NULL;
}

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

/* Reads CLUSTER SLOTS' answer into ranges (*n of them, caller frees): per range [first, last,
 * [host, port, id...], replicas...]. An empty host is the node that answered (from). 0, or -1
 * with err set. */
static int read_slots(const redisReply *r, const char *from, struct slots_range **out, size_t *n,
                      char *err, size_t errlen)
{
    struct slots_range *rs;

    if (r->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "redis CLUSTER SLOTS: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return -1;
    }
    if (!(rs = calloc(r->elements ? r->elements : 1, sizeof(*rs)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *node;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || (node = e->element[2])->type != REDIS_REPLY_ARRAY ||
            node->elements < 2 || node->element[0]->type != REDIS_REPLY_STRING ||
            node->element[0]->len >= SLOTS_HOST_MAX) {
            snprintf(err, errlen, "redis CLUSTER SLOTS: range %zu does not read", i);
            free(rs);
            return -1;
        }
        rs[i] = (struct slots_range){ (int)int_of(e->element[0]), (int)int_of(e->element[1]), "",
                                      (int)int_of(node->element[1]) };
        snprintf(rs[i].host, sizeof(rs[i].host), "%s", node->element[0]->len ? node->element[0]->str : from);
    }
    *out = rs;
    *n = r->elements;
    return 0;
}

/* Asks node id (over db's link when it has one, else a connection of its own) for the slot
 * map, and puts it in place. 0, or -1 with err set. */
static int ask_slots(struct conn *db, int id, const char *host, int port, char *err, size_t errlen)
{
    struct link own = { 0 }, *l = id >= 0 && id < db->nlinks && db->links[id].c && !db->links[id].c->err
                                      ? &db->links[id] : &own;
    struct slots_range *ranges = NULL;
    redisReply *r = NULL;
    size_t n = 0;
    int rc = -1;

    if (l == &own && (link_connect(l, host, port, db->cfg->redis.timeout_ms, err, errlen) < 0 ||
                      link_auth(l, db->cfg->redis.username, db->cfg->redis.password, err, errlen) < 0))
        goto out;
    if ((r = link_cmd(l, "CLUSTER SLOTS", err, errlen, "CLUSTER %s", "SLOTS")) &&
        read_slots(r, host, &ranges, &n, err, errlen) == 0) {
        rc = slots_adopt(db->topo, ranges, n, clock_mono_ms());
        if (rc < 0)
            snprintf(err, errlen, "redis CLUSTER SLOTS from %.200s:%d: a range does not read", host, port);
    }
    if (!r && l != &own)
        link_drop(l);
out:
    if (r)
        freeReplyObject(r);
    free(ranges);
    link_drop(&own);
    return rc;
}

/* Reads the slot map again (slots_refresh_begin said so): from the nodes that serve slots,
 * then the seeds, the first that answers. The old map stays when none does. */
void refresh_map(struct conn *db)
{
    const struct config *cfg = db->cfg;
    int known = slots_nodes(db->topo);
    char err[256];

    for (int i = 0; i < known + cfg->redis.ncluster; i++) {
        char host[SLOTS_HOST_MAX];
        int port, id = i < known ? i : -1;
        if (id >= 0 && (!slots_serves(db->topo, id) ||
                        (id < db->nlinks && db->links[id].retry_at_ms > clock_mono_ms())))
            continue;   /* no master, or it failed lately: a dead or hung node costs a timeout */
        if (id >= 0 ? slots_node_addr(db->topo, id, host, &port) < 0
                    : sentinel_split_addr(cfg->redis.cluster[i - known], host, &port) < 0)
            continue;
        if (ask_slots(db, id, host, port, err, sizeof(err)) == 0)
            return;
    }
    slots_refresh_failed(db->topo);
}

int conn_slot_of(const struct conn *db, const char *key, size_t len)
{
    return db->topo ? slots_of_key(key, len) : -1;
}
