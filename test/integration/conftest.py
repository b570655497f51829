"""pytest glue for the integration tests: one stack (Redis + Kafka, harness.Stack) per process,
that is per xdist worker; every delayqd a test started is stopped after it and its log read for
sanitizer findings; the summary line scripts/test.sh reads."""
import os
import shutil
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

_dir = None          # this process's stack dir: its servers' and every delayqd's logs and configs
_failed = False


def _interrupt(*_):
    raise KeyboardInterrupt   # pytest then tears the fixtures down: no broker is left running


@pytest.fixture(scope="session")
def stack():
    global _dir
    signal.signal(signal.SIGTERM, _interrupt)
    s = harness.Stack()
    _dir = s.tmp
    try:
        s.start()
        yield s
    finally:
        harness.stop_all()
        s.stop()
        if not _failed:
            shutil.rmtree(s.tmp, ignore_errors=True)


@pytest.fixture(autouse=True)
def _each_test():
    yield
    harness.stop_all()
    reports = harness.sanitizer_reports()
    if reports:   # an error at teardown: the test counts as failed
        pytest.fail("sanitizer report in a delayqd log:\n" + "\n".join(reports), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    global _failed
    report = yield
    if report.failed:
        _failed = True
        if _dir:
            report.sections.append(("delayq", f"logs and configs kept in {_dir}"))
    return report


def pytest_terminal_summary(terminalreporter):
    """'integration: N passed, N failed[, N skipped]': a test failed in its call or its
    teardown (sanitizer findings) counts once, as failed."""
    st = terminalreporter.stats
    bad = {r.nodeid for r in st.get("failed", []) + st.get("error", [])}
    passed = {r.nodeid for r in st.get("passed", []) if r.when == "call"} - bad
    skipped = {r.nodeid for r in st.get("skipped", [])}
    terminalreporter.write_line(f"integration: {len(passed)} passed, {len(bad)} failed"
                                + (f", {len(skipped)} skipped" if skipped else ""))
