#!/usr/bin/env python3
"""Import circles in the library's sources.

For each crate (by default the two of the library, crates/kvtier/src and
crates/kvtier-capi/src), follows the `use crate::...`, `use super::...` and
`use self::...` declarations of every file under its src/ (inline modules
included), resolves
each imported name to the file that defines it (through the re-exports and
imports of the module it names: `use super::Policy` in primary/lru.rs
reaches primary/policy.rs when primary/mod.rs re-exports it from there),
and reports:

  * circles among sibling modules: under each module, its child modules
    (each with everything below it) form a graph, A -> B when a file in A
    imports from a file in B; every strongly connected part of more than
    one child is a circle. Two files importing from each other are the
    shortest case; the crate's top-level modules are siblings too.
  * upward imports: each crate's top-level modules are ranked in layers
    (LAYERS below, lowest first); a production import from a module to
    one in a higher layer is reported, and so is a top-level module the
    table does not rank (a new module takes its place there first).
  * with --parents, also parents and children importing from each other
    (a child reading its parent's private items is how Rust modules work,
    so these are not counted by default).

Edges that only test code makes (`#[cfg(test)]` modules, inline or in
files of their own) are kept apart: a circle that needs one of them is
reported as a test-only circle.

Exit status: 0 when no production circle and no upward import is found, 1 otherwise (so the
script can guard a build); --quiet prints only the circles.

    tools/check-imports.py [--src DIR]... [--parents] [--edges] [--quiet]
"""

import argparse
import os
import re
import signal
import sys
from collections import defaultdict


def strip_comments_and_strings(text):
    """Blank out comments, string and char literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 10])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * m.end())
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def split_top(s, sep=","):
    """Split at `sep` outside braces."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_use_tree(tree, prefix=()):
    """`a::{b, c::{d as e}}` -> [(path, alias)] with '*' for globs."""
    tree = tree.strip()
    results = []
    brace = tree.find("{")
    if brace >= 0 and tree.endswith("}"):
        head = tree[:brace].rstrip(":").strip()
        head_parts = tuple(p for p in head.split("::") if p) if head else ()
        for sub in split_top(tree[brace + 1:-1]):
            results.extend(expand_use_tree(sub, prefix + head_parts))
        return results
    alias = None
    m = re.match(r"^(.*?)\s+as\s+(\w+)$", tree)
    if m:
        tree, alias = m.group(1).strip(), m.group(2)
    parts = tuple(p.strip() for p in tree.split("::") if p.strip())
    path = prefix + parts
    if not path:
        return results
    if path[-1] == "self":
        path = path[:-1]
        if not path:
            return results
    name = alias or path[-1]
    results.append((path, name))
    return results


class Module:
    def __init__(self, path, file, test, inline):
        self.path = path          # tuple, () for the crate root
        self.file = file          # the file holding the module's items
        self.test = test          # only compiled for tests
        self.inline = inline      # declared with a body inside `file`
        self.children = set()     # names of child modules
        self.uses = []            # (abs_path, name, line, is_test)
        self.globs = []           # (abs_path, line, is_test)
        self.refs = []            # paths written in code: (abs_path, line, is_test)


def module_file(src, path):
    base = os.path.join(src, *path) if path else src
    if not path:
        return os.path.join(src, "lib.rs")
    for cand in (base + ".rs", os.path.join(base, "mod.rs")):
        if os.path.exists(cand):
            return cand
    return None


def child_dir(src, path, file):
    """Where a module's file-children live."""
    if file.endswith("mod.rs") or file.endswith("lib.rs"):
        return os.path.dirname(file)
    return os.path.join(src, *path)


USE_RE = re.compile(r"(?<![\w:])use\s+([^;]+);", re.S)
PATH_RE = re.compile(r"(?<![\w:$])((?:crate|super|self)(?:::(?:super|\w+))+)")
VIS_RE = re.compile(r"pub(?:\s*\([^)]*\))?\s*$")


def starts_item(text, start):
    """Whether the `use` at `start` begins a declaration (not `x.use`)."""
    before = text[:start].rstrip()
    m = VIS_RE.search(before)
    if m:
        before = before[:m.start()].rstrip()
    return not before or before[-1] in ";{}]"
