/* conns: the connections of one libmicrohttpd daemon, each with by when its next request must
 * have arrived whole, and the sweep that ends those past it: a client that sends slowly or not
 * at all loses its own connections, not everyone's slots (libmicrohttpd's timeout alone
 * restarts with every byte). A struct conns is its daemon's thread's alone. */
#ifndef DQ_CONNS_H
#define DQ_CONNS_H

#include <stdint.h>

/* A connection, from accept to close. */
struct conn {
    int fd;
    int64_t deadline_ms;      /* monotonic; 0 while a request is being served */
    struct conn *prev, *next;
};

struct conns {
    struct conn *list;
    int64_t swept_ms;         /* monotonic: the last look for connections past their deadline */
};

/* Starts tracking connection fd, due whole by deadline_ms (monotonic milliseconds; the caller
 * may move it, 0: none). The entry is c's until conns_forget. NULL when out of memory: the
 * connection then has no deadline but libmicrohttpd's idle one. */
struct conn *conns_note(struct conns *c, int fd, int64_t deadline_ms);

/* Stops tracking cn (NULL: nothing) and frees it. */
void conns_forget(struct conns *c, struct conn *cn);

/* Shuts down, once each, the connections past their deadline (libmicrohttpd then closes them
 * on its next read). Looks at most once per 250 ms: call it on every turn of the thread. */
void conns_sweep(struct conns *c);

#endif
