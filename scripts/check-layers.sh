#!/usr/bin/env bash
# Checks that the files of each crate form layers: no file imports another
# that imports it back, directly or around a longer cycle. A reader then
# reads a crate bottom-up, and a change to one file never reaches back into
# the files it builds on.
#
# A file's module path comes from its place under src/ (foo/mod.rs is
# `foo`, lib.rs and main.rs the crate's root). A file depends on another
# when it names a path into it: `use crate::a::b`, `super::x`, `self::x`,
# a child module by name (`gate::Gate`), in a `use` tree or in code. A
# name that a module only re-exports (`pub use inner::Thing`) counts as a
# dependency on the file that defines it, so a crate root that re-exports
# its modules' types does not join every module into one cycle, and the
# re-export itself is the module's face, not a use. Test
# modules (`#[cfg(test)] mod ... { }`) are left out: a test of a module may
# use what builds on it. `mod x;` alone is a declaration, not a use.
#
# Standard library only. Prints each cycle with the lines that close it;
# exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os
import re
import sys

CRATES = "crates"


def strip(text):
    """Blanks comments, strings and char literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^'\\\n])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code):
    """Blanks `#[cfg(test)] mod name { ... }` blocks, keeping line breaks."""
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pattern.search(code)
        if not m:
            return code
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[: m.start()] + "\n" * code.count("\n", m.start(), j) + code[j:]


def expand_tree(tree):
    """`a::{b, c::{d as e}}` -> [([a, b], b), ([a, c, d], e)]: each path a
    `use` tree names, with the name it binds."""
    s = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    out = []

    def parse(i, prefix):
        """Parses one tree at s[i:] under `prefix`; returns where it ends."""
        segs = []
        while True:
            m = re.match(r"[\w*@]+", s[i:])
            word = m.group(0) if m else ""
            i += len(word)
            if s.startswith("::{", i):
                i += 3
                while s[i] != "}":
                    i = parse(i, prefix + segs + [word])
                    if s[i] == ",":
                        i += 1
                return i + 1
            if s.startswith("::", i):
                segs.append(word)
                i += 2
                continue
            name, _, alias = word.partition("@")
            path = prefix + segs + ([name] if name != "self" else [])
            if path:
                out.append((path, alias or path[-1]))
            return i

    parse(0, [])
    return out


def use_statements(code):
    """Yields (line, tree, is_pub) for each `use` item."""
    for m in re.finditer(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", code):
        yield code.count("\n", 0, m.start()) + 1, m.group(2), bool(m.group(1))


class Crate:
    def __init__(self, root):
        self.root = root
        self.files = {}  # module path tuple -> file path
        for top, _, names in os.walk(root):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(top, name)
                rel = os.path.relpath(path, root)[:-3].split(os.sep)
                if rel[-1] == "mod" or (len(rel) == 1 and rel[0] in ("lib", "main")):
                    rel = rel[:-1]
                if rel and rel[0] == "bin":
                    continue
                self.files[tuple(rel)] = path
        self.code = {}
        for mod, path in self.files.items():
            with open(path, encoding="utf-8") as f:
                self.code[mod] = drop_test_modules(strip(f.read()))
        self.reexports = {mod: self.find_reexports(mod) for mod in self.files}

    def children(self, mod):
        return {m[-1] for m in self.files if len(m) == len(mod) + 1 and m[:-1] == mod}

    def absolute(self, mod, segs):
        """Path segments as written in `mod` -> absolute segments, or None
        for paths outside the crate."""
        if not segs:
            return None
        head = segs[0]
        if head == "crate":
            return list(segs[1:])
        if head in ("super", "self"):
            base = list(mod)
            rest = list(segs)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    if not base:
                        return None
                    base.pop()
                rest.pop(0)
            return base + rest
        if head in self.children(mod):
            return list(mod) + list(segs)
        return None

    def find_reexports(self, mod):
        out = {}
        for _, tree, is_pub in use_statements(self.code[mod]):
            if not is_pub:
                continue
            for p, name in expand_tree(tree):
                target = self.absolute(mod, p)
                if target is not None and name != "*":
                    out[name] = target
        return out

    def resolve(self, segs, seen=None):
        """Absolute segments -> the module that defines what they name."""
        seen = seen or set()
        best = ()
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in self.files:
                best = tuple(segs[:k])
                rest = segs[k:]
                break
        if rest:
            target = self.reexports.get(best, {}).get(rest[0])
            key = (best, rest[0])
            if target is not None and key not in seen:
                seen.add(key)
                return self.resolve(list(target) + list(rest[1:]), seen)
        return best

    def edges(self):
        """(from, to) -> first line of `from` that names `to`."""
        found = {}
        for mod, code in self.code.items():
            refs = []
            for line, tree, is_pub in use_statements(code):
                if is_pub:
                    continue
                for p, _ in expand_tree(tree):
                    refs.append((line, p))
            code_only = re.sub(r"(?m)^\s*(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", lambda m: "\n" * m.group(0).count("\n"), code)
            heads = {"crate", "super", "self"} | self.children(mod)
            for m in re.finditer(r"(?<![\w:])(\w+(?:::\w+)+)", code_only):
                segs = m.group(1).split("::")
                if segs[0] in heads:
                    refs.append((code_only.count("\n", 0, m.start()) + 1, segs))
            for line, segs in refs:
                target = self.absolute(mod, segs)
                if target is None:
                    continue
                to = self.resolve(target)
                if to != mod:
                    found.setdefault((mod, to), line)
        return found


def cycles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    graph = {n: [] for n in nodes}
    for a, b in edges:
        graph[a].append(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return out


failures = 0
for name in sorted(os.listdir(CRATES)):
    src = os.path.join(CRATES, name, "src")
    if not os.path.isdir(src):
        continue
    crate = Crate(src)
    edges = crate.edges()
    for comp in cycles(crate.files, edges):
        failures += 1
        members = set(comp)
        print(f"{name}: files that import each other:")
        for (a, b), line in sorted(edges.items()):
            if a in members and b in members:
                print(f"  {crate.files[a]}:{line} -> {crate.files[b]}")
if failures:
    print(f"{failures} cycle(s) among files; a file's dependencies must not reach back to it")
    sys.exit(1)
PY
