"""The redis-server processes of the local Redis stacks (sentinel.py, cluster.py): redis-cli calls
with a timeout, a node's pid from its pid file, SIGKILL, restart. Standard library only."""

import os
import signal
import subprocess

from harness import run, wait_until

CLI_TIMEOUT_S = 5
PROCESS_TIMEOUT_S = 10   # for a process to die, or to write its pid file


def alive(pid):
    """Is pid a running process (a zombie, killed but not reaped, is not)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def cli(port, args, *opts):
    """redis-cli --raw [opts] args on 127.0.0.1:port; its output, or None when it fails or does
    not answer within CLI_TIMEOUT_S (a stopped node)."""
    try:
        p = run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--raw", *opts,
                 *map(str, args)], check=False, timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    return p.stdout if p.returncode == 0 else None


def redis(port, *args, check=True):
    """One command with redis-cli on 127.0.0.1:port; its --raw output, stripped (an error
    reply too: redis-cli prints it and exits 0). A node that does not answer raises, or
    gives None with check=False."""
    out = cli(port, args)
    if out is None:
        if check:
            raise RuntimeError(f"redis-cli -p {port} {' '.join(map(str, args))}: no answer")
        return None
    return out.strip()


def info_fields(port, *command):
    """The "key:value" lines that command (INFO section, CLUSTER INFO) answers on the node on
    port, as a dict; {} when it does not answer."""
    out = redis(port, *command, check=False) or ""
    return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)


def pid_in(node_dir, pid_file):
    """The pid of the node of node_dir, from the pid file the node wrote there, checked against
    the process's working dir (redis chdirs to its node dir); None when it does not run."""
    try:
        with open(os.path.join(node_dir, pid_file)) as f:
            pid = int(f.read().strip())
        if os.readlink(f"/proc/{pid}/cwd") != os.path.realpath(node_dir):
            return None
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def kill(pid, port):
    """SIGKILLs the node pid (None: it does not run) on port and waits until it is gone."""
    if pid is None:
        raise RuntimeError(f"no process runs on port {port}")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), PROCESS_TIMEOUT_S, f"pid {pid} to die")


def check_stopped(pid, port):
    """Raises unless pid, of the node on port, is None (it does not run)."""
    if pid is not None:
        raise RuntimeError(f"the node on port {port} still runs")


def launch(pid_of, port, conf, *args):
    """Starts the node on port with redis-server conf args... (it daemonizes); waits until
    pid_of(port), its pid from its pid file, is known."""
    run(["redis-server", conf, *map(str, args)])
    wait_until(lambda: pid_of(port), PROCESS_TIMEOUT_S, f"node {port} to write its pid file")
