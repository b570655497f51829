/* share: the fair share of partition groups among live instances. Pure logic.
 * With G groups and N live instances each instance holds lo = G/N or hi = ceil(G/N) groups. */
#ifndef DQ_SHARE_H
#define DQ_SHARE_H

struct share_plan {
    int release;    /* groups to hand back now */
    int acquire;    /* free groups to try to take now, at most */
};

/* What an instance holding `held` groups should do, given `groups` in all, `live` instances
 * and the fewest groups `least` any live instance holds:
 *  - above hi: hand back the extras;
 *  - at hi while some instance holds fewer than lo: hand one back for it;
 *  - below lo: take free groups up to lo at once (a dead owner's groups, a new start);
 *  - below hi while no instance is short: take free groups up to hi. */
struct share_plan share_plan(int groups, int live, int least, int held);

#endif
