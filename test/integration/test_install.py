"""make install and its systemd unit: every file in place, the installed binary checks the
installed config, a reinstall keeps an operator's config, uninstall removes the rest."""

import os
import shutil
import stat
import tempfile

import pytest

from harness import DELAYQD, ROOT, run


def make(*args):
    build = os.path.relpath(os.path.dirname(DELAYQD), ROOT)
    return run(["make", "-s", "-C", ROOT, f"BUILD={build}",
                f"SANITIZE={os.environ.get('SANITIZE', '')}", *args], timeout=300)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_install_into_destdir_and_uninstall(stack):
    dest = tempfile.mkdtemp(dir=stack.tmp)
    make("install", f"DESTDIR={dest}", "PREFIX=/usr")
    binary, claims = f"{dest}/usr/bin/delayqd", f"{dest}/usr/bin/delayq-claims"
    conf, unit = f"{dest}/etc/delayq/delayq.conf", f"{dest}/usr/lib/systemd/system/delayq.service"
    assert mode(binary) == 0o755 and mode(claims) == 0o755, (oct(mode(binary)), oct(mode(claims)))
    assert mode(conf) == 0o644 and mode(unit) == 0o644
    p = run([binary, "-c", conf, "--check-config"], check=False)
    assert p.returncode == 0 and p.stdout.strip() == f"{conf}: ok", p
    # The claims script reads the installed config unless told otherwise.
    p = run([claims, "list"], check=False)
    assert p.returncode == 1 and "'/etc/delayq/delayq.conf'" in p.stderr, p
    text = open(unit).read()
    for line in ("ExecStart=/usr/bin/delayqd -c /etc/delayq/delayq.conf",
                 "ExecStartPre=/usr/bin/delayqd -c /etc/delayq/delayq.conf --check-config",
                 "KillSignal=SIGTERM", "Restart=on-failure", "DynamicUser=yes",
                 "NoNewPrivileges=yes", "ProtectSystem=strict"):
        assert line + "\n" in text, line
    assert "@" not in text.replace("@system-service", ""), text   # every placeholder filled
    # An operator's config survives a reinstall; uninstall leaves it and removes the rest.
    with open(conf, "a") as f:
        f.write("# edited\n")
    make("install", f"DESTDIR={dest}", "PREFIX=/usr")
    assert open(conf).read().endswith("# edited\n")
    make("uninstall", f"DESTDIR={dest}", "PREFIX=/usr")
    left = [os.path.relpath(os.path.join(d, f), dest) for d, _, fs in os.walk(dest) for f in fs]
    assert left == ["etc/delayq/delayq.conf"], left


def test_installed_unit_verifies(stack):
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze here; the unit's text is checked by the test above")
    prefix = tempfile.mkdtemp(dir=stack.tmp)   # no DESTDIR: the unit names real paths
    make("install", f"PREFIX={prefix}")
    p = run(["systemd-analyze", "verify", f"{prefix}/lib/systemd/system/delayq.service"],
            check=False)
    assert p.returncode == 0 and not p.stderr.strip(), p
