/* rlink: one hiredis connection to one Redis server, the bottom of the Redis layer: connect with
 * a timeout, AUTH with the ACL user, SELECT, the maxmemory-policy check, the scripts (loaded
 * again after NOSCRIPT), and the backoff after a failed connect. It knows nothing of masters,
 * Sentinels or slots (master.c) nor of pipelines (rpipe.c, conn.c), which call it; it calls
 * none of them. Only conn.c and master.c use it. */
#ifndef DQ_RLINK_H
#define DQ_RLINK_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis.h>

#include "core/config.h"
#include "redis/conn.h"

/* What every link of one conn shares. */
struct link_conf {
    const struct config *cfg;
    const char *const *scripts;     /* the Lua texts, loaded on every new link */
    int nscripts;
    char (*sha)[41];                /* their SHA-1s, as SCRIPT LOAD answered */
};

/* One connection. */
struct link {
    redisContext *c;
    int elsewhere;              /* a reply said this is not the master: reconnect before use */
    int64_t timeout_ms;         /* its connect and command timeout */
    int64_t retry_at_ms;        /* connecting failed: not again before then (monotonic) */
    int64_t backoff_ms;
    char last_err[256];         /* why connecting failed */
    char why[96];               /* link_error's text for a timeout */
};

void link_drop(struct link *l);
/* Its error, for a message: a timeout says which; "no reply" when there is none. */
const char *link_error(struct link *l);
/* CONN_E_TIMEOUT when its last read or write timed out, else CONN_E_CONN. */
enum conn_code link_code(const struct link *l);

/* Each returns 0, or -1 with err set (and no connection left for link_connect and link_open). */
int link_connect(struct link *l, const char *host, int port, int64_t timeout_ms, char *err,
                 size_t errlen);
/* AUTH with user and password when a password is set (no user: the default user). */
int link_auth(struct link *l, const char *user, const char *password, char *err, size_t errlen);
/* A setup command (fmt with one string argument): its reply (caller frees), or NULL with err
 * set when it failed or answered an error (what: the command's name for the message). */
redisReply *link_cmd(struct link *l, const char *what, char *err, size_t errlen, const char *fmt,
                     const char *arg);
/* Connects l to the master at host:port: AUTH, SELECT, the maxmemory-policy check (refused
 * with redis.require_noeviction), the scripts. */
int link_open(const struct link_conf *lc, struct link *l, const char *host, int port, char *err,
              size_t errlen);
/* SCRIPT LOAD of every script into lc->sha. */
int link_load_scripts(const struct link_conf *lc, struct link *l, char *err, size_t errlen);
/* Notes a script's answer that holds a "not the master" error of a record (redis.pcall):
 * the link is to be opened again before its next use. */
void link_note(struct link *l, const redisReply *r);

/* The backoff of connecting: after a failed attempt the next waits 50 ms, doubling up to 1 s.
 * link_waiting: 1 with err set (the last reason and the time left) while it runs, else 0.
 * link_opened and link_failed record an attempt's outcome (link_failed: err the reason). */
int link_waiting(const struct link *l, char *err, size_t errlen);
void link_opened(struct link *l);
void link_failed(struct link *l, char *err, size_t errlen);

/* 1 when the server last connected to may evict keys (its maxmemory-policy, into policy, is
 * not noeviction), else 0 (policy "" when it was not known). One for the process. */
int link_eviction(char *policy, size_t len);

#endif
