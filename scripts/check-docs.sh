#!/usr/bin/env bash
# Checks that the documents resolve inside the repository:
#
# 1. Every relative link in README.md and docs/**/*.md (and the other
#    Markdown files of the repository) names a file or directory that
#    exists, and a link's #anchor names a heading of the file it points
#    to. Every backticked repository path in them exists: a path that
#    starts at the repository's root (`crates/...`, `docs/...`) must exist
#    as written (`{a,b}` and `*` expanded); a shorter one (`pg/session.rs`,
#    `db.rs`) must be the end of some file's path. Web links, absolute
#    paths (/proc/stat) and paths under ignored output directories
#    (results/, target/) are not checked.
# 2. No file under crates/, scripts/, docs/, fuzz/, scenarios/ or .ci/,
#    nor README.md, cites an issue ("issue 5 §2", "the issue asks") or a
#    document outside the repository ("../shared/...", DESIGN.md): a
#    reader of the repository has neither. Cite the papers by title and
#    section, and the repository's own documents by path.
# 3. Each run id in docs/BENCHMARKS.md ("Run S2, ...", a heading's
#    "(run S2)", a row of a table whose first column is the run) is
#    defined in one section only, and by one "Run X, ..." sentence at
#    most, so that a run id names one experiment. References ("as in run
#    S2") are not definitions and may appear anywhere.
#
# Standard library only. Prints file:line for each failure; exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import fnmatch
import os
import re
import sys
from collections import defaultdict

ROOT = "."
SKIP_DIRS = {".git", "target", "results", "out", "corpus", "artifacts", "coverage", "node_modules"}
SELF = os.path.join("scripts", "check-docs.sh")
failures = []


def fail(path, line, message):
    failures.append(f"{path}:{line}: {message}")


def walk():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for f in sorted(files):
            yield os.path.normpath(os.path.join(top, f))


ALL = list(walk())
TOP = {p.split(os.sep)[0] for p in ALL}
IGNORED_TOP = {"results", "target", "out"}


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def blank_fences(text):
    """The text with fenced code blocks blanked (line numbers kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def slugs(path):
    """GitHub's anchors for the headings of a Markdown file."""
    seen, result = defaultdict(int), set()
    for line in blank_fences(open(path, encoding="utf-8").read()).split("\n"):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen[s]
        seen[s] += 1
        result.add(s if n == 0 else f"{s}-{n}")
    return result


def expand(pattern):
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [x for alt in m.group(1).split(",") for x in expand(pattern[: m.start()] + alt + pattern[m.end() :])]


def exists_rooted(path):
    path = path.rstrip("/")
    if any(c in path for c in "*?["):
        return any(fnmatch.fnmatch(p, path) or fnmatch.fnmatch(p, path + "/*") for p in ALL)
    return os.path.exists(path)


def exists_anywhere(token, doc_dir):
    if os.path.exists(os.path.join(doc_dir, token)):
        return True
    tail = token.rstrip("/")
    patterns = [tail, "*/" + tail]
    if token.endswith("/"):
        patterns = [tail + "/*", "*/" + tail + "/*"]
    return any(fnmatch.fnmatch(p, pat) for p in ALL for pat in patterns)


LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"`([^`\n]+)`")
FILE_LIKE = re.compile(r"^[\w.{}*,/-]+$")
EXT = re.compile(r"\.(rs|md|toml|sh|py|txt)$")


def check_markdown(doc):
    text = blank_fences(open(doc, encoding="utf-8").read())
    doc_dir = os.path.dirname(doc)
    for m in LINK.finditer(text):
        target = m.group(1)
        line = line_of(text, m.start())
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(doc_dir, path)) if path else doc
        if path and not os.path.exists(resolved):
            fail(doc, line, f"link to {target}: {resolved} does not exist")
            continue
        if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
            if anchor not in slugs(resolved):
                fail(doc, line, f"link to {target}: no heading with anchor #{anchor} in {resolved}")
    for m in CODE.finditer(text):
        token = m.group(1).strip()
        token = re.sub(r"(::\w+)+$", "", token)  # path::function
        token = re.sub(r":\d+(-\d+)?$", "", token)  # path:line
        if not FILE_LIKE.match(token) or token.startswith("/") or "<" in token:
            continue
        line = line_of(text, m.start())
        first = token.split("/")[0]
        if "/" in token and first in TOP and first not in IGNORED_TOP:
            missing = [p for p in expand(token) if not exists_rooted(p)]
            for p in missing:
                fail(doc, line, f"`{token}`: {p} does not exist")
        elif first in IGNORED_TOP:
            continue
        elif EXT.search(token) or token.endswith("/"):
            for p in expand(token):
                if not exists_anywhere(p, doc_dir):
                    fail(doc, line, f"`{token}`: no file in the repository ends in {p}")


