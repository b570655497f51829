/* watch: the Sentinels' failover announcements, heard by one thread subscribed to each of
 * them. The contract is in include/watch.h. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <hiredis.h>

#include "clock.h"
#include "log.h"
#include "sentinel.h"
#include "watch.h"

#define LOG_MODULE "redis"
#define SENTINEL_TIMEOUT_MS 500   /* connect and AUTH, as rdb.c asks a Sentinel */
/* How long the thread sleeps at most (how soon it sees a stop), and waits before it connects
 * to a Sentinel again. */
#define WATCH_POLL_MS 200
#define WATCH_RETRY_MS 1000
/* A failover whose end was not heard of (its Sentinel died, or a message was lost) stops
 * holding calls after this long. */
#define WATCH_HOLD_MAX_MS 15000

static struct {
    const struct config *cfg;
    pthread_t thread;
    int running;
    atomic_int stop;
    atomic_int failing;         /* a Sentinel runs a failover of our master: hold calls */
    atomic_uint gen;            /* bumped when a failover begins and when the master moved */
    atomic_int announcer;       /* the Sentinel (its index in the config) that told of the last move */
} watch = { .announcer = -1 };

/* Subscribes to the failover events of Sentinel i. The connection, or NULL. */
static redisContext *watch_connect(int i)
{
    const struct config *cfg = watch.cfg;
    char host[SENTINEL_HOST_MAX];
    int port;
    struct timeval tv = { 0, SENTINEL_TIMEOUT_MS * 1000 };
    redisContext *c;
    redisReply *r = NULL;

    if (sentinel_split_addr(cfg->redis.sentinels[i], host, &port) < 0 ||
        !(c = redisConnectWithTimeout(host, port, tv)))
        return NULL;
    if (!c->err)
        redisSetTimeout(c, tv);
    if (!c->err && cfg->redis.sentinel_password[0] &&
        (!(r = redisCommand(c, "AUTH %s", cfg->redis.sentinel_password)) || r->type == REDIS_REPLY_ERROR)) {
        if (r)
            freeReplyObject(r);
        redisFree(c);
        return NULL;
    }
    if (r)
        freeReplyObject(r);
    if (c->err || redisAppendCommand(c, "PSUBSCRIBE *failover* +selected-slave +promoted-slave "
                                        "+elected-leader +switch-master") != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    {
        int done = 0;
        while (!done)   /* sends the command; the confirmations are read with the events */
            if (redisBufferWrite(c, &done) != REDIS_OK) {
                redisFree(c);
                return NULL;
            }
    }
    return c;
}

/* Acts on one message of Sentinel i: began[i] is when its failover began, or 0. */
static void watch_message(int i, const redisReply *r, int64_t *began)
{
    const char *name = watch.cfg->redis.master_name;
    enum sentinel_event ev;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[2]->type != REDIS_REPLY_STRING ||
        r->element[3]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "pmessage") != 0)
        return;   /* a subscription's confirmation */
    ev = sentinel_event_of(r->element[2]->str, r->element[3]->str, name);
    if (ev == SENTINEL_EV_FAILOVER && !began[i]) {
        began[i] = clock_now_ms();
        log_warn("Sentinel %s: a failover of %s has begun (%s); Redis calls wait until it ends",
                 watch.cfg->redis.sentinels[i], name, r->element[2]->str);
    } else if (ev == SENTINEL_EV_OVER || ev == SENTINEL_EV_SWITCH) {
        if (began[i])
            log_info("Sentinel %s: the failover of %s is over (%s)", watch.cfg->redis.sentinels[i],
                     name, r->element[2]->str);
        began[i] = 0;
    }
    if (ev == SENTINEL_EV_SWITCH) {
        atomic_store(&watch.announcer, i);
        atomic_fetch_add(&watch.gen, 1);
        log_info("Sentinel %s: master %s moved: %s", watch.cfg->redis.sentinels[i], name,
                 r->element[3]->str);
    }
}

/* Reads what Sentinel i sent. -1 when its connection failed. */
static int watch_read(int i, redisContext *c, int64_t *began)
{
    void *r;

    if (redisBufferRead(c) != REDIS_OK)
        return -1;
    for (;;) {
        if (redisGetReplyFromReader(c, &r) != REDIS_OK)
            return -1;
        if (!r)
            return 0;
        watch_message(i, r, began);
        freeReplyObject(r);
    }
}

static void *watch_main(void *arg)
{
    int n = watch.cfg->redis.nsentinels;
    redisContext *c[CONFIG_SENTINELS_MAX] = { 0 };
    int64_t began[CONFIG_SENTINELS_MAX] = { 0 }, retry_at[CONFIG_SENTINELS_MAX] = { 0 };

    (void)arg;
    while (!atomic_load(&watch.stop)) {
        struct pollfd fds[CONFIG_SENTINELS_MAX];
        int64_t now = clock_now_ms();
        int failing = 0, at[CONFIG_SENTINELS_MAX], nfds = 0;

        for (int i = 0; i < n; i++) {
            if (!c[i] && now >= retry_at[i] && !(c[i] = watch_connect(i)))
                retry_at[i] = now + WATCH_RETRY_MS;
            if (c[i]) {
                fds[nfds] = (struct pollfd){ .fd = c[i]->fd, .events = POLLIN };
                at[nfds++] = i;
            }
        }
        if (poll(fds, (nfds_t)nfds, WATCH_POLL_MS) > 0) {
            for (int k = 0; k < nfds; k++) {
                int i = at[k];
                if (!(fds[k].revents & (POLLIN | POLLERR | POLLHUP)) || watch_read(i, c[i], began) == 0)
                    continue;
                redisFree(c[i]);   /* gone: connected again after WATCH_RETRY_MS */
                c[i] = NULL;
                began[i] = 0;
                retry_at[i] = clock_now_ms() + WATCH_RETRY_MS;
            }
        }
        now = clock_now_ms();
        for (int i = 0; i < n; i++)
            failing |= began[i] && now - began[i] < WATCH_HOLD_MAX_MS;
        if (failing && !atomic_load(&watch.failing))
            atomic_fetch_add(&watch.gen, 1);
        atomic_store(&watch.failing, failing);
    }
    for (int i = 0; i < n; i++)
        if (c[i])
            redisFree(c[i]);
    return NULL;
}

int watch_start(const struct config *cfg, char *err, size_t errlen)
{
    if (!cfg->redis.nsentinels || watch.running)
        return 0;
    watch.cfg = cfg;
    atomic_store(&watch.stop, 0);
    if (pthread_create(&watch.thread, NULL, watch_main, NULL) != 0) {
        snprintf(err, errlen, "cannot start the Sentinel watch: %s", strerror(errno));
        return -1;
    }
    watch.running = 1;
    return 0;
}

void watch_stop(void)
{
    if (!watch.running)
        return;
    atomic_store(&watch.stop, 1);
    pthread_join(watch.thread, NULL);
    watch.running = 0;
}

int watch_running(void)
{
    return watch.running;
}

int watch_failing(void)
{
    return atomic_load(&watch.failing);
}

unsigned watch_gen(void)
{
    return atomic_load(&watch.gen);
}

int watch_announcer(void)
{
    return atomic_load(&watch.announcer);
}
