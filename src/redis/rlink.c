/* rlink: one hiredis connection to one Redis server. The contract is in include/redis/rlink.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "redis/rlink.h"
#include "redis/sentinel.h"

#define LOG_MODULE "redis"
/* After connecting failed, calls fail at once for this long, doubling up to the most, so that
 * a thread whose every call would connect does not hammer Redis or the Sentinels. */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000

/* The maxmemory-policy the last connection found, for the log and /readyz: one for the whole
 * process (a cluster's nodes are set alike). */
static struct {
    pthread_mutex_t mu;
    char policy[64];
} eviction = { PTHREAD_MUTEX_INITIALIZER, "" };

void link_drop(struct link *l)
{
    if (l->c) {
        redisFree(l->c);
        l->c = NULL;
    }
    l->elsewhere = 0;
}

/* A read or write that timed out reads as EAGAIN's text in hiredis. */
static int timed_out(const struct link *l)
{
    return l->c && l->c->err == REDIS_ERR_IO && strcmp(l->c->errstr, strerror(EAGAIN)) == 0;
}

enum conn_code link_code(const struct link *l)
{
    return timed_out(l) ? CONN_E_TIMEOUT : CONN_E_CONN;
}

const char *link_error(struct link *l)
{
    if (timed_out(l)) {
        snprintf(l->why, sizeof(l->why), "no answer within redis.timeout_ms (%lld ms)",
                 (long long)l->timeout_ms);
        return l->why;
    }
    return l->c && l->c->errstr[0] ? l->c->errstr : "no reply";
}

static int means_elsewhere(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && sentinel_error_means_elsewhere(r->str);
}

void link_note(struct link *l, const redisReply *r)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && !l->elsewhere; i++)
        if (means_elsewhere(r->element[i]))
            l->elsewhere = 1;
}

redisReply *link_cmd(struct link *l, const char *what, char *err, size_t errlen, const char *fmt,
                     const char *arg)
{
    redisReply *r = redisCommand(l->c, fmt, arg);

    if (r && r->type != REDIS_REPLY_ERROR)
        return r;
    snprintf(err, errlen, "redis %s: %s", what, r ? r->str : link_error(l));
    if (r)
        freeReplyObject(r);
    return NULL;
}

