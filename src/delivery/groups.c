/* groups: the partition groups this instance forwards: winning, renewing, fencing and handing
 * back their leases on the holder's clock. The contract is in include/delivery/groups.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/leases.h"
#include "lib/clock.h"
#include "delivery/groups.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "core/share.h"

#define LOG_MODULE "groups"
#define CHANGES_PER_GROUP 3   /* in one run: lost, or won, or handed back; and its status */

enum gstate { G_FREE, G_OWNED, G_HANDING_BACK };

struct group {
    enum gstate state;
    int64_t valid_until;    /* monotonic ms: forwarding stops here unless renewed first */
    uint32_t epoch;         /* bumped whenever it is won or let go */
};

struct groups {
    const struct config *cfg;
    struct leases *claims;
    struct group *g;
    int n;
    int live, least;        /* from the last heartbeat */
    int64_t next_tick;      /* monotonic ms */
    int64_t margin_ms;      /* a lease is let go this long before it could expire */
    struct log_gate gate;
    struct group_change *changes;   /* of the current groups_run: at most CHANGES_PER_GROUP each */
    size_t nchanges;
};

struct groups *groups_new(const struct config *cfg)
{
    struct groups *gs = calloc(1, sizeof(*gs));

    if (!gs)
        return NULL;
    gs->cfg = cfg;
    gs->n = cfg->delay.ngroups;
    gs->live = 1;
    /* A fifth of the TTL covers a slow renew round trip and clock-rate differences. */
    gs->margin_ms = cfg->delay.claim_ttl_ms / 5;
    if (!(gs->claims = leases_new(cfg)) || !(gs->g = calloc((size_t)gs->n, sizeof(*gs->g))) ||
        !(gs->changes = calloc((size_t)gs->n * CHANGES_PER_GROUP, sizeof(*gs->changes)))) {
        groups_free(gs);
        return NULL;
    }
    log_info("instance token=%s groups=%d lease=%lld ms", leases_token(gs->claims), gs->n,
             (long long)cfg->delay.claim_ttl_ms);
    leases_check_old_layout(gs->claims);
    return gs;
}

