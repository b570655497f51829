"""A Redis Cluster for tests: N masters (default 3) with one replica each on free ports, started
and stopped by scripts/redis-cluster-local.sh in a dir of the test's temp dir. Slot ownership and
key counts per master, failovers forced by SIGKILL of a master, rejoins and resharding, with
bounded waits until every running node agrees on the new layout. Standard library only."""

import os
import subprocess

import redisnodes
from harness import ROOT, free_port, run, wait_until

SCRIPT = os.path.join(ROOT, "scripts", "redis-cluster-local.sh")
SLOTS = 16384

# Bounds of the waits, with the script's cluster-node-timeout of 2000 ms: a master killed is
# flagged PFAIL after 2 s and FAIL soon after, its replica is promoted after a random delay of
# 0.5 to 1 s, and every node reports the cluster ok again about 4.5 s after the kill; a rejoin
# (the old master learns it was replaced, turns into a replica and resyncs) takes well under a
# second on loopback with a few thousand keys.
FAILOVER_TIMEOUT_S = 30
REJOIN_TIMEOUT_S = 30
OK_TIMEOUT_S = 30

# Flags of CLUSTER NODES that mark a node nobody can rely on.
FAILED_FLAGS = {"fail", "fail?", "noaddr", "handshake"}


def parse_cluster_nodes(text):
    """CLUSTER NODES (or a nodes.conf) as a list of dicts: id, port, bus (ints; port 0 for a node
    without an address), flags (a set: myself, master, slave, fail?, fail, ...), master (the id
    of its master or None), link ('connected'/'disconnected'), slots (a list of (first, last)
    ranges) and open (the [slot->-id] / [slot-<-id] entries of slots in migration)."""
    nodes = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 8 or f[0] == "vars":
            continue
        hostport, _, bus = f[1].split(",", 1)[0].partition("@")
        port = hostport.rpartition(":")[2]
        slots, open_slots = [], []
        for s in f[8:]:
            if s.startswith("["):
                open_slots.append(s)
                continue
            first, _, last = s.partition("-")
            slots.append((int(first), int(last or first)))
        nodes.append({
            "id": f[0],
            "port": int(port) if port.isdigit() else 0,
            "bus": int(bus) if bus.isdigit() else 0,
            "flags": set(f[2].split(",")),
            "master": None if f[3] == "-" else f[3],
            "link": f[7],
            "slots": slots,
            "open": open_slots,
        })
    return nodes


