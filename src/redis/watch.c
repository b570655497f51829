/* watch: the Sentinels' failover announcements, heard by one thread subscribed to each of
 * them. The contract is in include/redis/watch.h. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "redis/sentinel.h"
#include "redis/watch.h"

#define LOG_MODULE "redis"
#define SENTINEL_TIMEOUT_MS 500   /* connect and AUTH, as conn.c asks a Sentinel */
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

/* One Sentinel's subscription. */
struct sub {
    redisContext *c;
    int connecting;             /* the connect is under way: wait for the socket to be writable */
    int auth;                   /* AUTH was sent: its answer comes first */
    int64_t since;              /* when the connect began (monotonic) */
    int64_t began;              /* when its failover of our master began, or 0 */
    int64_t retry_at;
};

static void sub_close(int i, struct sub *s, const char *why)
{
    if (why)
        log_debug("Sentinel %s: %s", watch.cfg->redis.sentinels[i], why);
    if (s->c)
        redisFree(s->c);
    s->c = NULL;
    s->connecting = s->auth = 0;
    s->began = 0;
    s->retry_at = clock_mono_ms() + WATCH_RETRY_MS;
}

/* Begins connecting to Sentinel i without waiting (the thread hears the others meanwhile). */
static void sub_open(int i, struct sub *s)
{
    char host[SENTINEL_HOST_MAX];
    int port;

    if (sentinel_split_addr(watch.cfg->redis.sentinels[i], host, &port) < 0 ||
        !(s->c = redisConnectNonBlock(host, port))) {
        sub_close(i, s, "cannot connect");
        return;
    }
    if (s->c->err) {
        sub_close(i, s, s->c->errstr);
        return;
    }
    s->connecting = 1;
    s->since = clock_mono_ms();
}

/* The connect finished (the socket is writable): AUTH when a password is set, and the
 * subscription, queued and sent. */
static void sub_connected(int i, struct sub *s)
{
    const char *password = watch.cfg->redis.sentinel_password;
    int soerr = 0, done = 0;
    socklen_t len = sizeof(soerr);

    s->connecting = 0;
    if (getsockopt(s->c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr) {
        sub_close(i, s, strerror(soerr ? soerr : errno));
        return;
    }
    if (password[0]) {
        redisAppendCommand(s->c, "AUTH %s", password);
        s->auth = 1;
    }
    redisAppendCommand(s->c, "PSUBSCRIBE *failover* +selected-slave +promoted-slave "
                             "+elected-leader +switch-master");
    while (!done)
        if (redisBufferWrite(s->c, &done) != REDIS_OK) {
            sub_close(i, s, s->c->errstr);
            return;
        }
}

/* Acts on one message of Sentinel i. last_switch: the address the master last moved to. */
static void watch_message(int i, struct sub *s, const redisReply *r, char *last_switch, size_t len)
{
    const char *name = watch.cfg->redis.master_name;
    enum sentinel_event ev;
    const char *to;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[2]->type != REDIS_REPLY_STRING ||
        r->element[3]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "pmessage") != 0)
        return;   /* a subscription's confirmation */
    ev = sentinel_event_of(r->element[2]->str, r->element[3]->str, name);
    if (ev == SENTINEL_EV_FAILOVER && !s->began) {
        s->began = clock_mono_ms();
        log_warn("Sentinel %s: a failover of %s has begun (%s); Redis calls wait until it ends "
                 "(redis.failover_wait_ms at most)", watch.cfg->redis.sentinels[i], name,
                 r->element[2]->str);
    } else if (ev == SENTINEL_EV_OVER || ev == SENTINEL_EV_SWITCH) {
        if (s->began)
            log_info("Sentinel %s: the failover of %s is over (%s)", watch.cfg->redis.sentinels[i],
                     name, r->element[2]->str);
        s->began = 0;
    }
    /* Every Sentinel announces the move as it learns of it: the connections move once. */
    to = strchr(r->element[3]->str, ' ');
    for (int w = 0; to && w < 2; w++)
        to = strchr(to + 1, ' ');
    if (ev == SENTINEL_EV_SWITCH && to && strcmp(to + 1, last_switch) != 0) {
        snprintf(last_switch, len, "%s", to + 1);
        atomic_store(&watch.announcer, i);
        atomic_fetch_add(&watch.gen, 1);
        log_info("Sentinel %s: master %s moved: %s", watch.cfg->redis.sentinels[i], name,
                 r->element[3]->str);
    }
}