MOD_RE = re.compile(r"(#\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")


PATH_ATTR_RE = re.compile(
    r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;')


def parse_file(src, modules, path, file, test):
    raw = open(file, encoding="utf-8").read()
    # The `#[path]` of each `mod x;` (blanked with the strings below).
    path_attrs = {m.group(2): m.group(1) for m in PATH_ATTR_RE.finditer(raw)}
    text = strip_comments_and_strings(raw)
    mod = modules[path]

    # Find inline modules (name, body start, body end) and file modules.
    spans = []  # (start, end, path, test)
    for m in MOD_RE.finditer(text):
        attrs = m.group(0)
        name, kind = m.group(2), m.group(3)
        is_test = "cfg(test)" in attrs.replace(" ", "")
        start = m.start(2)
        # The module path at this point: the innermost enclosing inline span.
        outer_path, outer_test = path, test
        for s, e, p, t in spans:
            if s <= start < e:
                outer_path, outer_test = p, t
        child = outer_path + (name,)
        child_test = outer_test or is_test
        modules[outer_path].children.add(name)
        if kind == "{":
            depth, j = 1, m.end()
            while j < len(text) and depth:
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                j += 1
            spans.append((m.end(), j, child, child_test))
            modules[child] = Module(child, file, child_test, True)
        else:
            if outer_path != path:
                continue  # `mod x;` inside an inline module: not used here
            cdir = child_dir(src, path, file)
            cfile = None
            # `#[path = "x.rs"]`: beside the declaring file.
            at = path_attrs.get(name)
            named = [os.path.join(os.path.dirname(file), at)] if at else []
            for cand in named + [os.path.join(cdir, name + ".rs"),
                                 os.path.join(cdir, name, "mod.rs")]:
                if os.path.exists(cand):
                    cfile = cand
                    break
            if cfile is None:
                continue
            modules[child] = Module(child, cfile, child_test, False)
            parse_file(src, modules, child, cfile, child_test)

    def where(start):
        here, here_test = path, test
        for s, e, p, t in spans:
            if s <= start < e and len(p) >= len(here):
                here, here_test = p, t
        return here, here_test, text.count("\n", 0, start) + 1

    use_spans = []
    for m in USE_RE.finditer(text):
        if not starts_item(text, m.start()):
            continue
        use_spans.append((m.start(), m.end()))
        here, here_test, line = where(m.start(1))
        tree = " ".join(m.group(1).split())
        for rel, name in expand_use_tree(tree):
            absolute = resolve_prefix(here, rel, modules)
            if absolute is None:
                continue
            target = modules[here]
            if rel[-1] == "*":
                target.globs.append((absolute[:-1], line, here_test))
            else:
                target.uses.append((absolute, name, line, here_test))

    # Paths written out in code (`super::lru::LruPolicy` in a type, a
    # `crate::fallible::reserve(..)` call): references as much as imports.
    for m in PATH_RE.finditer(text):
        if any(s <= m.start() < e for s, e in use_spans):
            continue
        if re.search(r"\bin\s*$", text[max(0, m.start() - 8):m.start()]):
            continue  # pub(in crate::x)
        here, here_test, line = where(m.start())
        rel = tuple(m.group(1).split("::"))
        absolute = resolve_prefix(here, rel, modules)
        if absolute is not None:
            modules[here].refs.append((absolute, line, here_test))


def resolve_prefix(here, rel, modules):
    """Make a use path absolute; None for paths outside the crate."""
    if here in modules and rel[0] in modules[here].children and len(rel) > 1:
        return here + rel  # a child module, named without `self::`
    if rel[0] == "crate":
        return rel[1:]
    if rel[0] in ("super", "self"):
        cur = list(here)
        i = 0
        while i < len(rel) and rel[i] in ("super", "self"):
            if rel[i] == "super":
                if not cur:
                    return None
                cur.pop()
            i += 1
        return tuple(cur) + rel[i:]
    return None  # std, external crates, or names relative to the module


class Graph:
    def __init__(self, modules):
        self.modules = modules
        # name -> absolute path, per module, from its own use declarations
        self.names = {}
        for p, m in modules.items():
            d = {}
            for absolute, name, _line, _t in m.uses:
                d.setdefault(name, absolute)
            self.names[p] = d

    def resolve(self, absolute, seen=None):
        """The module defining what `absolute` names (following re-exports)."""
        seen = seen or set()
        if absolute in seen:
            return None
        seen.add(absolute)
        if absolute in self.modules:
            return absolute
        # Longest prefix that is a module; the rest names an item in it.
        for k in range(len(absolute) - 1, -1, -1):
            prefix = absolute[:k]
            if prefix in self.modules:
                name = absolute[k]
                rest = absolute[k + 1:]
                via = self.names[prefix].get(name)
                if via is not None and via != absolute:
                    got = self.resolve(via + rest, seen)
                    if got is not None:
                        return got
                if rest and name in self.modules[prefix].children:
                    return prefix + (name,)
                return prefix
        return None

    def file_module(self, path):
        """The module whose file holds `path` (inline modules fold into it)."""
        while path and self.modules[path].inline:
            path = path[:-1]
        return path

    def edges(self):
        """(from_module, to_module, file, line, is_test), files only."""
        out = []
        for p, m in self.modules.items():
            src = self.file_module(p)
            for absolute, _name, line, t in m.uses:
                dst = self.resolve(absolute)
                if dst is None:
                    continue
                dst = self.file_module(dst)
                if dst != src:
                    out.append((src, dst, m.file, line, t))
            for absolute, line, t in m.globs + m.refs:
                dst = self.resolve(absolute)
                if dst is None:
                    continue
                dst = self.file_module(dst)
                if dst != src:
                    out.append((src, dst, m.file, line, t))
        return out


# Each crate's top-level modules, lowest layer first.  A module may import
# from its own layer and the layers below it; the crate root (lib.rs) sits
# above every layer.  Within a layer, only circles are forbidden.
LAYERS = {
    "kvtier": [
        # vocabulary: errors, keys, requests, numbers, events
        ["error", "store_report", "fallible", "key", "stats", "histogram",
         "logging", "request", "serde_forms", "events"],
        # building blocks below the manager
        ["metrics", "region"],
        ["primary"],
        # the manager and the secondary-tier trait
        ["tiering"],
        # the tiers built on that trait
        ["tiers"],
        # what assembles or serves a whole manager
        ["config", "catalogue", "serve"],
        # the node server, built on a whole manager
        ["server"],
    ],
    "kvtier-capi": [
        ["version", "status"],
        ["boundary"],
        ["growth", "key", "log"],
        ["dialect"],
        ["store_out", "region", "reclaim"],
        ["primary"],
        ["tier"],
        ["manager"],
        ["handles", "config", "fs", "pins", "redis", "requests", "server"],
        ["observe", "health"],
        ["events", "report"],
    ],
}


def upward_imports(crate, modules, edges):
    """(from, to, file, line) for each production import from a top-level
    module to one in a higher layer, and the top-level modules the layer
    table does not rank."""
    layers = LAYERS.get(crate)
    if layers is None:
        return [], []
    rank = {m: i for i, layer in enumerate(layers) for m in layer}
    tops = sorted({p[0] for p, m in modules.items() if len(p) == 1 and not m.test})
    unranked = [m for m in tops if m not in rank]
    up = []
    for a, b, file, line, t in sorted(set(edges)):
        if t or not a or not b or a[0] == b[0]:
            continue
        if a[0] in rank and b[0] in rank and rank[a[0]] < rank[b[0]]:
            up.append((a, b, file, line))
    return up, unranked


def sccs(nodes, adj):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
            if w not in index:
                strong(w)
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


ROOT = "."


def rel(file):
    """`file` as the report shows it: relative to the repository's root."""
    return os.path.relpath(file, ROOT)


def name(path):
    return "crate::" + "::".join(path) if path else "crate"


def find_circles(modules, edges, include_test):
    """Circles among the children of each module."""
    circles = []
    parents = sorted({p[:-1] for p in modules if p})
    for parent in parents:
        kids = sorted(p for p in modules
                      if p[:-1] == parent and not modules[p].inline)
        if len(kids) < 2:
            continue
        adj = defaultdict(set)
        why = defaultdict(list)
        for a, b, file, line, t in edges:
            if t and not include_test:
                continue
            if len(a) <= len(parent) or len(b) <= len(parent):
                continue
            if a[:len(parent)] != parent or b[:len(parent)] != parent:
                continue
            ca, cb = a[:len(parent) + 1], b[:len(parent) + 1]
            if ca == cb:
                continue
            adj[ca].add(cb)
            why[(ca, cb)].append((file, line, a, b))
        for comp in sccs(kids, adj):
            if len(comp) > 1:
                circles.append((parent, comp, {k: v for k, v in why.items()
                                               if k[0] in comp and k[1] in comp}))
    return circles


def parent_child(modules, edges, include_test):
    """A module importing from a descendant file that imports back from it."""
    pairs = defaultdict(list)
    for a, b, file, line, t in edges:
        if t and not include_test:
            continue
        pairs[(a, b)].append((file, line))
    out = []
    for (a, b), where in sorted(pairs.items()):
        if len(b) > len(a) and b[:len(a)] == a and (b, a) in pairs:
            out.append((a, b, where, pairs[(b, a)]))
    return out


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", action="append",
                    help="a crate's src/ directory (repeatable; default: the library's two)")
    ap.add_argument("--parents", action="store_true",
                    help="also report parent/child pairs importing from each other")
    ap.add_argument("--edges", action="store_true",
                    help="list every file-to-file import edge")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    global ROOT
    ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    srcs = args.src or [os.path.join(ROOT, "crates", c, "src") for c in ("kvtier", "kvtier-capi")]
    status = 0
    for src in srcs:
        if len(srcs) > 1 and not args.quiet:
            print(f"== {rel(os.path.abspath(src))}")
        status |= check(os.path.normpath(src), args)
    return status


