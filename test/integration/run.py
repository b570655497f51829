#!/usr/bin/env python3
"""Runs the integration tests against a Redis and a Kafka started here, on free ports in a temp
dir, stopped on exit. usage: run.py [-k SUBSTRING]... Ends with 'N passed, N failed'."""

import importlib
import inspect
import os
import shutil
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MODULES = ["test_config", "test_install", "test_api", "test_batch", "test_reschedule", "test_readme", "test_http_hardening",
           "test_delivery", "test_faults", "test_http_waits", "test_security", "test_instances", "test_redis_ha",
           "test_redis_cluster", "test_stats", "test_pull", "test_compat",
           "test_callbacks", "test_schedules", "test_dead", "test_console"]


def collect(filters):
    tests = []
    for name in MODULES:
        mod = importlib.import_module(name)
        for fname, fn in inspect.getmembers(mod, inspect.isfunction):
            if fname.startswith("test_") and fn.__module__ == name:
                full = f"{name}.{fname}"
                if not filters or any(f in full for f in filters):
                    tests.append((inspect.getsourcelines(fn)[1], name, full, fn))
    tests.sort(key=lambda t: (MODULES.index(t[1]), t[0]))
    return [(full, fn) for _, _, full, fn in tests]


def main(argv):
    filters = [argv[i + 1] for i, a in enumerate(argv) if a == "-k" and i + 1 < len(argv)]
    tests = collect(filters)
    stack = harness.Stack()
    passed = failed = skipped = 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        t0 = time.time()
        stack.start()
        print(f"stack up in {time.time() - t0:.1f}s: redis :{stack.redis_port}, "
              f"kafka {stack.kafka_version} {stack.brokers}, dir {stack.tmp}", flush=True)
        for full, fn in tests:
            t0 = time.time()
            try:
                try:
                    fn(stack)
                finally:
                    harness.stop_all()
                reports = harness.sanitizer_reports()
                assert not reports, "sanitizer report in a delayqd log:\n" + "\n".join(reports)
                passed += 1
                print(f"PASS {full} ({time.time() - t0:.1f}s)", flush=True)
            except harness.Skip as e:
                skipped += 1
                print(f"SKIP {full}: {e}", flush=True)
            except Exception:
                failed += 1
                print(f"FAIL {full} ({time.time() - t0:.1f}s)\n{traceback.format_exc()}", flush=True)
            finally:
                harness.stop_all()
    finally:
        harness.stop_all()
        stack.stop()
        if failed == 0:
            shutil.rmtree(stack.tmp, ignore_errors=True)
        else:
            print(f"logs kept in {stack.tmp}")
    print(f"integration: {passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
