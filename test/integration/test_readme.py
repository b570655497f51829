"""The README's and docs/api.md's examples, run as written: every ```sh block of each that holds
a curl or kcat command is run against a delayqd started here for that document, and each command's output must have the
structure of the answer written under it there. An API change that breaks an example
fails this test, so neither document can drift from the product.

How a block is read:
  - A command may span lines (a trailing backslash, or a quoted string left open).
  - The comment lines after a command that start with `# {` hold its answer: one or more JSON
    values (kcat prints one per message), continued over the following `#` lines.
  - Commands that follow one another directly and end in one answer are alternatives giving
    that answer (the GET and POST forms of one request); each is checked against it.
  - A command followed by a blank line or the end of the block only has to succeed.

How an answer is compared: the same keys, lists of the same length, the same numbers,
booleans and nulls, and the same strings once every run of digits is taken as one digit (times,
offsets and counters vary). Numbers under keys that name a time or Kafka's placement of a
message vary and are compared by type. A UUID matches any UUID, and later commands get the
UUID the server gave in place of the README's.

How the README's addresses become the test's: localhost:9277 and 127.0.0.1:9277 become this
delayqd's port, 127.0.0.1:9092 the test broker, delay_topic_dlq this delayqd's dead-letter
topic, delay_topic_<level> its delay topics, and the business topic `orders` one of its own.

The links of the README and docs/*.md are checked too, without a server: each relative one leads
to a file, and to a heading of it, that exist, and every term of the glossary is linked to."""

import json
import os
import re
import shlex
import subprocess

from harness import ROOT, Delayqd

README = os.path.join(ROOT, "README.md")
API_DOC = os.path.join(ROOT, "docs", "api.md")
# The documents whose examples run, each against a delayqd of its own, and what each must keep
# showing (a rewrite that drops its examples fails too).
DOCS = [(README, ("jobs/add", "jobs/get", "kcat -b", " -C "), 2),
        (API_DOC, ("jobs/add", "jobs/add_batch", "jobs/get", "jobs/remove", "jobs/reschedule",
                   "jobs/pop", "schedules/", "api/dead", "kcat -b", " -P ", " -C "), 12)]
README_HTTP = ("localhost:9277", "127.0.0.1:9277")
README_BROKERS = "127.0.0.1:9092"
README_DLQ = "delay_topic_dlq"
README_DELAY_PREFIX = "delay_topic_"
README_TOPIC = "orders"
# Numbers that differ from run to run: a job's times, and where and when Kafka stored a message.
VARYING_KEYS = {"exec_time", "exec_time_ms", "created_ms", "delivered_ms", "at_ms", "next_at_ms",
                "updated_ms", "last_at_ms", "dead_ms",
                "partition", "offset", "ts", "broker"}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# A consumer waits for its messages: the README's are due within 10 s of their add.
COMMAND_TIMEOUT_S = 60
CLIENT = re.compile(r"(^|\|)\s*(curl|kcat)\s")


def sh_blocks(text):
    """The fenced ```sh blocks of text, each as its list of lines."""
    return [m.group(1).splitlines() for m in re.finditer(r"^```sh\n(.*?)^```", text, re.M | re.S)]


def complete(cmd):
    """Whether cmd is a whole shell command: no open quote, no trailing backslash."""
    if cmd.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(cmd)
    except ValueError:
        return False
    return True


def json_values(text, what):
    """Every JSON value in text, one after another (whitespace between them)."""
    dec, values, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return values
        try:
            v, i = dec.raw_decode(text, i)
        except ValueError as e:
            raise AssertionError(f"{what} is not JSON ({e}):\n{text}")
        values.append(v)


def steps(lines):
    """The steps of a block: [(commands, answer text or None)]."""
    out, group, cmd, comment = [], [], None, None

    def end_comment():
        nonlocal group, comment
        if comment is not None and comment.lstrip().startswith("{"):
            out.append((group, comment))
            group = []
        comment = None

    for line in lines:
        if cmd is not None:
            cmd += "\n" + line
            if complete(cmd):
                group.append(cmd)
                cmd = None
            continue
        s = line.strip()
        if s.startswith("#"):
            text = s[1:]
            comment = text if comment is None else comment + "\n" + text
            continue
        end_comment()
        if not s:
            out.extend(([c], None) for c in group)
            group = []
            continue
        cmd = line
        if complete(cmd):
            group.append(cmd)
            cmd = None
    assert cmd is None, f"unfinished command in the README: {cmd}"
    end_comment()
    out.extend(([c], None) for c in group)
    return out


