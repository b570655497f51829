/* groups: the partition groups this instance forwards: winning, renewing, fencing and handing
 * back their leases on the holder's clock. The contract is in include/groups.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "claims.h"
#include "clock.h"
#include "groups.h"
#include "holder.h"
#include "log.h"
#include "metrics.h"
#include "share.h"

#define LOG_MODULE "groups"
#define STATUS_MAX 4096   /* partition rows published per group: far above any real group */

enum gstate { G_FREE, G_OWNED, G_HANDING_BACK };

struct group {
    enum gstate state;
    int64_t valid_until;    /* monotonic ms: forwarding stops here unless renewed first */
};

struct groups {
    const struct config *cfg;
    struct holder *h;
    struct claims *claims;
    struct group *g;
    int n;
    int live, least;        /* from the last heartbeat */
    int64_t next_tick;      /* monotonic ms */
    int64_t margin_ms;      /* a lease is let go this long before it could expire */
    struct log_gate gate;
    struct part_status *status;
};

struct groups *groups_new(const struct config *cfg, struct holder *h)
{
    struct groups *gs = calloc(1, sizeof(*gs));

    if (!gs)
        return NULL;
    gs->cfg = cfg;
    gs->h = h;
    gs->n = cfg->delay.ngroups;
    gs->live = 1;
    /* A fifth of the TTL covers a slow renew round trip and clock-rate differences. */
    gs->margin_ms = cfg->delay.claim_ttl_ms / 5;
    if (!(gs->claims = claims_new(cfg)) || !(gs->g = calloc((size_t)gs->n, sizeof(*gs->g))) ||
        !(gs->status = calloc(STATUS_MAX, sizeof(*gs->status)))) {
        groups_free(gs);
        return NULL;
    }
    log_info("instance token=%s groups=%d lease=%lld ms", claims_token(gs->claims), gs->n,
             (long long)cfg->delay.claim_ttl_ms);
    claims_check_old_layout(gs->claims);
    return gs;
}

void groups_free(struct groups *gs)
{
    if (!gs)
        return;
    claims_free(gs->claims);
    free(gs->g);
    free(gs->status);
    free(gs);
}

int groups_usable(const struct groups *gs, int group)
{
    return gs->g[group].state == G_OWNED;
}

int groups_may_forward(const struct groups *gs, int group, int64_t now_ms)
{
    return gs->g[group].state != G_FREE && now_ms < gs->g[group].valid_until;
}

int64_t groups_next_ms(const struct groups *gs)
{
    int64_t next = gs->next_tick;

    for (int i = 0; i < gs->n; i++)
        if (gs->g[i].state != G_FREE && gs->g[i].valid_until < next)
            next = gs->g[i].valid_until;
    return next;
}

static int active(const struct groups *gs)
{
    int n = 0;

    for (int i = 0; i < gs->n; i++)
        n += gs->g[i].state == G_OWNED;
    return n;
}

static void fence(struct groups *gs, int i, const char *why)
{
    log_error("fenced group=%d: %s; its messages are dropped and nothing more is committed", i, why);
    metrics_inc(M_GROUPS_FENCED);
    holder_group_drop(gs->h, i);
    gs->g[i].state = G_FREE;
}

static void begin_hand_back(struct groups *gs, int i, const char *why)
{
    log_info("handing back group=%d: %s", i, why);
    gs->g[i].state = G_HANDING_BACK;
    holder_group_quiesce(gs->h, i);
}

/* The messages of a group handed back are done: commit, release, let go. */
static void finish_hand_back(struct groups *gs, int i)
{
    char err[256];

    holder_group_commit(gs->h, i);
    if (claims_release(gs->claims, i, err, sizeof(err)) < 0)
        log_warn("release group=%d: %s (the lease expires by itself)", i, err);
    holder_group_drop(gs->h, i);
    gs->g[i].state = G_FREE;
    log_info("handed back group=%d", i);
}

static void acquire(struct groups *gs, int i, int64_t sent)
{
    char err[256];
    int r = claims_acquire(gs->claims, i, err, sizeof(err));

    if (r <= 0) {
        if (r < 0)
            log_warn("claim group=%d: %s", i, err);
        return;
    }
    if (holder_group_acquire(gs->h, i, err, sizeof(err)) < 0) {
        log_error("group=%d claimed but not assigned: %s; releasing it", i, err);
        claims_release(gs->claims, i, err, sizeof(err));
        return;
    }
    gs->g[i] = (struct group){ G_OWNED, sent + gs->cfg->delay.claim_ttl_ms - gs->margin_ms };
    log_info("acquired group=%d", i);
}