/* Reads what Sentinel i sent. -1 when its connection failed or refused AUTH. */
static int watch_read(int i, struct sub *s, char *last_switch, size_t len)
{
    void *r;

    if (redisBufferRead(s->c) != REDIS_OK)
        return -1;
    for (;;) {
        if (redisGetReplyFromReader(s->c, &r) != REDIS_OK)
            return -1;
        if (!r)
            return 0;
        if (s->auth) {
            const redisReply *a = r;
            s->auth = 0;
            if (a->type == REDIS_REPLY_ERROR) {
                log_warn("Sentinel %s: AUTH (redis.sentinel_password): %s",
                         watch.cfg->redis.sentinels[i], a->str);
                freeReplyObject(r);
                return -1;
            }
        } else {
            watch_message(i, s, r, last_switch, len);
        }
        freeReplyObject(r);
    }
}

/* One turn: connects what needs it, waits up to WATCH_POLL_MS for any Sentinel, reads. */
static void watch_turn(struct sub *subs, int n, char *last_switch, size_t len)
{
    struct pollfd fds[CONFIG_SENTINELS_MAX];
    int at[CONFIG_SENTINELS_MAX], nfds = 0;
    int64_t now = clock_mono_ms();

    for (int i = 0; i < n; i++) {
        struct sub *s = &subs[i];
        if (!s->c && now >= s->retry_at)
            sub_open(i, s);
        if (s->c && s->connecting && now - s->since > SENTINEL_TIMEOUT_MS)
            sub_close(i, s, "connect timed out");
        if (s->c) {
            fds[nfds] = (struct pollfd){ .fd = s->c->fd, .events = s->connecting ? POLLOUT : POLLIN };
            at[nfds++] = i;
        }
    }
    if (poll(fds, (nfds_t)nfds, WATCH_POLL_MS) <= 0)
        return;
    for (int k = 0; k < nfds; k++) {
        int i = at[k];
        struct sub *s = &subs[i];
        if (!fds[k].revents)
            continue;
        if (s->connecting)
            sub_connected(i, s);
        else if (watch_read(i, s, last_switch, len) < 0)
            sub_close(i, s, "connection lost");   /* connected again after WATCH_RETRY_MS */
    }
}

static void *watch_main(void *arg)
{
    int n = watch.cfg->redis.nsentinels;
    struct sub subs[CONFIG_SENTINELS_MAX] = { 0 };
    char last_switch[2 * SENTINEL_HOST_MAX] = "";

    (void)arg;
    while (!atomic_load(&watch.stop)) {
        int64_t now;
        int failing = 0;
        watch_turn(subs, n, last_switch, sizeof(last_switch));
        now = clock_mono_ms();
        for (int i = 0; i < n; i++)
            failing |= subs[i].began && now - subs[i].began < WATCH_HOLD_MAX_MS;
        if (failing && !atomic_load(&watch.failing))
            atomic_fetch_add(&watch.gen, 1);
        atomic_store(&watch.failing, failing);
    }
    for (int i = 0; i < n; i++)
        if (subs[i].c)
            redisFree(subs[i].c);
    return NULL;
}

int watch_start(const struct config *cfg, char *err, size_t errlen)
{
    int rc;

    if (!cfg->redis.nsentinels || watch.running)
        return 0;
    watch.cfg = cfg;
    atomic_store(&watch.stop, 0);
    if ((rc = pthread_create(&watch.thread, NULL, watch_main, NULL)) != 0) {
        snprintf(err, errlen, "cannot start the Sentinel watch: %s", strerror(rc));
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
