/* share: the fair share of partition groups among live instances. The contract is in
 * include/core/share.h. */
#include "core/share.h"

struct share_plan share_plan(int groups, int live, int least, int held)
{
    struct share_plan p = { 0, 0 };
    int lo, hi;

    if (live < 1)
        live = 1;
    lo = groups / live;
    hi = (groups + live - 1) / live;
    if (held > hi)
        p.release = held - hi;
    else if (held == hi && hi > lo && least < lo)
        p.release = 1;
    else if (held < lo)
        p.acquire = lo - held;
    else if (held < hi && least >= lo)
        p.acquire = hi - held;
    return p;
}
