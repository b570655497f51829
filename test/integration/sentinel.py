"""A Redis high-availability stack for tests: one master, one or two replicas and three
Sentinels on free ports, started and stopped by scripts/redis-sentinel-local.sh in a dir of the
test's temp dir. Failovers, planned (SENTINEL FAILOVER) or forced (SIGKILL of the master), and a
master moved by hand behind Sentinel's back, with bounded waits until every Sentinel and the
data nodes agree on the new roles. Standard library only."""

import os
import time

import redisnodes
from harness import ROOT, run, wait_until

SCRIPT = os.path.join(ROOT, "scripts", "redis-sentinel-local.sh")

# Bounds of the waits, with the script's Sentinel settings (down-after-milliseconds 1000,
# failover-timeout 10000): a promotion after a kill takes about 2.5 s, a planned failover about
# 11 s (Sentinel turns the old master into a replica only 10 s after the switch), a rejoin about
# 5 s. With two replicas, the replica that is not promoted is turned into a replica of the new
# master within the failover, about a second after the promotion.
PROMOTE_TIMEOUT_S = 20
FAILOVER_TIMEOUT_S = 30
REJOIN_TIMEOUT_S = 30
# Sentinel takes a replica's INFO as valid for 3 of its 10 s INFO periods while the master is
# up (sentinelSelectSlave); a replica it has never had INFO from cannot be promoted.
INFO_VALID_MS = 30000