int link_load_scripts(const struct link_conf *lc, struct link *l, char *err, size_t errlen)
{
    for (int i = 0; i < lc->nscripts; i++) {
        redisReply *r = link_cmd(l, "SCRIPT LOAD", err, errlen, "SCRIPT LOAD %s", lc->scripts[i]);
        int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;

        if (ok)
            memcpy(lc->sha[i], r->str, 41);
        else if (r)
            snprintf(err, errlen, "redis SCRIPT LOAD: unexpected reply");
        if (r)
            freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

static struct timeval timeval_of(int64_t ms)
{
    return (struct timeval){ (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };
}

int link_auth(struct link *l, const char *user, const char *password, char *err, size_t errlen)
{
    redisReply *r;
    int rc;

    if (!password[0])
        return 0;
    r = user[0] ? redisCommand(l->c, "AUTH %s %s", user, password)
                : redisCommand(l->c, "AUTH %s", password);
    rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc < 0)
        snprintf(err, errlen, "redis AUTH: %s", r ? r->str : link_error(l));
    if (r)
        freeReplyObject(r);
    return rc;
}

int link_connect(struct link *l, const char *host, int port, int64_t timeout_ms, char *err,
                 size_t errlen)
{
    struct timeval tv = timeval_of(timeout_ms);

    l->timeout_ms = timeout_ms;
    l->c = redisConnectWithTimeout(host, port, tv);
    if (!l->c || l->c->err) {
        snprintf(err, errlen, "redis %s:%d: %s", host, port, l->c ? link_error(l) : "out of memory");
        link_drop(l);
        return -1;
    }
    redisSetTimeout(l->c, tv);
    return 0;
}

/* The server's maxmemory-policy into out: CONFIG GET, or INFO memory where CONFIG is not
 * allowed (an ACL, a renamed command). "" when neither answers. */
static void read_policy(struct link *l, char *out, size_t outlen)
{
    redisReply *r = redisCommand(l->c, "CONFIG GET maxmemory-policy");
    const char *at;

    out[0] = '\0';
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(out, outlen, "%s", r->element[1]->str);
    } else if (l->c && !l->c->err) {
        if (r)
            freeReplyObject(r);
        r = redisCommand(l->c, "INFO memory");
        if (r && r->type == REDIS_REPLY_STRING && (at = strstr(r->str, "maxmemory_policy:")))
            snprintf(out, outlen, "%.*s", (int)strcspn(at + 17, "\r\n"), at + 17);
    }
    if (r)
        freeReplyObject(r);
}

/* Looks at the server's maxmemory-policy: anything but noeviction may drop job records (they
 * all expire, so volatile-* policies take them too). Warns when it changes; with
 * redis.require_noeviction, such a server is refused: -1 with err set. */
static int check_policy(const struct config *cfg, struct link *l, const char *host, int port,
                        char *err, size_t errlen)
{
    char policy[64];
    int evicts, changed;

    read_policy(l, policy, sizeof(policy));
    if (!policy[0])
        return 0;   /* not allowed to know: nothing to say */
    evicts = strcmp(policy, "noeviction") != 0;
    pthread_mutex_lock(&eviction.mu);
    changed = strcmp(policy, eviction.policy) != 0;
    snprintf(eviction.policy, sizeof(eviction.policy), "%s", policy);
    pthread_mutex_unlock(&eviction.mu);
    if (changed && evicts)
        log_warn("redis %s:%d: maxmemory-policy is %s: at maxmemory Redis drops keys, job records "
                 "too (they expire); set it to noeviction", host, port, policy);
    if (evicts && cfg->redis.require_noeviction) {
        snprintf(err, errlen, "redis %.100s:%d: maxmemory-policy is %s, and "
                 "redis.require_noeviction refuses a Redis that may drop job records", host, port, policy);
        return -1;
    }
    return 0;
}

int link_eviction(char *policy, size_t len)
{
    int evicts;

    pthread_mutex_lock(&eviction.mu);
    snprintf(policy, len, "%s", eviction.policy);
    evicts = eviction.policy[0] && strcmp(eviction.policy, "noeviction") != 0;
    pthread_mutex_unlock(&eviction.mu);
    return evicts;
}

/* The master's answers may take redis.timeout_ms, and a WAIT redis.wait_timeout_ms more. */
static int64_t master_timeout_ms(const struct config *cfg)
{
    return cfg->redis.timeout_ms + (cfg->redis.wait_replicas > 0 ? cfg->redis.wait_timeout_ms : 0);
}

int link_open(const struct link_conf *lc, struct link *l, const char *host, int port, char *err,
              size_t errlen)
{
    const struct config *cfg = lc->cfg;
    char num[32];
    redisReply *r = NULL;

    snprintf(num, sizeof(num), "%lld", (long long)cfg->redis.db);
    if (link_connect(l, host, port, master_timeout_ms(cfg), err, errlen) < 0)
        return -1;
    if (link_auth(l, cfg->redis.username, cfg->redis.password, err, errlen) < 0 ||
        (cfg->redis.db && !(r = link_cmd(l, "SELECT", err, errlen, "SELECT %s", num))) ||
        check_policy(cfg, l, host, port, err, errlen) < 0 || link_load_scripts(lc, l, err, errlen) < 0) {
        link_drop(l);
        return -1;
    }
    if (r)
        freeReplyObject(r);
    return 0;
}

int link_waiting(const struct link *l, char *err, size_t errlen)
{
    int64_t now = clock_mono_ms();

    if (now >= l->retry_at_ms)
        return 0;
    snprintf(err, errlen, "%.200s (next attempt in %lld ms)", l->last_err,
             (long long)(l->retry_at_ms - now));
    return 1;
}

void link_opened(struct link *l)
{
    l->backoff_ms = 0;
    l->retry_at_ms = 0;
}

void link_failed(struct link *l, char *err, size_t errlen)
{
    l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (l->backoff_ms > BACKOFF_MAX_MS)
        l->backoff_ms = BACKOFF_MAX_MS;
    l->retry_at_ms = clock_mono_ms() + l->backoff_ms;
    snprintf(err, errlen, "%s", l->last_err);
}