class ClusterStack:
    """The cluster in <tmp_dir>/redis-cluster, with masters (1 to 5) masters of replicas (1, or
    0 for a cluster that cannot fail over) replica(s) each. The data ports are known after start(): nodes, in the order of the script's ports
    file (the masters at creation first). With fewer than 3 masters the cluster cannot fail
    over on its own (a promotion needs the votes of a majority of all masters)."""

    def __init__(self, tmp_dir, masters=3, replicas=1, name="redis-cluster"):
        if masters not in range(1, 6):
            raise ValueError(f"masters must be 1 to 5, not {masters!r}")
        if replicas not in (0, 1):
            raise ValueError(f"replicas must be 0 or 1, not {replicas!r}")
        self.dir = os.path.join(tmp_dir, name)
        self.n_masters = masters
        self.n_replicas = replicas
        self.nodes = []
        self._killed = {}   # port -> {"id", "slots", "replicas"} as the cluster saw it at kill()

    def _script(self, verb, *args, check=True):
        return run(["bash", SCRIPT, verb, "--dir", self.dir, *args], check=check, timeout=300)

    def start(self):
        """Starts the cluster (every node cluster_state:ok, all slots mapped, replicas linked
        when this returns); returns the key=value lines the script printed, as a dict (dir,
        nodes, masters, replicas)."""
        out = {}
        for line in self._script("start", "--masters", str(self.n_masters),
                                         "--replicas", str(self.n_replicas)).stdout.splitlines():
            key, eq, value = line.partition("=")
            if eq and key.isalpha():
                out[key] = value
        self.nodes = [int(p) for p in out["nodes"].split(",")]
        return out

    def stop(self):
        self._script("stop")

    def status(self):
        """The script's status exit code: 0 when all nodes run and report cluster_state:ok,
        else 3."""
        return self._script("status", check=False).returncode

    # ------------------------------------------------------------ talking to nodes
    def redis(self, port, *args, check=True):
        """One command with redis-cli on 127.0.0.1:port: see redisnodes.redis."""
        return redisnodes.redis(port, *args, check=check)

    def redis_c(self, *args, check=True):
        """One command with redis-cli -c (following MOVED/ASK redirections), sent to the first
        running node that answers; as redis()."""
        for port in self._live_ports():
            out = redisnodes.cli(port, args, "-c")
            if out is not None:
                return out.strip()
        if check:
            raise RuntimeError(f"redis-cli -c {' '.join(map(str, args))}: no node answers")
        return None

    def cluster_nodes(self, port=None):
        """CLUSTER NODES of the node on port, or of the first running node that answers, parsed
        (see parse_cluster_nodes); [] when none answers."""
        for p in [port] if port is not None else self._live_ports():
            nodes = parse_cluster_nodes(redisnodes.cli(p, ["CLUSTER", "NODES"]) or "")
            if nodes:
                return nodes
        return []

    def cluster_info(self, port):
        """CLUSTER INFO of one node as a dict; {} when it does not answer."""
        return redisnodes.info_fields(port, "CLUSTER", "INFO")

    def replication(self, port):
        """INFO replication of one node as a dict; {} when it does not answer."""
        return redisnodes.info_fields(port, "INFO", "replication")

    def node_id(self, port):
        """The cluster node id of the node on port: CLUSTER MYID, or for a node that does not
        answer the "myself" line of its nodes.conf."""
        out = self.redis(port, "CLUSTER", "MYID", check=False)
        if out:
            return out
        me = self._myself_from_conf(port)
        if me is None:
            raise RuntimeError(f"no node id known for port {port}")
        return me["id"]

    def _myself_from_conf(self, port):
        try:
            with open(os.path.join(self._node_dir(port), "nodes.conf")) as f:
                text = f.read()
        except OSError:
            return None
        return next((n for n in parse_cluster_nodes(text) if "myself" in n["flags"]), None)

    def _with_role(self, role):
        """Ports of the healthy nodes with role (master or slave), in the order of nodes."""
        found = {n["port"] for n in self.cluster_nodes()
                 if role in n["flags"] and not n["flags"] & FAILED_FLAGS}
        return [p for p in self.nodes if p in found and self.pid(p) is not None]

    def masters(self):
        """Ports of the masters, from CLUSTER NODES of a running node that answers; failed
        nodes (flagged fail, fail?, noaddr, handshake, or whose process does not run) are left
        out."""
        return self._with_role("master")

    def replicas(self):
        """Ports of the replicas, as masters()."""
        return self._with_role("slave")

    def slot_owner(self, slot):
        """The port of the master that slot is assigned to, as a running node that answers
        sees it (a dead master stays the owner until a replica replaced it); None when no
        master has it."""
        for n in self.cluster_nodes():
            if "master" in n["flags"] and any(a <= slot <= b for a, b in n["slots"]):
                return n["port"]
        return None

    def slot_of(self, key):
        """CLUSTER KEYSLOT of key."""
        return int(self.redis(self._live_ports()[0], "CLUSTER", "KEYSLOT", key))

    def keys_per_master(self, pattern=None):
        """{port: number of keys} for each master of masters(): DBSIZE, or with a pattern the
        number of keys `redis-cli --scan --pattern` finds on that node."""
        counts = {}
        for port in self.masters():
            if pattern is None:
                counts[port] = int(self.redis(port, "DBSIZE"))
            else:
                out = self.redis(port, "--scan", "--pattern", pattern)
                counts[port] = len(out.splitlines()) if out else 0
        return counts

    # ------------------------------------------------------------ processes
    def _node_dir(self, port):
        d = os.path.join(self.dir, f"node-{port}")
        if not os.path.isdir(d):
            raise ValueError(f"no node on port {port} in {self.dir}")
        return d

    def pid(self, port):
        """The pid of the node on port, from the pid file the node wrote, checked against the
        process's working dir (the node dir); None when it does not run."""
        return redisnodes.pid_in(self._node_dir(port), "redis.pid")

    def _live_ports(self):
        return [p for p in self.nodes if self.pid(p) is not None]

    def kill(self, port):
        """SIGKILLs the node on port and waits until its process is gone. What the cluster
        knew of the node just before (id, slots, replicas) is kept for wait_failover."""
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no process runs on port {port}")
        view = self.cluster_nodes()
        me = next((n for n in view if n["port"] == port), None)
        if me is not None:
            self._killed[port] = {
                "id": me["id"], "slots": me["slots"],
                "replicas": [n["port"] for n in view if n["master"] == me["id"]]}
        redisnodes.kill(pid, port)

    # ------------------------------------------------------------ waits
    def _view_problem(self, port, live):
        """What keeps the node on port from being converged, or None: its cluster_state, its
        slot map (all slots assigned to running, non-failed masters, none in migration), its
        master link as a replica. Returns (problem, slot map)."""
        if self.cluster_info(port).get("cluster_state") != "ok":
            return "cluster_state not ok", None
        view = self.cluster_nodes(port)
        if not view:
            return "no CLUSTER NODES", None
        ranges = []
        for n in view:
            if n["open"]:
                return f"slots in migration: {n['open']}", None
            if "master" in n["flags"] and n["slots"]:
                if n["flags"] & FAILED_FLAGS or n["port"] not in live:
                    return f"slots on failed master {n['port']}", None
                ranges += [(a, b, n["port"]) for a, b in n["slots"]]
        ranges.sort()
        if sum(b - a + 1 for a, b, _ in ranges) != SLOTS or any(
                ranges[i][0] != ranges[i - 1][1] + 1 for i in range(1, len(ranges))):
            return "not all slots assigned", None
        me = next((n for n in view if "myself" in n["flags"]), None)
        if me and "slave" in me["flags"] and \
                self.replication(port).get("master_link_status") != "up":
            return "master link down", None
        return None, tuple(ranges)

    def problems(self):
        """Why the cluster is not converged (as wait_ok wants it), one line per problem; []
        when it is."""
        live = set(self._live_ports())
        if not live:
            return ["no node runs"]
        out, maps = [], {}
        for p in sorted(live):
            why, m = self._view_problem(p, live)
            if why:
                out.append(f"{p}: {why}")
            else:
                maps[p] = m
        if len(set(maps.values())) > 1:
            out.append("the nodes disagree about slot owners")
        return out

    def ok(self):
        return not self.problems()

    def wait_ok(self, timeout=OK_TIMEOUT_S):
        """Waits until every running node reports cluster_state:ok and maps all slots to the
        same running masters (no failed owner, no slot in migration), and every running
        replica has its master link up."""
        try:
            wait_until(self.ok, timeout, "the cluster to be ok", step=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}: {'; '.join(self.problems())}") from None

    def wait_failover(self, dead_port, timeout=FAILOVER_TIMEOUT_S):
        """After the master on dead_port was killed: waits until another, running node serves
        its slots (a replica of it, promoted) and the cluster is ok again (wait_ok). Returns
        the new master's port."""
        redisnodes.check_stopped(self.pid(dead_port), dead_port)
        dead = self._killed.get(dead_port) or self._myself_from_conf(dead_port)
        if not dead or not dead["slots"]:
            raise ValueError(f"node {dead_port} served no slots: no replica of it takes over")
        probe = dead["slots"][0][0]

        def promoted():
            owner = self.slot_owner(probe)
            return owner if owner not in (None, dead_port) and self.ok() else None

        try:
            new = wait_until(promoted, timeout, f"a replica of {dead_port} to take over",
                             step=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}: {'; '.join(self.problems())}") from None
        replicas = dead.get("replicas")
        if replicas is not None and new not in replicas:
            raise AssertionError(f"slots of {dead_port} went to {new}, not to one of its "
                                 f"replicas {replicas}")
        return new

    def failover(self, master_port, timeout=FAILOVER_TIMEOUT_S):
        """A planned failover of the master on master_port: CLUSTER FAILOVER on its replica,
        which waits for the master to stop taking writes, catches up and takes its slots over
        (the old master turns into its replica). Waits until the replica serves the master's
        slots and the cluster is ok again (wait_ok). Returns the new master's port."""
        nodes = self.cluster_nodes()
        me = next(n for n in nodes if n["port"] == master_port)
        replica = next(n["port"] for n in nodes if n["master"] == me["id"]
                       and not n["flags"] & FAILED_FLAGS)
        probe = me["slots"][0][0]
        out = self.redis(replica, "CLUSTER", "FAILOVER")
        if out != "OK":
            raise RuntimeError(f"CLUSTER FAILOVER on {replica}: {out}")
        wait_until(lambda: self.slot_owner(probe) == replica and self.ok(), timeout,
                   f"{replica} to take over the slots of {master_port}", step=0.1)
        return replica

    def restart(self, port, timeout=REJOIN_TIMEOUT_S):
        """Starts the killed node on port again from its config (redis.conf, nodes.conf, AOF)
        and waits until it rejoined: a master that was replaced meanwhile comes back as a
        replica of its successor (briefly claiming its old slots first), with its link up; a
        master never replaced (restarted before the failover) stays the master. Then waits
        until the cluster is ok. Returns the port of its master, or None when it is a
        master."""
        d = self._node_dir(port)
        redisnodes.check_stopped(self.pid(port), port)
        me = next((n for n in self.cluster_nodes() if n["port"] == port), None)
        stays_master = bool(me and "master" in me["flags"] and me["slots"])
        redisnodes.launch(self.pid, port, os.path.join(d, "redis.conf"))
        wait_until(lambda: self.redis(port, "PING", check=False) == "PONG", timeout,
                   f"node {port} to answer")
        master = None
        if not stays_master:
            def rejoined():
                mine = self.cluster_nodes(port)
                me = next((n for n in mine if "myself" in n["flags"]), None)
                if not me or "slave" not in me["flags"]:
                    return None
                if self.replication(port).get("master_link_status") != "up":
                    return None
                return next((n["port"] for n in mine if n["id"] == me["master"]), None)
            master = wait_until(rejoined, timeout, f"node {port} to rejoin as a replica",
                                step=0.1)
        self.wait_ok(timeout)
        self._killed.pop(port, None)
        return master

    def add_empty_master(self, timeout=OK_TIMEOUT_S):
        """Starts a new node (in a node dir of the cluster, so stop() stops it too) configured
        as the script configures its nodes, joins it to the cluster with `redis-cli --cluster
        add-node` as a master without slots, and waits until every node knows it and it sees
        the cluster ok (before that it refuses migrations with CLUSTERDOWN). Returns its port."""
        port, bus = free_port(), free_port()
        d = os.path.join(self.dir, f"node-{port}")
        os.makedirs(d)
        conf = os.path.join(d, "redis.conf")
        with open(conf, "w") as f:
            f.write(f"""bind 127.0.0.1
port {port}
daemonize yes
dir {d}
pidfile {os.path.join(d, "redis.pid")}
logfile {os.path.join(d, "redis.log")}
cluster-enabled yes
cluster-config-file {os.path.join(d, "nodes.conf")}
cluster-port {bus}
cluster-announce-ip 127.0.0.1
cluster-node-timeout 2000
save ""
appendonly yes
repl-diskless-sync-delay 0
""")
        redisnodes.launch(self.pid, port, conf)
        existing = self._live_ports()[0]
        run(["redis-cli", "--cluster", "add-node", f"127.0.0.1:{port}", f"127.0.0.1:{existing}"],
            timeout=60, stdin=subprocess.DEVNULL)
        self.nodes.append(port)
        wait_until(lambda: all(any(n["port"] == port for n in self.cluster_nodes(p))
                               for p in self._live_ports()), timeout, f"every node to know {port}")
        wait_until(lambda: self.cluster_info(port).get("cluster_state") == "ok", timeout,
                   f"{port} to see the cluster ok")
        return port

    def reshard_all_to(self, to_port, slots, timeout=300):
        """Moves slots slots from all the other masters to the master on to_port (`redis-cli
        --cluster reshard --cluster-from all`), then waits until the cluster is ok."""
        run(["redis-cli", "--cluster", "reshard", f"127.0.0.1:{to_port}", "--cluster-from", "all",
             "--cluster-to", self.node_id(to_port), "--cluster-slots", str(slots), "--cluster-yes"],
            timeout=timeout, stdin=subprocess.DEVNULL)
        self.wait_ok(min(timeout, OK_TIMEOUT_S))

    def reshard(self, from_port, to_port, slots, timeout=300, check=True):
        """Moves slots slots (with their keys) from the master on from_port to the master on
        to_port with `redis-cli --cluster reshard`, then waits until the cluster is ok (all
        nodes agree on the new owners, no slot left in migration). Returns the
        CompletedProcess; raises when redis-cli fails and check is true."""
        from_id, to_id = self.node_id(from_port), self.node_id(to_port)
        via = next((p for p in [from_port] + self._live_ports() if self.pid(p) is not None),
                   None)
        if via is None:
            raise RuntimeError(f"no node of {self.dir} runs")
        p = run(["redis-cli", "--cluster", "reshard", f"127.0.0.1:{via}",
                 "--cluster-from", from_id, "--cluster-to", to_id,
                 "--cluster-slots", str(slots), "--cluster-yes"],
                check=False, timeout=timeout, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster reshard exited {p.returncode}: "
                               f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
        self.wait_ok(min(timeout, OK_TIMEOUT_S))
        return p