def check(src, args):
    """Reports the circles and upward imports of the crate whose sources
    are under `src`; 1 when there is a production circle or an upward
    import, else 0."""
    modules = {(): Module((), os.path.join(src, "lib.rs"), False, False)}
    parse_file(src, modules, (), modules[()].file, False)
    graph = Graph(modules)
    edges = graph.edges()

    if args.edges:
        for a, b, file, line, t in sorted(set(edges)):
            print(f"{name(a)} -> {name(b)}  ({rel(file)}:{line}{', test' if t else ''})")

    prod = find_circles(modules, edges, include_test=False)
    prod_keys = {(p, tuple(c)) for p, c, _ in prod}
    every = find_circles(modules, edges, include_test=True)
    test_only = [c for c in every if (c[0], tuple(c[1])) not in prod_keys]

    def show(title, circles):
        print(f"{title}: {len(circles)}")
        for parent, comp, why in circles:
            print(f"  under {name(parent)}: " + " <-> ".join(p[-1] for p in comp))
            for (ca, cb), where in sorted(why.items()):
                file, line, a, b = where[0]
                more = f" (+{len(where) - 1} more)" if len(where) > 1 else ""
                print(f"    {ca[-1]} -> {cb[-1]}: {rel(file)}:{line} "
                      f"{name(a)} -> {name(b)}{more}")

    if not args.quiet:
        files = sum(1 for m in modules.values() if not m.inline)
        print(f"{files} files, {len(set((a, b) for a, b, *_ in edges))} file-to-file imports")
    show("circles", prod)
    show("test-only circles", test_only)
    if args.parents:
        pc = parent_child(modules, edges, include_test=False)
        print(f"parent/child pairs importing from each other: {len(pc)}")
        for a, b, down, up in pc:
            print(f"  {name(a)} <-> {name(b)}: {rel(down[0][0])}:{down[0][1]}, "
                  f"{rel(up[0][0])}:{up[0][1]}")
    crate = os.path.basename(os.path.dirname(os.path.abspath(src)))
    up, unranked = upward_imports(crate, modules, edges)
    if crate in LAYERS:
        print(f"upward imports: {len(up)}")
        for a, b, file, line in up:
            print(f"  {name(a)} -> {name(b)}: {rel(file)}:{line}")
        if unranked:
            print("top-level modules without a layer (add them to LAYERS in "
                  f"tools/check-imports.py): {', '.join(unranked)}")
    return 1 if prod or up or unranked else 0


if __name__ == "__main__":
    sys.exit(main())