void groups_free(struct groups *gs)
{
    if (!gs)
        return;
    leases_free(gs->claims);
    free(gs->g);
    free(gs->changes);
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

const char *groups_token(const struct groups *gs)
{
    return leases_token(gs->claims);
}

int groups_owner(struct groups *gs, int group, char *out, size_t outlen, char *err, size_t errlen)
{
    return leases_owner(gs->claims, group, out, outlen, err, errlen);
}

uint32_t groups_epoch(const struct groups *gs, int group)
{
    return gs->g[group].epoch;
}

int groups_may_send(const struct groups *gs, const struct held *m, int64_t now_ms)
{
    return m->epoch == gs->g[m->group].epoch && groups_may_forward(gs, m->group, now_ms);
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

static void change(struct groups *gs, int i, enum group_change_kind kind)
{
    gs->changes[gs->nchanges++] = (struct group_change){ i, kind };
}

static void fence(struct groups *gs, int i, const char *why)
{
    log_error("fenced group=%d: %s; its messages are dropped and nothing more is committed", i, why);
    metrics_inc(M_GROUPS_FENCED);
    gs->g[i].state = G_FREE;
    gs->g[i].epoch++;
    change(gs, i, GROUP_LOST);
}

static void begin_hand_back(struct groups *gs, int i, const char *why)
{
    log_info("handing back group=%d: %s", i, why);
    gs->g[i].state = G_HANDING_BACK;
    change(gs, i, GROUP_HAND_BACK);
}

void groups_let_go(struct groups *gs, int group, const char *why)
{
    char err[256];

    if (leases_release(gs->claims, group, err, sizeof(err)) < 0)
        log_warn("release group=%d: %s (the lease expires by itself)", group, err);
    gs->g[group].state = G_FREE;
    gs->g[group].epoch++;
    log_info("%s group=%d", why, group);
}

int groups_handing_back(const struct groups *gs, int group)
{
    return gs->g[group].state == G_HANDING_BACK;
}

static void acquire(struct groups *gs, int i, int64_t sent)
{
    char err[256];
    int r = leases_acquire(gs->claims, i, err, sizeof(err));

    if (r <= 0) {
        if (r < 0)
            log_warn("claim group=%d: %s", i, err);
        return;
    }
    gs->g[i].state = G_OWNED;
    gs->g[i].valid_until = sent + gs->cfg->delay.claim_ttl_ms - gs->margin_ms;
    gs->g[i].epoch++;
    change(gs, i, GROUP_WON);
    log_info("acquired group=%d", i);
}

static void renew_all(struct groups *gs, int64_t sent)
{
    int64_t least = -1;
    char err[256];

    for (int i = 0; i < gs->n; i++) {   /* how late this round comes: the lease time left */
        int64_t left = gs->g[i].valid_until + gs->margin_ms - sent;
        if (gs->g[i].state != G_FREE && (least < 0 || left < least))
            least = left;
    }
    if (least >= 0)
        metrics_set(M_LEASE_LEFT_MS, least);

    for (int i = 0; i < gs->n; i++) {
        int r;
        if (gs->g[i].state == G_FREE)
            continue;
        if ((r = leases_renew(gs->claims, i, err, sizeof(err))) > 0) {
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
    int start = (int)(strlen(leases_token(gs->claims)) * 7 % (size_t)gs->n);

    for (int i = 0; i < gs->n; i++)
        if (gs->g[i].state == G_OWNED && leases_release_requested(gs->claims, i, err, sizeof(err)) > 0)
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

/* Every group held is asked for its status. */
static void ask_status(struct groups *gs)
{
    for (int i = 0; i < gs->n; i++)
        if (gs->g[i].state != G_FREE)
            change(gs, i, GROUP_STATUS);
}

void groups_publish(struct groups *gs, int group, const struct part_status *rows, size_t n)
{
    const char **fields = malloc((n ? n : 1) * sizeof(*fields)), **values = malloc((n ? n : 1) * sizeof(*values));
    char err[256];

    for (size_t k = 0; fields && values && k < n; k++) {
        fields[k] = rows[k].field;
        values[k] = rows[k].value;
    }
    if (!fields || !values)
        log_debug("publish status group=%d: out of memory", group);
    else if (leases_publish(gs->claims, group, n, fields, values, err, sizeof(err)) < 0)
        log_warn("publish status group=%d: %s", group, err);
    free(fields);
    free(values);
}

static void tick(struct groups *gs, int64_t now)
{
    char err[256];
    unsigned long held;
    int least, live = leases_heartbeat(gs->claims, clock_now_ms(), active(gs), &least, err, sizeof(err));

    if (live > 0) {
        gs->live = live;
        gs->least = least;
    } else if (log_gate_open(&gs->gate, now, 5000, &held)) {
        log_warn("heartbeat failed: %s", err);
    }
    renew_all(gs, now);
    if (live > 0)
        rebalance(gs, now);
    ask_status(gs);
    metrics_set(M_GROUPS_OWNED, active(gs));
    metrics_set(M_LIVE_INSTANCES, gs->live);
}

size_t groups_run(struct groups *gs, int64_t now_ms, const struct group_change **changes)
{
    gs->nchanges = 0;
    for (int i = 0; i < gs->n; i++)
        if (gs->g[i].state != G_FREE && now_ms >= gs->g[i].valid_until)
            fence(gs, i, "its lease was not renewed in time");
    if (now_ms >= gs->next_tick) {
        tick(gs, now_ms);
        gs->next_tick = now_ms + gs->cfg->delay.claim_ttl_ms / 3;
    }
    *changes = gs->changes;
    return gs->nchanges;
}

void groups_release_all(struct groups *gs)
{
    char err[256];

    for (int i = 0; i < gs->n; i++) {
        if (gs->g[i].state == G_FREE)
            continue;
        if (leases_release(gs->claims, i, err, sizeof(err)) < 0)
            log_warn("release group=%d at shutdown: %s (the lease expires by itself)", i, err);
        gs->g[i].state = G_FREE;
        gs->g[i].epoch++;
    }
    leases_goodbye(gs->claims);
}
