/* conns: a daemon's connections and their deadlines. The contract is in include/http/conns.h. */
#include <stdlib.h>
#include <sys/socket.h>

#include "http/conns.h"
#include "lib/clock.h"

#define SWEEP_MS 250           /* connections are checked against their deadline this often */

struct conn *conns_note(struct conns *c, int fd, int64_t deadline_ms)
{
    struct conn *cn = calloc(1, sizeof(*cn));

    if (!cn)
        return NULL;
    cn->fd = fd;
    cn->deadline_ms = deadline_ms;
    cn->next = c->list;
    if (c->list)
        c->list->prev = cn;
    c->list = cn;
    return cn;
}

void conns_forget(struct conns *c, struct conn *cn)
{
    if (!cn)
        return;
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        c->list = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    free(cn);
}

void conns_sweep(struct conns *c)
{
    int64_t now = clock_mono_ms();

    if (now - c->swept_ms < SWEEP_MS)
        return;
    c->swept_ms = now;
    for (struct conn *cn = c->list; cn; cn = cn->next) {
        if (cn->deadline_ms && now > cn->deadline_ms) {
            cn->deadline_ms = 0;   /* once: libmicrohttpd closes it on its next read */
            (void)shutdown(cn->fd, SHUT_RDWR);
        }
    }
}
