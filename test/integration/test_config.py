"""The binary's command line and config validation: a bad config stops start-up with a message
that names the key and its line."""

import os
import re
import socket
import tempfile

from harness import DELAYQD, ROOT, Delayqd, run


def delayqd(*args):
    return run([DELAYQD, *args], check=False)


def write(stack, name, text):
    path = os.path.join(stack.tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_version_and_help(stack):
    p = delayqd("--version")
    assert p.returncode == 0 and p.stdout.startswith("delayqd "), p
    # one version: the binary's, the newest in CHANGELOG.md, the API description's
    version = p.stdout.split()[1]
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        assert re.search(r"^## (\S+)", f.read(), re.M).group(1) == version
    with open(os.path.join(ROOT, "docs", "openapi.yaml")) as f:
        assert re.search(r'^  version: "([^"]+)"', f.read(), re.M).group(1) == version
    p = delayqd("--help")
    assert p.returncode == 0 and "--check-config" in p.stdout, p
    p = delayqd()
    assert p.returncode == 2 and "usage" in p.stderr, p


def test_shipped_config_checks_ok(stack):
    p = delayqd("-c", os.path.join(ROOT, "conf", "delayq.conf"), "--check-config")
    assert p.returncode == 0 and "ok" in p.stdout, p


def test_unknown_key_names_key_and_line(stack):
    path = write(stack, "unknown.conf", 'http: {\n  listen = "127.0.0.1:1";\n  lisen = "x";\n};\n')
    p = delayqd("-c", path, "--check-config")
    assert p.returncode == 1, p
    assert f"{path}:3: http.lisen: unknown key" in p.stderr, p.stderr


def test_invalid_values_name_key_and_line(stack):
    cases = [
        ('redis: {\n  port = "6379";\n};\n', ":2: redis.port: must be an integer"),
        ('job: {\n\n  max_delay_s = -1;\n};\n', ":3: job.max_delay_s: must be from 1"),
        ('delay: {\n  levels = [ "5s", "1s" ];\n};\n', ":2: delay.levels: levels must be strictly ascending"),
        ('delay: {\n  levels = [ "5 seconds" ];\n};\n', ":2: delay.levels: level \"5 seconds\""),
        ('delay: { partitions = 2;\n  partition_groups = ( [0] );\n};\n', ":2: delay.partition_groups: partition 1 is in no group"),
        ('log: { level = "loud"; };\n', ":1: log.level: must be one of"),
        ('nosuch: { a = 1; };\n', ":1: nosuch: unknown section"),
        ('http: { listen = "127.0.0.1:1" \n', ":2: syntax error"),
    ]
    for i, (text, expect) in enumerate(cases):
        path = write(stack, f"bad{i}.conf", text)
        p = delayqd("-c", path, "--check-config")
        assert p.returncode == 1 and expect in p.stderr, (text, p.stderr)


def test_bad_kafka_property_named(stack):
    path = write(stack, "prop.conf", 'kafka: { properties = ( "no.such.property=1" ); };\n')
    p = delayqd("-c", path, "--check-config")
    assert p.returncode == 1 and "no.such.property" in p.stderr, p.stderr


def test_values_that_cannot_work_fail_the_check_and_start_up(stack):
    # Each of these passed --check-config: an empty group id then crashed start-up, the listen
    # ports bound another port than the one logged (or a random one), and the Kafka clients
    # refused the properties only once delayqd was starting.
    cases = [
        ('kafka: {\n  group_id = "";\n};\n', ":2: kafka.group_id: must not be empty"),
        ('kafka: { brokers = ""; };\n', ":1: kafka.brokers: must not be empty"),
        ('http: { listen = "127.0.0.1:99999"; };\n', ":1: http.listen: port \"99999\" must be"),
        ('http: { listen = "127.0.0.1:65536"; };\n', ":1: http.listen: port \"65536\" must be"),
        ('http: { listen = "127.0.0.1:0"; };\n', ":1: http.listen: port \"0\" must be"),
        ('kafka: { properties = ( "acks=1" ); };\n', "`acks` must be set to `all`"),
        ('kafka: { properties = ( "message.max.bytes=8000000" ); };\n',
         "`fetch.max.bytes` must be >= `message.max.bytes`"),
    ]
    for i, (text, expect) in enumerate(cases):
        path = write(stack, f"unworkable{i}.conf", text)
        for args in (["--check-config"], []):
            p = run([DELAYQD, "-c", path, *args], check=False, timeout=30)
            assert p.returncode == 1 and expect in p.stderr, (text, args, p.returncode, p.stderr)


def test_missing_file(stack):
    p = delayqd("-c", os.path.join(stack.tmp, "absent.conf"))
    assert p.returncode == 1 and "cannot read" in p.stderr, p.stderr


def test_port_in_use_is_named(stack):
    # An address another process listens on stops start-up with a message naming it (and a
    # second delayqd on the same port is refused, not quietly given half the connections).
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    d = Delayqd(stack)
    first = Delayqd(stack).start()
    try:
        for taken in (port, first.port):
            d.port = taken
            d.write_config()
            p = run([DELAYQD, "-c", d.conf_path], check=False, timeout=60)
            assert p.returncode != 0, p
            assert f"cannot listen on 127.0.0.1:{taken}" in p.stdout + p.stderr, p
        assert first.add_ok(topic="orders", delay=60, body="still served")
    finally:
        holder.close()


def test_short_levels_start_with_the_default_longest_delay(stack):
    """Levels of at most 10 s and no job.max_delay_s: the default follows the levels (100,000
    hops down from 10 s) instead of making the config invalid; the longest delay it allows is
    accepted and one second more is refused with the limit named."""
    d = Delayqd(stack, levels=["1s", "5s", "10s"], extra={"max_delay_s": None}).start()
    d.add_ok(topic="orders", delay=1000000, body="in 11.6 days")
    status, doc = d.add(topic="orders", delay=1000001, body="too far")
    assert status == 400 and "at most 1000000 seconds" in doc["message"], (status, doc)


def test_the_annotated_config_states_each_integer_range(stack):
    """Each integer key of conf/delayq.conf has its range written beside it, the range delayqd
    enforces (asked of delayqd itself with a value beyond any range)."""
    conf = open(os.path.join(ROOT, "conf", "delayq.conf")).read().split("\n")
    path, checked, section, sub = os.path.join(tempfile.mkdtemp(), "r.conf"), 0, None, None
    for i, line in enumerate(conf):
        if re.match(r"^[a-z_]+: \{", line):
            section, sub = line.split(":")[0], None
        elif re.match(r"^\s+[a-z_]+ = \{", line):
            sub = line.split("=")[0].strip()
        elif re.match(r"^\s+\};", line) and sub:
            sub = None
        m = re.match(r"^\s+([a-z_]+) = -?\d+;", line)
        if not m or not section:
            continue
        key = m.group(1)
        inner = f"{sub} = {{ {key} = 1000000000000000; }};" if sub else f"{key} = 1000000000000000;"
        with open(path, "w") as f:
            f.write(f"{section}: {{ {inner} }};\n")
        p = run([DELAYQD, "-c", path, "--check-config"], check=False)
        r = re.search(r"from (-?\d+) to (-?\d+)", p.stderr)
        assert r, (key, p.stderr)
        comment = line
        for more in conf[i + 1:]:
            if not re.match(r"^\s{20,}#", more):
                break
            comment += more
        assert f"from {r.group(1)} to {r.group(2)}" in comment, (section, sub, key, r.groups())
        checked += 1
    assert checked >= 30, checked
