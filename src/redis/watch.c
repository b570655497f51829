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

#include "core/metrics.h"
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
    atomic_uint moves;          /* bumped when the master moved */
    atomic_int announcer;       /* the Sentinel (its index in the config) that told of the last move */
    atomic_llong began;         /* when the failover under way was first heard of (monotonic), 0 */
    atomic_llong longest_wait;  /* the longest a pipeline waited for it, ms */
    pthread_mutex_t mu;         /* guards promoted */
    char promoted[SENTINEL_HOST_MAX];   /* the replica promoted, until the switch; "" none */
    int promoted_port;
} watch = { .announcer = -1, .mu = PTHREAD_MUTEX_INITIALIZER };

/* One Sentinel's subscription. */
struct sub {
    redisContext *c;
    int connecting;             /* the connect is under way: wait for the socket to be writable */
    int auth;                   /* AUTH was sent: its answer comes first */
    int64_t since;              /* when the connect began (monotonic) */
    int64_t began;              /* when its failover of our master began, or 0 */
    int promoted;               /* its failover promoted a replica: nothing to hold for since */
    int64_t retry_at;
};

/* What every Sentinel's messages share: the subscriptions and the master's last moves. */
struct heard {
    struct sub *subs;
    int n;
    char last_switch[2 * SENTINEL_HOST_MAX];   /* the address the master last moved to */
    char last_promoted[2 * SENTINEL_HOST_MAX]; /* the replica last promoted */
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
    s->promoted = 0;
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

/* ms since the failover under way was first heard of, or -1. */
static long long since_began(void)
{
    long long b = atomic_load(&watch.began);

    return b ? clock_mono_ms() - b : -1;
}

/* The master moved (promoted: to a replica just promoted, the switch still to come): calls
 * stop waiting, and every connection looks for it again, first where the event says. */
static void moved(struct heard *h, int i, enum sentinel_event ev, const char *payload)
{
    char host[SENTINEL_HOST_MAX];
    int port = 0, known = sentinel_event_addr(ev, payload, host, &port) == 0;
    char *last = ev == SENTINEL_EV_PROMOTED ? h->last_promoted : h->last_switch;
    char addr[2 * SENTINEL_HOST_MAX];

    for (int k = 0; k < h->n; k++) {   /* the failover can no longer be given up */
        h->subs[k].began = 0;
        h->subs[k].promoted = ev == SENTINEL_EV_PROMOTED;
    }
    snprintf(addr, sizeof(addr), "%s:%d", known ? host : "?", port);
    if (!strcmp(addr, last))
        return;   /* every Sentinel announces the move as it learns of it: moved once */
    snprintf(last, sizeof(h->last_switch), "%s", addr);
    pthread_mutex_lock(&watch.mu);
    if (ev == SENTINEL_EV_PROMOTED && known) {
        snprintf(watch.promoted, sizeof(watch.promoted), "%s", host);
        watch.promoted_port = port;
    } else {
        watch.promoted[0] = '\0';
    }
    pthread_mutex_unlock(&watch.mu);
    if (ev == SENTINEL_EV_SWITCH && !strcmp(addr, h->last_promoted)) {
        h->last_promoted[0] = '\0';   /* a later failover may promote it again */
        log_info("Sentinel %s: master %s moved to %s, where calls already go (%lld ms after the "
                 "failover began; calls waited %lld ms at most)", watch.cfg->redis.sentinels[i],
                 watch.cfg->redis.master_name, addr, since_began(),
                 (long long)atomic_load(&watch.longest_wait));
        atomic_store(&watch.began, 0);
        return;
    }
    if (ev == SENTINEL_EV_SWITCH)
        h->last_promoted[0] = '\0';
    atomic_store(&watch.announcer, i);
    atomic_fetch_add(&watch.gen, 1);
    atomic_fetch_add(&watch.moves, 1);
    metrics_inc(M_REDIS_MASTER_MOVES);
    log_info("Sentinel %s: %s %s %s (%lld ms after the failover began); connections move to it",
             watch.cfg->redis.sentinels[i], watch.cfg->redis.master_name,
             ev == SENTINEL_EV_PROMOTED ? "promoted the replica" : "moved to", addr, since_began());
    if (ev == SENTINEL_EV_SWITCH)
        atomic_store(&watch.began, 0);
}

/* Acts on one message of Sentinel i. */
static void watch_message(struct heard *h, int i, const redisReply *r)
{
    struct sub *s = &h->subs[i];
    const char *name = watch.cfg->redis.master_name;
    enum sentinel_event ev;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[2]->type != REDIS_REPLY_STRING ||
        r->element[3]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "pmessage") != 0)
        return;   /* a subscription's confirmation */
    ev = sentinel_event_of(r->element[2]->str, r->element[3]->str, name);
    if (ev == SENTINEL_EV_FAILOVER && !s->began && !s->promoted) {
        s->began = clock_mono_ms();
        if (!atomic_load(&watch.began)) {
            atomic_store(&watch.longest_wait, 0);
            atomic_store(&watch.began, s->began);
        }
        log_warn("Sentinel %s: a failover of %s has begun (%s); Redis calls wait until a "
                 "replica is promoted (redis.failover_wait_ms at most)",
                 watch.cfg->redis.sentinels[i], name, r->element[2]->str);
    } else if (ev == SENTINEL_EV_OVER) {
        int running = 0;
        if (s->began)
            log_info("Sentinel %s: the failover of %s is over (%s)", watch.cfg->redis.sentinels[i],
                     name, r->element[2]->str);
        s->began = 0;
        s->promoted = 0;
        for (int k = 0; k < h->n; k++)
            running |= h->subs[k].began != 0;
        if (!running && !h->last_promoted[0])   /* given up: the next one is timed anew */
            atomic_store(&watch.began, 0);
    } else if (ev == SENTINEL_EV_PROMOTED || ev == SENTINEL_EV_SWITCH) {
        moved(h, i, ev, r->element[3]->str);
    }
}

