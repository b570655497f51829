/* slots: Redis Cluster's key space as pure logic: the hash slot of a key (CRC16 and hash tags,
 * as the Redis Cluster specification defines them), the redirections a node answers (MOVED,
 * ASK), and the topology: which node serves each slot, shared by every connection of the
 * process. No network library: conn.c does the talking.
 *
 * Nodes are known by their address (host:port) and numbered in an append-only registry: a
 * node's number never changes and is never reused while the process runs, so a pipeline may
 * hold it across a refresh of the map (an ASK target, a round's link). */
#ifndef DQ_SLOTS_H
#define DQ_SLOTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SLOTS_COUNT 16384
/* Nodes one process keeps apart: Redis Cluster is designed for up to 1,000 nodes; addresses
 * that come and go (replaced containers) are registered too, so room for several times that. */
#define SLOTS_NODES_MAX 8192
#define SLOTS_HOST_MAX 256
/* The map is read again at most this often, whatever asks for it (a few times a second). */
#define SLOTS_REFRESH_MIN_MS 250
/* A MOVED outweighs a map read within this long after it: a node asked for the map may not
 * have heard of the slot's new owner yet (gossip), the node that answered MOVED had. */
#define SLOTS_MOVED_TRUST_MS 5000

/* CRC16-CCITT (XModem): polynomial 0x1021, initial value 0, as the specification's crc16.c. */
uint16_t slots_crc16(const char *buf, size_t len);

/* The hash slot of a key: CRC16 of the key, or of its hash tag (what lies between the first
 * "{" and the first "}" after it, when that is not empty), modulo 16384. */
int slots_of_key(const char *key, size_t len);

enum slots_redirect { SLOTS_NO_REDIRECT, SLOTS_MOVED, SLOTS_ASK };

/* Reads an error reply "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>": the slot and
 * the node (host "" when the node did not say: the one that answered). SLOTS_NO_REDIRECT for
 * any other error, or a redirection that does not read. */
enum slots_redirect slots_parse_redirect(const char *err, int *slot, char host[SLOTS_HOST_MAX],
                                         int *port);

/* One range of a CLUSTER SLOTS answer: slots first..last served by the master host:port. */
struct slots_range {
    int first, last;
    char host[SLOTS_HOST_MAX];
    int port;
};

struct slots_node {
    char host[SLOTS_HOST_MAX];
    int port;
    int serves;                 /* slots the map gives it */
};

/* Which master serves each slot. Thread-safe: every function takes the lock. */
struct slots_topo {
    pthread_mutex_t mu;
    int32_t node_of[SLOTS_COUNT];       /* a node's number, or -1: no node serves the slot */
    int64_t moved_ms[SLOTS_COUNT];      /* when a MOVED taught the slot's owner; 0: the map did */
    struct slots_node *nodes;           /* the registry, nnodes of cap */
    int nnodes, cap;
    int stale;                  /* something says the map is out of date */
    int refreshing;             /* a thread reads the map now */
    int64_t refreshed_ms;       /* when the last read began (monotonic ms) */
    long long refreshes;        /* reads begun, for tests and metrics */
};

/* 0, or -1 out of memory. */
int slots_topo_init(struct slots_topo *t);
void slots_topo_release(struct slots_topo *t);

/* The number of host:port, registered when new; -1 when the registry is full (or out of
 * memory, or the host too long). */
int slots_node_id(struct slots_topo *t, const char *host, int port);
/* The address of node id: 0, or -1 when there is no such node. */
int slots_node_addr(struct slots_topo *t, int id, char host[SLOTS_HOST_MAX], int *port);
/* How many nodes are registered (numbers 0 .. n-1). */
int slots_nodes(struct slots_topo *t);
/* 1 when node id serves at least one slot in the map. */
int slots_serves(struct slots_topo *t, int id);

/* The node that serves slot, or -1 (none known: the map has none, or no map was read yet). */
int slots_owner(struct slots_topo *t, int slot);
/* A node that serves some slot (for keyless calls), or -1. */
int slots_any(struct slots_topo *t);
/* How many slots no node serves. */
int slots_missing(struct slots_topo *t);

/* A MOVED said node id serves slot, at now_ms (monotonic). Marks the map stale: other slots
 * have likely moved too. */
void slots_moved(struct slots_topo *t, int slot, int id, int64_t now_ms);
void slots_mark_stale(struct slots_topo *t);

/* 1 when the caller is to read the map now: it is stale (or none was read) and nobody read it
 * within SLOTS_REFRESH_MIN_MS nor reads it now. The caller then reads it (without the lock)
 * and calls slots_adopt or slots_refresh_failed. */
int slots_refresh_begin(struct slots_topo *t, int64_t now_ms);
void slots_refresh_failed(struct slots_topo *t);
/* Puts a map read at now_ms in place: n ranges. A slot the ranges leave out is served by no
 * node (a partial map is kept as it is); a slot a MOVED taught within SLOTS_MOVED_TRUST_MS
 * keeps the MOVED's owner when the map names another. 0, or -1 when a range does not read
 * (bad slots or port, or the registry is full): the old map stays. */
int slots_adopt(struct slots_topo *t, const struct slots_range *r, size_t n, int64_t now_ms);

#endif
