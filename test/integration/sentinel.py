"""A Redis high-availability stack for tests: one master, one replica and three Sentinels on
free ports, started and stopped by scripts/redis-sentinel-local.sh in a dir of the test's temp
dir. Failovers, planned (SENTINEL FAILOVER) or forced (SIGKILL of the master), with bounded
waits until every Sentinel and both data nodes agree on the new roles. Standard library only."""

import os
import signal
import subprocess

from harness import ROOT, run, wait_until

SCRIPT = os.path.join(ROOT, "scripts", "redis-sentinel-local.sh")

# Bounds of the waits, with the script's Sentinel settings (down-after-milliseconds 1000,
# failover-timeout 10000): a promotion after a kill takes about 2.5 s, a planned failover about
# 11 s (Sentinel turns the old master into a replica only 10 s after the switch), a rejoin about
# 5 s.
PROMOTE_TIMEOUT_S = 20
FAILOVER_TIMEOUT_S = 30
REJOIN_TIMEOUT_S = 30
CLI_TIMEOUT_S = 5
# Sentinel takes a replica's INFO as valid for 3 of its 10 s INFO periods while the master is
# up (sentinelSelectSlave); a replica it has never had INFO from cannot be promoted.
INFO_VALID_MS = 30000


def alive(pid):
    """Is pid a running process (a zombie, killed but not reaped, is not)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class SentinelStack:
    """The stack in <tmp_dir>/redis-sentinel. Ports are known after start()."""

    def __init__(self, tmp_dir, master_name="delayq"):
        self.dir = os.path.join(tmp_dir, "redis-sentinel")
        self.master_name = master_name
        self.sentinel_ports = []
        self.data_ports = []

    def _script(self, verb):
        return run(["bash", SCRIPT, verb, "--dir", self.dir, "--master-name", self.master_name],
                   timeout=300)

    def start(self):
        """Starts the stack (ready for a failover when this returns); returns the key=value
        lines the script printed, as a dict."""
        out = {}
        for line in self._script("start").stdout.splitlines():
            key, eq, value = line.partition("=")
            if eq and key.replace("_", "").isalpha():
                out[key] = value
        self.sentinel_ports = [int(p) for p in out["sentinels"].split(",")]
        self.data_ports = [int(out["master"]), int(out["replica"])]
        return out

    def stop(self):
        self._script("stop")

    # ------------------------------------------------------------ talking to nodes
    def redis(self, port, *args, check=True):
        """One command with redis-cli on 127.0.0.1:port; its --raw output, stripped (an error
        reply too: redis-cli prints it and exits 0). A node that does not answer raises, or
        gives None with check=False."""
        out = self._cli(port, args)
        if out is None:
            if check:
                raise RuntimeError(f"redis-cli -p {port} {' '.join(map(str, args))}: no answer")
            return None
        return out.strip()

    @staticmethod
    def _cli(port, args):
        try:
            p = run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--raw", *map(str, args)],
                    check=False, timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None
        return p.stdout if p.returncode == 0 else None

    def _sentinel_table(self, sentinel_port, what):
        """SENTINEL replicas|sentinels of one Sentinel as a list of dicts (all values text);
        [] when it does not answer. redis-cli prints the nested reply as key and value lines,
        an empty value as an empty line."""
        out = self._cli(sentinel_port, ["SENTINEL", what, self.master_name]) or ""
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
        out = self.redis(port, "INFO", "replication", check=False) or ""
        return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)

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
        """The pid of the node on port, from the pid file the node wrote; None when it does
        not run."""
        kind, d = self._node_dir(port)
        try:
            with open(os.path.join(d, f"{kind}.pid")) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def _kill(self, port):
        pid = self.pid(port)
        if pid is None:
            raise RuntimeError(f"no process runs on port {port}")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid), 10, f"pid {pid} to die")

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
        if self.pid(port) is not None:
            raise RuntimeError(f"the node on port {port} still runs")
        master = self.master_port()
        cmd = ["redis-server", os.path.join(d, "redis.conf")]
        if as_replica and master != port:
            cmd += ["--replicaof", "127.0.0.1", str(master)]
        run(cmd)
        wait_until(lambda: self.pid(port), 10, f"node {port} to write its pid file")
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
        it answers ROLE master and the old master is its replica with the link up, and the
        Sentinels are ready for the next failover. Returns the new master's port.
        Sentinel (7.0) promotes the replica within about a second but leaves the old master a
        master for about 10 s more (it waits 8 s before it overrides the role a node reports):
        meanwhile both data nodes accept writes, and what the old master took is lost when it
        resyncs."""
        self.wait_ready(timeout)
        old = self.master_port()
        out = self.redis(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.master_name)
        if out != "OK":
            raise RuntimeError(f"SENTINEL FAILOVER: {out}")
        new = wait_until(lambda: self._agreed_master(old), timeout,
                         "all Sentinels to report a new master")
        wait_until(lambda: self.role(new) == "master", timeout, f"{new} to answer ROLE master")
        wait_until(lambda: self.is_replica_of(old, new), timeout,
                   f"old master {old} to become a replica of {new}")
        self.wait_ready(timeout)
        return new

    def wait_promoted(self, old, timeout=PROMOTE_TIMEOUT_S):
        """After the master on port old died: waits until all Sentinels report another master
        and it answers ROLE master. Returns its port."""
        new = wait_until(lambda: self._agreed_master(old), timeout,
                         f"Sentinel to promote a replica of {old}")
        wait_until(lambda: self.role(new) == "master", timeout, f"{new} to answer ROLE master")
        return new