def digits_as_one(s):
    return re.sub(r"\d+", "0", s)


def compare(want, got, path, uuids, key=None):
    """Asserts that got has the structure and fixed values of want; records UUID pairs."""
    where = f"{path}: README has {json.dumps(want)}, delayqd answered {json.dumps(got)}"
    if key in VARYING_KEYS and (isinstance(want, int) or want is None):
        assert type(got) is type(want), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(want) == set(got), where
        for k in want:
            compare(want[k], got[k], f"{path}.{k}", uuids, k)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(want) == len(got), where
        for i, (w, g) in enumerate(zip(want, got)):
            compare(w, g, f"{path}[{i}]", uuids)
    elif isinstance(want, str) and UUID.fullmatch(want):
        assert isinstance(got, str) and UUID.fullmatch(got), where
        uuids[want] = got
    elif isinstance(want, str):
        assert isinstance(got, str) and digits_as_one(want) == digits_as_one(got), where
    else:
        assert type(got) is type(want) and got == want, where


def matches(want, got):
    try:
        compare(want, got, "$", {})
        return True
    except AssertionError:
        return False


def compare_all(wants, gots, cmd, uuids):
    """One answer: in order. Several (messages of a consumer): each wanted one matches a
    different one received, in any order, as partitions interleave."""
    assert len(wants) == len(gots), \
        f"{cmd}\nREADME shows {len(wants)} values, got {len(gots)}: {gots}"
    if len(wants) == 1:
        compare(wants[0], gots[0], "$", uuids)
        return
    left = list(gots)
    for w in wants:
        hit = next((g for g in left if matches(w, g)), None)
        assert hit is not None, f"{cmd}\nnothing received matches {json.dumps(w)}\nreceived: {gots}"
        compare(w, hit, "$", uuids)
        left.remove(hit)


class Example:
    """The README's names, mapped onto one test delayqd."""

    def __init__(self, stack, d):
        self.stack, self.d = stack, d
        self.topic = f"{d.name}_{README_TOPIC}"
        self.uuids = {}

    def names(self, text):
        text = text.replace(README_DLQ, self.d.dlq)
        text = text.replace(README_DELAY_PREFIX, self.d.delay_topic(""))
        return re.sub(rf"\b{README_TOPIC}\b", self.topic, text)

    def command(self, cmd):
        for a in README_HTTP:
            cmd = cmd.replace(a, f"127.0.0.1:{self.d.port}")
        cmd = cmd.replace(README_BROKERS, self.stack.brokers)
        for readme_id, real_id in self.uuids.items():
            cmd = cmd.replace(readme_id, real_id)
        return self.names(cmd)

    def run(self, cmd):
        real = self.command(cmd)
        try:
            p = subprocess.run(["bash", "-c", real], capture_output=True, text=True,
                               timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"README command still running after {COMMAND_TIMEOUT_S} s "
                                 f"(waiting for what the README shows?): {real}")
        assert p.returncode == 0, f"README command exited {p.returncode}: {real}\n{p.stderr}"
        return p.stdout


def run_examples(stack, path, needed, at_least):
    with open(path) as f:
        blocks = [b for b in sh_blocks(f.read()) if any(CLIENT.search(line) for line in b)]
    d = Delayqd(stack).start().wait_groups_owned()
    ex = Example(stack, d)
    stack.ensure_topic(ex.topic)   # a business topic exists before its consumer reads it
    ran, checked = [], 0
    for block in blocks:
        for cmds, answer in steps(block):
            wants = None
            if answer:
                wants = json_values(ex.names(answer), f"{path}'s answer to {cmds[-1]}")
            for cmd in cmds:
                out = ex.run(cmd)
                ran.append(cmd)
                if wants is not None:
                    compare_all(wants, json_values(out, f"the output of {cmd}"), cmd, ex.uuids)
                    checked += 1
    d.stop()
    text = "\n".join(ran)
    for word in needed:
        assert word in text, f"no example of {path} runs {word!r}"
    assert checked >= at_least, f"only {checked} answers of {path} were checked"


