"""Redis Cluster: three masters with a replica each. Job records spread over the masters by id,
every job is delivered once and on time, remove still races delivery safely, and delayqd follows
a live resharding and a kill -9 of a master without restart, losing nothing it acknowledged."""

import os
import random
import time
from collections import Counter

from cluster import ClusterStack
from harness import ROOT, Delayqd, Reader, run, wait_until
from test_faults import assert_never_early, race_removes_against_delivery
from test_redis_ha import Load, check_nothing_lost_or_resurrected


def on_cluster(stack, cs, **extra):
    """A delayqd that knows two of the cluster's nodes (it finds the rest)."""
    return Delayqd(stack, partitions=extra.pop("partitions", 2),
                   extra=dict({"cluster": cs.nodes[:2], "redis_timeout_ms": 1000}, **extra))


def started(stack, masters=3):
    cs = ClusterStack(stack.tmp, masters=masters)
    cs.start()
    return cs


def test_jobs_spread_over_the_masters_and_arrive_on_time(stack):
    cs = started(stack)
    try:
        d = on_cluster(stack, cs).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_spread")
        ids = d.bulk_add([{"topic": reader.topic, "delay_ms": random.randint(500, 6000), "body": str(i)}
                          for i in range(3000)])
        per = cs.keys_per_master(f"{d.prefix}job:*")
        print(f"    records per master: {per}")
        assert len(per) == 3 and sum(per.values()) == 3000, per
        for port, n in per.items():
            assert 850 <= n <= 1150, (port, per)   # within 15% of an even share
        by_id = reader.wait_ids(ids, 60)
        twice = [j for j, ms in by_id.items() if len(ms) > 1]
        assert not twice, twice[:5]
        assert_never_early(reader.all())
        reader.close()
    finally:
        cs.stop()


def test_remove_racing_delivery_has_one_winner_on_a_cluster(stack):
    cs = started(stack)
    try:
        d = on_cluster(stack, cs).start().wait_groups_owned()
        reader = Reader(stack, f"{d.name}_race")
        race_removes_against_delivery(d, reader, 600)
        reader.close()
    finally:
        cs.stop()


def run_load_through(stack, cs, fault, back_within_s, **extra):
    d = on_cluster(stack, cs, **extra).start().wait_groups_owned()
    reader = Reader(stack, f"{d.name}_load")
    load = Load(d, reader.topic).start()
    time.sleep(3)
    t_fault = time.time()
    fault()
    time.sleep(6)
    load.stop()
    late = [t - t_fault for t, _ in load.refused if t > t_fault]
    print(f"    {len(load.added)} added, {len(load.removed)} removed, {len(load.refused)} refused"
          + (f"; the last sent {max(late):.1f}s after the fault began" if late else ""))
    assert len(load.added) > 150, len(load.added)   # the load ran (slower under sanitizers)
    assert not [t for t in late if t > back_within_s], (back_within_s, late)
    check_nothing_lost_or_resurrected(load, reader)
    assert d.alive()
    reader.close()
    return d


def test_live_resharding_loses_nothing(stack):
    cs = started(stack)
    try:
        def reshard():
            a, b = cs.masters()[:2]
            t0 = time.time()
            cs.reshard(a, b, 2000)
            print(f"    2000 slots moved in {time.time() - t0:.1f}s")
        d = run_load_through(stack, cs, reshard, back_within_s=10 ** 6)
        # the records followed the slots: the map delayqd reads is the cluster's
        per = cs.keys_per_master(f"{d.prefix}job:*")
        print(f"    records per master after: {per}")
    finally:
        cs.stop()


def test_master_killed_loses_nothing_on_a_cluster(stack):
    cs = started(stack)
    try:
        def kill_and_rejoin():
            old = random.choice(cs.masters())
            cs.kill(old)
            new = cs.wait_failover(old)
            print(f"    master {old} killed, {new} promoted")
            cs.restart(old)   # back as a replica: WAIT 1 can be met again on its shard
        run_load_through(stack, cs, kill_and_rejoin, back_within_s=15, wait_replicas=1)
    finally:
        cs.stop()


def test_two_instances_share_the_groups_on_a_cluster(stack):
    cs = started(stack)
    try:
        first = on_cluster(stack, cs, partitions=4, groups=[[0, 1], [2, 3]]).start()
        second = Delayqd(stack, cluster=first).start()
        wait_until(lambda: sorted(Counter(first.claims().values()).values()) == [1, 1], 30,
                   "one group each", step=0.3)
        p = run(["bash", os.path.join(ROOT, "scripts", "claims.sh"), "-c", first.conf_path, "list"])
        assert p.stdout.count(" alive") == 2, p.stdout
        assert first.token() in p.stdout and second.token() in p.stdout, p.stdout
        reader = Reader(stack, f"{first.name}_two")
        ids = first.bulk_add([{"topic": reader.topic, "delay_ms": 500 + i, "body": str(i)}
                              for i in range(200)])
        by_id = reader.wait_ids(ids, 30)
        assert all(len(ms) == 1 for ms in by_id.values())
        reader.close()
    finally:
        cs.stop()
