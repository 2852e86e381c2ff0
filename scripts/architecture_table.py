#!/usr/bin/env python3
"""architecture_table.py: docs/architecture.md's module map and layer diagram from the tree.

The module map's rows come from CMakeLists.txt's kn_module lines (lowest layer first), its
"lines" column from `cat src/<module>/*.[ch] | wc -l` rounded to the nearest hundred (so
the table changes with the code's size, not with every commit), and its "uses" column from
the kn_module line. The "owns" column is prose: kept from the document as it is, and a new
module's row gets "(describe it)".

  scripts/architecture_table.py            prints what differs; exit 1 if anything does
  scripts/architecture_table.py --write    writes the table into docs/architecture.md

tests/py/test_architecture_doc.py runs the check, so the document cannot drift again."""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DOC = os.path.join(ROOT, "docs", "architecture.md")
BEGIN = "<!-- module map: scripts/architecture_table.py --write -->"
END = "<!-- end of the module map -->"


def modules():
    """[(module, [uses])] from CMakeLists.txt, lowest layer first, the program last."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        text = f.read()
    mods = [(m.group(1), m.group(2).split()) for m in
            re.finditer(r"^kn_module\((\w+)((?:\s+\w+)*)\s*\)", text, re.M)]
    # kn_program(<folder> <executable> <uses>...): the kinetic program, above every module
    mods += [(m.group(1), m.group(2).split()) for m in
             re.finditer(r"^kn_program\((\w+)\s+\w+((?:\s+\w+)*)\s*\)", text, re.M)]
    return mods


def lines_of(module):
    n = 0
    for path in sorted(glob.glob(os.path.join(ROOT, "src", module, "*.[ch]"))):
        with open(path, "rb") as f:
            n += f.read().count(b"\n")
    return n


def rounded(n):
    return max(100, int(round(n / 100.0)) * 100)


def current_rows(doc):
    """{module: owns} of the table now in the document."""
    rows = {}
    body = doc.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in doc else doc
    for line in body.splitlines():
        m = re.match(r"^\| `(\w+)` \| (.*?) \|", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def table(doc):
    owns = current_rows(doc)
    out = [BEGIN,
           "| module | owns | uses | lines |",
           "|---|---|---|---:|"]
    for name, uses in modules():
        deps = ", ".join(f"`{u}`" for u in uses) if uses else "-"
        out.append(f"| `{name}` | {owns.get(name, '(describe it)')} | {deps} | "
                   f"{rounded(lines_of(name)):,} |")
    out.append(END)
    return "\n".join(out)


def layer_diagram_missing(doc):
    """The modules the layer diagram (the first code block after "The layers") leaves out:
    each of its lines names modules, then, after three or more spaces, says what they are."""
    m = re.search(r"The layers.*?```\n(.*?)```", doc, re.S)
    words = set()
    for line in (m.group(1).splitlines() if m else []):
        words.update(re.findall(r"\w+", re.split(r" {3,}", line, 1)[0]))
    return [name for name, _ in modules() if name not in words]


def main():
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    want = table(doc)
    if BEGIN in doc:
        have = BEGIN + doc.split(BEGIN, 1)[1].split(END, 1)[0] + END
    else:
        have = None
    if "--write" in sys.argv[1:]:
        if have is None:
            sys.exit(f"{DOC}: no {BEGIN} marker to write the table at")
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(doc.replace(have, want))
        return 0
    bad = False
    if have != want:
        bad = True
        print("docs/architecture.md's module map differs from the tree; "
              "scripts/architecture_table.py --write updates it. The tree gives:\n" + want)
    missing = layer_diagram_missing(doc)
    if missing:
        bad = True
        print("docs/architecture.md's layer diagram leaves out: " + ", ".join(missing))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