def test_readme_examples_answer_as_written(stack):
    for path, needed, at_least in DOCS:
        run_examples(stack, path, needed, at_least)


def test_readme_checker_tells_a_changed_answer_from_a_varying_one(stack):
    """The comparison itself, on the API doc's own get answer: times and ids may differ, a
    renamed key, a changed state or code may not. Needs no server."""
    with open(API_DOC) as f:
        answers = [a for b in sh_blocks(f.read()) for cmds, a in steps(b)
                   if a and "jobs/get?job_id=order:42" in cmds[0]]
    assert answers, "docs/api.md shows no answer to the get of order:42"
    text = answers[0]
    want = json_values(text, "the README's get answer")
    varied = json_values(re.sub(r"1795\d+", lambda m: str(int(m.group()) + 12345), text), "varied")
    compare_all(want, varied, "get", {})
    for old, new in (('"state":"pending"', '"state":"waiting"'), ('"exec_time_ms"', '"due_ms"'),
                     ('"code":0', '"code":10004'), ('"delay":7', '"delay":"7"')):
        assert old in text, old
        changed = json_values(text.replace(old, new), "changed")
        try:
            compare_all(want, changed, "get", {})
        except AssertionError:
            continue
        raise AssertionError(f"the checker let {old} -> {new} pass")


# The pages whose links are checked, and the one whose term headings each need a link from another.
DOC_PAGES = [README] + sorted(os.path.join(ROOT, "docs", f)
                              for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
GLOSSARY = os.path.join(ROOT, "docs", "glossary.md")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\n\n)[\s\S])*?\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
LINK_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)


def prose(text):
    """text without its fenced blocks and code spans (each blanked, so lines keep their
    numbers): what is left is rendered as Markdown."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group())
    return CODE_SPAN.sub(blank, FENCE.sub(blank, text))


def anchors(text):
    """The anchors GitHub gives the headings of text: the heading's text as rendered (code
    marks, emphasis and link targets left out), lowercased, every character but letters,
    digits, '_', '-' and spaces removed, spaces made '-'; a repeat gets -1, -2, ... ; plus
    explicit <a id/name="..."> anchors."""
    found, seen = set(), {}
    heading = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)
    for m in heading.finditer(FENCE.sub("", text)):
        t = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", m.group(1))
        t = re.sub(r"<[^>]+>", "", t).replace("`", "")
        t = re.sub(r"[^\w\- ]", "", re.sub(r"(\*+|\b_+|_+\b)", "", t).strip().lower())
        a = t.replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        found.add(a if n == 0 else f"{a}-{n}")
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return found


def relative_links(text):
    """(line, target) of every relative link of text: inline links and images, reference
    definitions; not those in code."""
    text = prose(text)
    out = [(text.count("\n", 0, m.start()) + 1, m.group(2).strip("<>"))
           for m in LINK.finditer(text)]
    out += [(text.count("\n", 0, m.start()) + 1, m.group(1).strip("<>"))
            for m in LINK_DEF.finditer(text)]
    return [(line, t) for line, t in out
            if t and not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|//", t)]


def test_docs_links_resolve(stack):
    """Every relative link of the README and of docs/*.md names a file that exists and, with a
    #anchor into a Markdown file, a heading of that file; every term the glossary defines (its
    headings below the title) is linked from some other page. Needs no server."""
    texts = {}

    def read(p):
        if p not in texts:
            with open(p, encoding="utf-8") as f:
                texts[p] = f.read()
        return texts[p]

    broken, glossary_links = [], set()
    for page in DOC_PAGES:
        for line, target in relative_links(read(page)):
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            where = f"{os.path.relpath(page, ROOT)}:{line}: ({target})"
            if not os.path.exists(dest):
                broken.append(f"{where} no file {os.path.relpath(dest, ROOT)}")
                continue
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                if anchor not in anchors(read(dest)):
                    broken.append(f"{where} no heading #{anchor} in {os.path.relpath(dest, ROOT)}")
                elif dest == GLOSSARY and page != GLOSSARY:
                    glossary_links.add(anchor)
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)
    terms = anchors(re.sub(r"^# .*$", "", read(GLOSSARY), flags=re.M))
    assert terms, "docs/glossary.md defines no term as a heading"
    unlinked = sorted(terms - glossary_links)
    assert not unlinked, f"glossary terms no other page links to: {unlinked}"