static void renew_all(struct groups *gs, int64_t sent)
{
    char err[256];

    for (int i = 0; i < gs->n; i++) {
        int r;
        if (gs->g[i].state == G_FREE)
            continue;
        if ((r = claims_renew(gs->claims, i, err, sizeof(err))) > 0) {
            gs->g[i].valid_until = sent + gs->cfg->delay.claim_ttl_ms - gs->margin_ms;
            continue;
        }
        metrics_inc(M_LEASE_RENEW_FAILURES);
        if (r == 0)
            fence(gs, i, "the lease is no longer ours");
        else
            log_warn("renew group=%d failed: %s (forwarding stops at the lease deadline)", i, err);
    }
}

static void rebalance(struct groups *gs, int64_t sent)
{
    struct share_plan plan = share_plan(gs->n, gs->live, gs->least, active(gs));
    char err[256];
    int start = (int)(strlen(claims_token(gs->claims)) * 7 % (size_t)gs->n);

    for (int i = 0; i < gs->n; i++)
        if (gs->g[i].state == G_OWNED && claims_release_requested(gs->claims, i, err, sizeof(err)) > 0)
            begin_hand_back(gs, i, "an operator asked for it");
    for (int i = gs->n - 1; i >= 0 && plan.release > 0; i--) {
        if (gs->g[i].state == G_OWNED) {
            begin_hand_back(gs, i, "fair share");
            plan.release--;
        }
    }
    for (int k = 0; k < gs->n && plan.acquire > 0; k++) {
        int i = (start + k) % gs->n;
        if (gs->g[i].state == G_FREE) {
            acquire(gs, i, sent);
            plan.acquire -= gs->g[i].state == G_OWNED;
        }
    }
}

static void publish(struct groups *gs)
{
    const char *fields[STATUS_MAX], *values[STATUS_MAX];
    char err[256];

    for (int i = 0; i < gs->n; i++) {
        size_t n;
        if (gs->g[i].state == G_FREE)
            continue;
        n = holder_group_status(gs->h, i, gs->status, STATUS_MAX);
        for (size_t k = 0; k < n; k++) {
            fields[k] = gs->status[k].field;
            values[k] = gs->status[k].value;
        }
        if (claims_publish(gs->claims, i, n, fields, values, err, sizeof(err)) < 0)
            log_debug("publish status group=%d: %s", i, err);
    }
}

static void tick(struct groups *gs, int64_t now)
{
    char err[256];
    unsigned long held;
    int least, live = claims_heartbeat(gs->claims, clock_now_ms(), active(gs), &least, err, sizeof(err));

    if (live > 0) {
        gs->live = live;
        gs->least = least;
    } else if (log_gate_open(&gs->gate, now, 5000, &held)) {
        log_warn("heartbeat failed: %s", err);
    }
    renew_all(gs, now);
    if (live > 0)
        rebalance(gs, now);
    publish(gs);
    metrics_set(M_GROUPS_OWNED, active(gs));
    metrics_set(M_LIVE_INSTANCES, gs->live);
}

void groups_run(struct groups *gs, int64_t now_ms)
{
    for (int i = 0; i < gs->n; i++) {
        if (gs->g[i].state != G_FREE && now_ms >= gs->g[i].valid_until)
            fence(gs, i, "its lease was not renewed in time");
        else if (gs->g[i].state == G_HANDING_BACK && holder_group_in_flight(gs->h, i) == 0)
            finish_hand_back(gs, i);
    }
    if (now_ms >= gs->next_tick) {
        tick(gs, now_ms);
        gs->next_tick = now_ms + gs->cfg->delay.claim_ttl_ms / 3;
    }
}

void groups_release_all(struct groups *gs)
{
    char err[256];

    for (int i = 0; i < gs->n; i++) {
        if (gs->g[i].state == G_FREE)
            continue;
        if (claims_release(gs->claims, i, err, sizeof(err)) < 0)
            log_warn("release group=%d at shutdown: %s (the lease expires by itself)", i, err);
        gs->g[i].state = G_FREE;
    }
    claims_goodbye(gs->claims);
}