CITATIONS = [
    (re.compile(r"\bissues?\s*#?\d+\b(?!\s*(?:I/Os?|reads?|writes?|requests?|accesses|jobs?|commands?)\b)", re.I),
     "cites an issue"),
    (re.compile(r"\bissue\s*,?\s*§", re.I), "cites an issue's section"),
    (re.compile(r"\bthe issue\b|\(issue[:,]|\bissue:\s", re.I), "cites an issue"),
    (re.compile(r"\.\./shared\b|\bshared/(?:DESIGN|papers)\b|\bshared documents\b", re.I),
     "cites a document outside the repository"),
]
if not any(os.path.basename(p) == "DESIGN.md" for p in ALL):
    CITATIONS.append((re.compile(r"\bDESIGN\.md\b"), "cites DESIGN.md, which is not in the repository"))
TEXT_EXT = (".rs", ".md", ".sh", ".py", ".toml", ".yml", ".yaml", ".txt")


def check_citations():
    roots = ("crates", "scripts", "docs", "fuzz", "scenarios", ".ci")
    for p in ALL:
        top = p.split(os.sep)[0]
        if p == SELF or not (p == "README.md" or top in roots):
            continue
        if not (p.endswith(TEXT_EXT) or os.path.dirname(p) == ".ci"):
            continue
        try:
            lines = open(p, encoding="utf-8").read().split("\n")
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(lines, 1):
            for pattern, what in CITATIONS:
                m = pattern.search(line)
                if m:
                    fail(p, i, f"{what} ({m.group(0).strip()!r}): cite the repository's documents or the papers instead")


RUN_ID = r"[A-Z][A-Z0-9]*(?![\w/-])"
RUN_LIST = RUN_ID + r"(?:(?:,\s*|,?\s+and\s+)" + RUN_ID + r")*"


def check_run_ids(path):
    """A run is defined by a heading's "(run X)" or "(runs X, Y)", a
    "(run X)" after a command, a sentence "Run X, ...", "Run X (...)" or
    "Run X: ...", or a row "| X: ...", "| X, ..." or "| X (...)" of a table
    whose first column is the run. Each id may be defined in one section
    only, and by one such sentence at most."""
    if not os.path.exists(path):
        return
    text = blank_fences(open(path, encoding="utf-8").read())
    section, run_table, previous = None, False, ""
    places = defaultdict(list)  # id -> [(line, section, kind)]
    for i, line in enumerate(text.split("\n"), 1):
        if line.startswith("|") and not previous.startswith("|"):
            run_table = re.match(r"\|\s*run\b", line) is not None  # a table whose first column is the run
        previous = line
        h = re.match(r"#{1,6}\s+(.*)", line)
        if h:
            section = h.group(1)
            for m in re.finditer(r"\(runs? (" + RUN_LIST + r")(?=[),;])", line):
                for rid in re.findall(RUN_ID, m.group(1)):
                    places[rid].append((i, section, "heading"))
            continue
        for m in re.finditer(r"\(run (" + RUN_ID + r")\)", line):
            places[m.group(1)].append((i, section, "label"))
        for m in re.finditer(r"\bRuns? (" + RUN_LIST + r")(?=,|:| \()", line):
            for rid in re.findall(RUN_ID, m.group(1)):
                places[rid].append((i, section, "sentence"))
        t = re.match(r"\|\s*(" + RUN_ID + r")(?=:|,| \()", line) if run_table else None
        if t:
            places[t.group(1)].append((i, section, "table"))
    for rid, where in sorted(places.items()):
        sections = {s for _, s, _ in where}
        sentences = [w for w in where if w[2] == "sentence"]
        if len(sections) > 1 or len(sentences) > 1:
            lines = ", ".join(str(l) for l, _, _ in where)
            fail(path, where[-1][0], f"run id {rid} is defined more than once (lines {lines}): give each run its own id")


docs = ["README.md"] + [p for p in ALL if p.endswith(".md") and p != "README.md"]
for doc in docs:
    if os.path.exists(doc):
        check_markdown(doc)
check_citations()
check_run_ids(os.path.join("docs", "BENCHMARKS.md"))

for f in failures:
    print(f)
if failures:
    print(f"check-docs: {len(failures)} problem(s)")
    sys.exit(1)
print(f"check-docs: {len(docs)} Markdown files resolve; no citation outside the repository; run ids unique")
PY
