"""The source tree's layers: src/<folder>/ and include/<folder>/ mirror each other, every include
points down (or within its own folder), nothing includes in a circle, the pure layers include
no network library, and no source file grows past 800 lines. Reads the tree; starts nothing."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Bottom up. Folders on one rank know nothing of each other.
RANKS = {"lib": 0, "core": 1, "redis": 2, "kafka": 2, "callback": 3, "pull": 3, "delivery": 4,
         "intake": 4, "dead": 5, "schedules": 5, "http": 6, "": 7}
NETWORK = re.compile(r"#include <(hiredis|librdkafka|microhttpd|curl)/?")
PURE = ["lib", "core"]
# Sources that are a second file of another module and share its header (and an inside header).
PARTS = {
    "redis/master": "redis/conn",
    "redis/store_lua": "redis/store",
    "redis/store_chunk": "redis/store",
    "redis/store_add": "redis/store",
    "redis/store_claim": "redis/store",
    "intake/flights": "intake/intake",
    "intake/requests": "intake/intake",
    "intake/topics": "intake/intake",
    "core/apitopic": "core/api",
    "delivery/records": "delivery/forwarder",
    "delivery/send": "delivery/forwarder",
    "delivery/ready": "delivery/forwarder",
    "delivery/target": "delivery/forwarder",
    "delivery/calls": "delivery/forwarder",
    "http/routes": "http/http",
    "schedules/schedroutes": "schedules/schedules",
    "pull/pullq_lua": "pull/pullq",
    "pull/registry": "pull/pullq",
    "pull/browse": "pull/pullq",
    "pull/sweep": "pull/pull",
    "pull/parked": "pull/pull",
}
MAX_LINES = 800


def files():
    """{path relative to ROOT: text} of every .c and .h under src/ and include/."""
    out = {}
    for top in ("src", "include"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith((".c", ".h")):
                    path = os.path.join(dirpath, name)
                    with open(path) as f:
                        out[os.path.relpath(path, ROOT)] = f.read()
    return out


def folder(path):
    parts = path.split(os.sep)
    return parts[1] if len(parts) > 2 else ""


def includes(text):
    return re.findall(r'^#include "([^"]+)"', text, re.M)


def test_every_folder_is_a_layer_and_include_mirrors_src():
    tree = files()
    for path in tree:
        assert folder(path) in RANKS, f"{path}: its folder is no layer of {sorted(RANKS)}"
    sources = {os.path.splitext(p)[0].split(os.sep, 1)[1] for p in tree if p.endswith(".c")}
    for header in (p for p in tree if p.endswith(".h")):
        assert folder(header), f"{header}: headers live in a layer's folder"
    for src in sources:
        if src != "main" and src not in PARTS:
            assert os.path.join("include", src + ".h") in tree, f"src/{src}.c has no include/{src}.h"


def test_includes_point_down_and_name_their_folder():
    tree = files()
    wrong = []
    for path, text in tree.items():
        here = folder(path)
        for inc in includes(text):
            if inc.startswith("unit") or "/" not in inc:
                wrong.append(f"{path}: #include \"{inc}\" names no folder")
                continue
            there = inc.split("/")[0]
            if os.path.join("include", inc) not in tree:
                wrong.append(f"{path}: #include \"{inc}\" is not under include/")
            elif there != here and RANKS[there] >= RANKS[here]:
                wrong.append(f"{path} ({here}) includes {inc} ({there}): not a lower layer")
    assert not wrong, "\n".join(wrong)


def test_no_circle_of_includes():
    tree = files()
    graph = {p: [os.path.join("include", i) for i in includes(t) if os.path.join("include", i) in tree]
             for p, t in tree.items()}
    state = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                pytest.fail("circle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            if not state.get(nxt):
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in graph:
        if not state.get(node):
            visit(node, [node])


def test_pure_layers_include_no_network_library():
    for path, text in files().items():
        if folder(path) in PURE:
            assert not NETWORK.search(text), f"{path} includes a network library"


def test_no_source_file_over_800_lines():
    long = sorted((text.count("\n"), path) for path, text in files().items()
                  if text.count("\n") > MAX_LINES)
    assert not long, "over 800 lines: " + ", ".join(f"{p} ({n})" for n, p in long)


def test_every_source_file_is_described_in_the_architecture_page():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        page = f.read()
    missing = sorted(p for p in files() if p.endswith(".c") and
                     f"`{os.path.basename(p)}`" not in page and p != os.path.join("src", "main.c"))
    assert not missing, "not in docs/architecture.md: " + ", ".join(missing)


def test_answers_are_json_text_only_at_the_edge():
    """Modules answer a struct answer; only the HTTP layer renders the API's JSON text, and no
    module reads an answer back from text or decides by a message's words."""
    renders = sorted(p for p, text in files().items() if "api_response(" in text and
                     folder(p) != "http" and not p.endswith(os.path.join("core", "apijson.c")) and
                     not p.endswith(os.path.join("core", "apijson.h")))
    assert not renders, "renders an answer as JSON text below the HTTP layer: " + ", ".join(renders)
    reads = sorted(p for p, text in files().items()
                   if re.search(r"json_loads\(\s*response|strcmp\(\s*msg\s*,", text))
    assert not reads, "reads an answer back from its text: " + ", ".join(reads)


def test_the_dispatcher_knows_targets_only_through_their_interface():
    """A due job's target is taken through struct target: the forwarder and target.c call no
    target's own functions, so a new target is one new module."""
    own = re.compile(r"\b(fw_deliver_job|fw_deliver_direct|fw_ready_job|fw_ready_direct|"
                     r"callout_job|callout_direct)\(")
    for name in ("forwarder.c", "target.c"):
        path = os.path.join("src", "delivery", name)
        calls = own.findall(files()[path])
        assert not calls, f"{path} calls a target's own functions: {sorted(set(calls))}"