class SentinelStack:
    """The stack in <tmp_dir>/<name>, with replicas (1 or 2) replicas of the master.
    Ports are known after start(): data_ports (the master at start first, then the replicas)
    and sentinel_ports."""

    def __init__(self, tmp_dir, master_name="delayq", replicas=1, name="redis-sentinel"):
        if replicas not in (1, 2):
            raise ValueError(f"replicas must be 1 or 2, not {replicas!r}")
        self.dir = os.path.join(tmp_dir, name)
        self.master_name = master_name
        self.replicas = replicas
        self.sentinel_ports = []
        self.data_ports = []

    def _script(self, verb, *args):
        return run(["bash", SCRIPT, verb, "--dir", self.dir, "--master-name", self.master_name,
                    *args], timeout=300)

    def start(self):
        """Starts the stack (ready for a failover when this returns); returns the key=value
        lines the script printed, as a dict."""
        out = {}
        for line in self._script("start", "--replicas", str(self.replicas)).stdout.splitlines():
            key, eq, value = line.partition("=")
            if eq and key.replace("_", "").isalpha():
                out[key] = value
        self.sentinel_ports = [int(p) for p in out["sentinels"].split(",")]
        self.data_ports = [int(out["master"])] + [int(p) for p in out["replicas"].split(",")]
        return out

    def stop(self):
        self._script("stop")

    # ------------------------------------------------------------ talking to nodes
    def redis(self, port, *args, check=True):
        """One command with redis-cli on 127.0.0.1:port: see redisnodes.redis."""
        return redisnodes.redis(port, *args, check=check)

    def _sentinel_table(self, sentinel_port, what):
        """SENTINEL replicas|sentinels of one Sentinel as a list of dicts (all values text);
        [] when it does not answer. redis-cli prints the nested reply as key and value lines,
        an empty value as an empty line."""
        out = redisnodes.cli(sentinel_port, ["SENTINEL", what, self.master_name]) or ""
        lines = out[:-1].split("\n") if out.endswith("\n") else out.split("\n")
        table = []
        for k, v in zip(lines[::2], lines[1::2]):
            if k == "name":
                table.append({})
            if table:
                table[-1][k] = v
        return table

    def sentinel_master(self, sentinel_port):
        """The master's port as one Sentinel reports it, or None."""
        out = self.redis(sentinel_port, "SENTINEL", "get-master-addr-by-name", self.master_name,
                         check=False)
        lines = (out or "").splitlines()
        return int(lines[1]) if len(lines) == 2 and lines[1].isdigit() else None

    def master_port(self):
        """The master's port, from the first Sentinel that answers."""
        for s in self.sentinel_ports:
            port = self.sentinel_master(s)
            if port:
                return port
        raise RuntimeError(f"no Sentinel of {self.dir} knows master {self.master_name}")

    def role(self, port):
        """'master', 'slave' or None (not answering)."""
        out = self.redis(port, "ROLE", check=False)
        return out.splitlines()[0] if out else None

    def replication(self, port):
        """INFO replication of a data node as a dict; {} when it does not answer."""
        return redisnodes.info_fields(port, "INFO", "replication")

    def is_replica_of(self, port, master):
        r = self.replication(port)
        return (r.get("role") == "slave" and r.get("master_port") == str(master)
                and r.get("master_link_status") == "up")

    # ------------------------------------------------------------ processes
    def _node_dir(self, port):
        for kind in ("redis", "sentinel"):
            d = os.path.join(self.dir, f"{kind}-{port}")
            if os.path.isdir(d):
                return kind, d
        raise ValueError(f"no node on port {port} in {self.dir}")

    def pid(self, port):
        """The pid of the node on port, from the pid file the node wrote, checked against the
        process's working dir (the node dir); None when it does not run."""
        kind, d = self._node_dir(port)
        return redisnodes.pid_in(d, f"{kind}.pid")

    def _kill(self, port):
        redisnodes.kill(self.pid(port), port)

    def kill_master(self):
        """SIGKILLs the current master's process; returns its port. Sentinel promotes the
        replica after down-after-milliseconds (see wait_promoted)."""
        port = self.master_port()
        self._kill(port)
        return port

    def restart(self, port, as_replica=True, timeout=REJOIN_TIMEOUT_S):
        """Starts the killed data node on port again with its config; waits until it is a
        replica of the current master with its link up and the Sentinels are ready for the next
        failover. as_replica: start it with --replicaof the current master, as a rejoining node
        should be; False starts it exactly as its config says, so a former master comes back as
        a master for about 10 s, until Sentinel turns it into a replica (Sentinel waits 8 s
        before it overrides the role a node reports). A master restarted before Sentinel
        replaced it stays the master."""
        kind, d = self._node_dir(port)
        if kind != "redis":
            raise ValueError(f"port {port} is a Sentinel, not a data node")
        redisnodes.check_stopped(self.pid(port), port)
        master = self.master_port()
        args = ["--replicaof", "127.0.0.1", master] if as_replica and master != port else []
        redisnodes.launch(self.pid, port, os.path.join(d, "redis.conf"), *args)
        if master == port:
            wait_until(lambda: self.role(port) == "master", timeout, f"{port} to answer")
        else:
            wait_until(lambda: self.is_replica_of(port, self.master_port()), timeout,
                       f"node {port} to rejoin as a replica")
        self.wait_ready(timeout)

    # ------------------------------------------------------------ failovers
    def ready(self):
        """Could a failover start at once? True when all Sentinels agree on the master, and
        each of them lists every other running data node as a replica that is up and that it
        has had INFO from, and knows the two other Sentinels."""
        master = self._agreed_master()
        if master is None:
            return False
        replicas = [p for p in self.data_ports if p != master and self.pid(p) is not None]
        for s in self.sentinel_ports:
            seen = {r.get("port"): r for r in self._sentinel_table(s, "replicas")}
            for p in replicas:
                r = seen.get(str(p))
                if (not r or r.get("flags") != "slave"
                        or not r.get("info-refresh", "").isdigit()
                        or int(r["info-refresh"]) >= INFO_VALID_MS):
                    return False
            peers = self._sentinel_table(s, "sentinels")
            if sum(x.get("flags") == "sentinel" for x in peers) != len(self.sentinel_ports) - 1:
                return False
        return True

    def wait_ready(self, timeout=FAILOVER_TIMEOUT_S):
        """Waits until ready(): after a node rejoined, the Sentinels need a moment (a reconnect,
        an INFO) before they can promote it; a master killed before that is not replaced until
        Sentinel's next attempt, 2 x failover-timeout (20 s) later."""
        wait_until(self.ready, timeout, "the Sentinels to be ready for a failover", step=0.1)

    def _agreed_master(self, other_than=None):
        """The master's port when all Sentinels report the same one and it is not other_than,
        else None."""
        seen = {self.sentinel_master(s) for s in self.sentinel_ports}
        master = seen.pop() if len(seen) == 1 else None
        return master if master not in (None, other_than) else None

    def failover(self, timeout=FAILOVER_TIMEOUT_S):
        """SENTINEL FAILOVER on one Sentinel; waits until all Sentinels report the new master,
        it answers ROLE master and every other running data node (the old master, and with two
        replicas the one not promoted) is its replica with the link up, and the Sentinels are
        ready for the next failover. Returns the new master's port.
        Sentinel (7.0) promotes a replica within about a second and points the other replica
        to it within the failover, but leaves the old master a master for about 10 s more (it
        waits 8 s before it overrides the role a node reports): meanwhile the old and the new
        master accept writes, and what the old master took is lost when it resyncs."""
        self.wait_ready(timeout)
        old = self.master_port()
        out = self.redis(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.master_name)
        if out != "OK":
            raise RuntimeError(f"SENTINEL FAILOVER: {out}")
        new = wait_until(lambda: self._agreed_master(old), timeout,
                         "all Sentinels to report a new master")
        wait_until(lambda: self.role(new) == "master", timeout, f"{new} to answer ROLE master")
        self._wait_replicas_of(new, timeout)
        self.wait_ready(timeout)
        return new

    def _wait_replicas_of(self, master, timeout, ports=None):
        """Waits until each data node of ports (default: every running data node but master)
        is a replica of master with the link up."""
        if ports is None:
            ports = [p for p in self.data_ports if p != master and self.pid(p) is not None]
        for p in ports:
            wait_until(lambda p=p: self.is_replica_of(p, master), timeout,
                       f"{p} to become a replica of {master} with the link up")

    # Per-master settings of SENTINEL MASTER that SENTINEL SET takes back. The script's config
    # sets no auth-pass or auth-user (the data nodes have no password); were it to, they would
    # have to be added here, as SENTINEL MASTER does not show them.
    _SENTINEL_SETTINGS = ("down-after-milliseconds", "failover-timeout", "parallel-syncs",
                          "master-reboot-down-after-period")

    def _sentinel_master_info(self, sentinel_port):
        """SENTINEL MASTER of one Sentinel as a dict (all values text)."""
        out = self.redis(sentinel_port, "SENTINEL", "MASTER", self.master_name)
        lines = out.split("\n")
        info = dict(zip(lines[::2], lines[1::2]))
        if info.get("name") != self.master_name:
            raise RuntimeError(f"SENTINEL MASTER {self.master_name} on {sentinel_port}: {out}")
        return info

    def move_master_by_hand(self, timeout=FAILOVER_TIMEOUT_S, pause_s=0):
        """Moves the master role to a replica the way an operator would, behind the clients'
        back and without Sentinel (which would kill client connections): SENTINEL REMOVE on
        every Sentinel; REPLICAOF NO ONE on a replica; REPLICAOF it on the old master and any
        other running replica; waits until they report the link up; sleeps pause_s; SENTINEL
        MONITOR on every Sentinel with its quorum and SENTINEL SET with its per-master settings
        as they were (the script's config); waits until the Sentinels are ready for a
        failover. Returns (old, new).
        Redis does not disconnect the normal clients of a master that becomes a replica: a
        client connected to the old master gets READONLY errors from then on. From the
        REPLICAOF on the old master until the SENTINEL MONITOR (pause_s at least), the old
        master answers READONLY and no Sentinel can name a master (get-master-addr-by-name
        answers nil)."""
        self.wait_ready(timeout)
        old = self.master_port()
        replicas = [p for p in self.data_ports if p != old and self.pid(p) is not None]
        new = next((p for p in replicas if self.is_replica_of(p, old)), None)
        if new is None:
            raise RuntimeError(f"no replica of {old} with the link up to move the master to")
        settings = {s: self._sentinel_master_info(s) for s in self.sentinel_ports}
        for s in self.sentinel_ports:
            out = self.redis(s, "SENTINEL", "REMOVE", self.master_name)
            if out != "OK":
                raise RuntimeError(f"SENTINEL REMOVE on {s}: {out}")
        out = self.redis(new, "REPLICAOF", "NO", "ONE")
        if out != "OK":
            raise RuntimeError(f"REPLICAOF NO ONE on {new}: {out}")
        others = [old] + [p for p in replicas if p != new]
        for p in others:
            out = self.redis(p, "REPLICAOF", "127.0.0.1", new)
            if not out.startswith("OK"):
                raise RuntimeError(f"REPLICAOF 127.0.0.1 {new} on {p}: {out}")
        self._wait_replicas_of(new, timeout, others)
        if pause_s:
            time.sleep(pause_s)
        for s in self.sentinel_ports:
            info = settings[s]
            out = self.redis(s, "SENTINEL", "MONITOR", self.master_name, "127.0.0.1", new,
                             info["quorum"])
            if out != "OK":
                raise RuntimeError(f"SENTINEL MONITOR on {s}: {out}")
            args = []
            for k in self._SENTINEL_SETTINGS:
                if k in info:
                    args += [k, info[k]]
            out = self.redis(s, "SENTINEL", "SET", self.master_name, *args)
            if out != "OK":
                raise RuntimeError(f"SENTINEL SET on {s}: {out}")
        self.wait_ready(timeout)
        return old, new

    def wait_promoted(self, old, timeout=PROMOTE_TIMEOUT_S):
        """After the master on port old died: waits until all Sentinels report another master
        and it answers ROLE master. Returns its port."""
        new = wait_until(lambda: self._agreed_master(old), timeout,
                         f"Sentinel to promote a replica of {old}")
        wait_until(lambda: self.role(new) == "master", timeout, f"{new} to answer ROLE master")
        return new