/* Reads what Sentinel i sent. -1 when its connection failed or refused AUTH. */
static int watch_read(struct heard *h, int i)
{
    struct sub *s = &h->subs[i];
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
            watch_message(h, i, r);
        }
        freeReplyObject(r);
    }
}

/* One turn: connects what needs it, waits up to WATCH_POLL_MS for any Sentinel, reads. */
static void watch_turn(struct heard *h)
{
    struct sub *subs = h->subs;
    int n = h->n;
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
        else if (watch_read(h, i) < 0)
            sub_close(i, s, "connection lost");   /* connected again after WATCH_RETRY_MS */
    }
}

static void *watch_main(void *arg)
{
    int n = watch.cfg->redis.nsentinels;
    struct sub subs[CONFIG_SENTINELS_MAX] = { 0 };
    struct heard h = { subs, n, "", "" };

    (void)arg;
    while (!atomic_load(&watch.stop)) {
        int64_t now;
        int failing = 0;
        watch_turn(&h);
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

unsigned watch_moves(void)
{
    return atomic_load(&watch.moves);
}

int watch_announcer(void)
{
    return atomic_load(&watch.announcer);
}

int watch_promoted(char host[SENTINEL_HOST_MAX], int *port)
{
    int known;

    pthread_mutex_lock(&watch.mu);
    if ((known = watch.promoted[0] != '\0')) {
        memcpy(host, watch.promoted, SENTINEL_HOST_MAX);
        *port = watch.promoted_port;
    }
    pthread_mutex_unlock(&watch.mu);
    return known;
}

long long watch_since_began(void)
{
    return since_began();
}

void watch_waited(int64_t ms)
{
    long long was = atomic_load(&watch.longest_wait);

    while (ms > was && !atomic_compare_exchange_weak(&watch.longest_wait, &was, ms))
        ;
}
