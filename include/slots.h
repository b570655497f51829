/* slots: Redis Cluster's key space as pure logic: the hash slot of a key (CRC16 and hash tags,
 * as the Redis Cluster specification defines them), the redirections a node answers (MOVED,
 * ASK), and the map of which node serves each slot. No network library: rdb.c does the talking. */
#ifndef DQ_SLOTS_H
#define DQ_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define SLOTS_COUNT 16384
#define SLOTS_NODES_MAX 64      /* masters one map can name */
#define SLOTS_HOST_MAX 256

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

struct slots_node {
    char host[SLOTS_HOST_MAX];
    int port;
};

/* Which master serves each slot: node_of[slot] indexes nodes[], or is -1 when no node serves
 * it (yet). */
struct slots_map {
    int16_t node_of[SLOTS_COUNT];
    int nnodes;
    struct slots_node nodes[SLOTS_NODES_MAX];
};

void slots_map_init(struct slots_map *m);

/* Slots first..last are served by host:port (from CLUSTER SLOTS or CLUSTER SHARDS). Returns the
 * node's index, or -1 when the range is not within 0..16383 or the map names
 * SLOTS_NODES_MAX nodes already. */
int slots_map_add(struct slots_map *m, int first, int last, const char *host, int port);

/* How many slots no node serves. */
int slots_map_missing(const struct slots_map *m);

#endif
