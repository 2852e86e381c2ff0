"""The module layering is enforced: each src/<module>/ uses only the modules it declares with
kn_module() in CMakeLists.txt (the build writes that graph to $KN_BUILD/kn_modules.txt).
- cmake/check_layers.cmake, which the build runs on every module's #includes, refuses an
  undeclared include (shown here on a small tree of its own);
- the calls the module libraries make (their undefined symbols, read with nm) go only to
  the module itself or to the modules it declares, directly or through them: a call made
  with a hand-written prototype instead of an include is caught here;
- docs/modules.md lists the same graph."""
import os
import re
import shutil
import subprocess

import pytest

SOURCE = os.environ.get("KN_SOURCE", ".")
BUILD = os.environ.get("KN_BUILD", "build")
CHECK = os.path.join(SOURCE, "cmake", "check_layers.cmake")


def graph():
    g = {}
    with open(os.path.join(BUILD, "kn_modules.txt")) as f:
        for line in f:
            name, _, deps = line.partition(":")
            g[name.strip()] = deps.split()
    return g


def closure(g, m):
    seen, todo = set(), [m]
    while todo:
        for d in g[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_graph_is_acyclic_and_covers_src():
    g = graph()
    dirs = sorted(d for d in os.listdir(os.path.join(SOURCE, "src"))
                  if os.path.isdir(os.path.join(SOURCE, "src", d)))
    assert sorted(g) == dirs
    for m in g:
        assert m not in closure(g, m), f"module {m} depends on itself"


# ---- the include check --------------------------------------------------------------

def run_check(src, module, deps):
    return subprocess.run(["cmake", f"-DMODULE={module}", f"-DDEPS={';'.join(deps)}",
                           f"-DSRC_DIR={src}", "-P", CHECK], capture_output=True, text=True)


def make_tree(tmp_path, files):
    for path, text in files.items():
        p = tmp_path / "src" / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(tmp_path / "src")


def test_include_check_refuses_an_undeclared_module(tmp_path):
    src = make_tree(tmp_path, {
        "base/base.h": "",
        "engine/engine.h": "",
        "text/text.h": '#include "../base/base.h"\n',
        "text/stop.c": '#include "text.h"\n#include <string.h>\n  #  include "../engine/engine.h"\n',
        "text/think.c": '#include "engine/engine.h"\n',
    })
    r = run_check(src, "text", ["base"])
    assert r.returncode != 0
    err = " ".join(r.stderr.split())
    assert 'src/text/stop.c includes "../engine/engine.h", but module text does not declare engine' in err
    assert 'src/text/think.c includes "engine/engine.h", but module text does not declare engine' in err
    assert "base.h" not in err.replace("(declared: kn_module(text base))", "")
    assert run_check(src, "text", ["base", "engine"]).returncode == 0


def test_include_check_refuses_other_spellings(tmp_path):
    src = make_tree(tmp_path, {
        "engine/engine.h": "",
        "text/a.c": '#include "../../src/engine/engine.h"\n',
        "text/b.c": '#include "engine.h"\n',
        "text/c.c": '#include "../nosuch/x.h"\n',
    })
    r = run_check(src, "text", ["engine"])
    assert r.returncode != 0
    err = " ".join(r.stderr.split())
    assert 'src/text/a.c includes "../../src/engine/engine.h": only' in err
    assert 'src/text/b.c includes "engine.h", which is not in src/text/' in err
    assert 'src/text/c.c includes "../nosuch/x.h", but there is no module src/nosuch/' in err


def test_include_check_passes_the_tree():
    g = graph()
    for m, deps in g.items():
        r = run_check(os.path.join(SOURCE, "src"), m, deps)
        assert r.returncode == 0, r.stderr


# ---- the call check (nm) ------------------------------------------------------------

def objects_of(m):
    """The object files (or archive) holding module m's code in this build."""
    lib = os.path.join(BUILD, f"libkn_{m}.a")
    if os.path.exists(lib):
        return [lib]
    objs = []  # a program (cli): its objects
    for root, _, files in os.walk(os.path.join(BUILD, "CMakeFiles")):
        if root.replace(os.sep, "/").endswith(f"/src/{m}"):
            objs += [os.path.join(root, f) for f in files if f.endswith(".o")]
    return objs


def symbols(paths):
    """(defined globals, undefined names) of the objects in paths, from nm -P."""
    if not paths:  # a module of headers only
        return set(), set()
    out = subprocess.run(["nm", "-P"] + paths, capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2 or f[0].endswith(":") or line.endswith(":"):
            continue
        if f[1] in ("U", "w"):
            undefined.add(f[0])
        elif f[1] in "TDBRCVWGSI":
            defined.add(f[0])
    return defined, undefined


def violations(g, defs, undefs):
    """Calls from a module to a module it does not declare (directly or through others)."""
    owner = {}
    for m, names in defs.items():
        for s in names:
            owner.setdefault(s, set()).add(m)
    bad = []
    for m, names in undefs.items():
        allowed = closure(g, m) | {m}
        for s in sorted(names):
            o = owner.get(s)
            if o and not (o & allowed):
                bad.append(f"module {m} calls {s} of module {'/'.join(sorted(o))}, "
                           f"which kn_module({m} ...) does not reach")
    return bad


def test_violations_finds_an_upward_call():
    g = {"base": [], "text": ["base"], "engine": ["text"]}
    defs = {"base": {"kn_fail"}, "text": {"text_stop_init"}, "engine": {"engine_step"}}
    undefs = {"base": set(), "text": {"kn_fail", "engine_step", "memcpy"}, "engine": {"kn_fail"}}
    assert violations(g, defs, undefs) == [
        "module text calls engine_step of module engine, which kn_module(text ...) does not reach"]


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not installed")
def test_module_libraries_call_only_declared_modules():
    g = graph()
    defs, undefs = {}, {}
    for m in g:
        paths = objects_of(m)
        has_c = any(f.endswith(".c") for f in os.listdir(os.path.join(SOURCE, "src", m)))
        assert paths or not has_c, f"no objects for module {m} in {BUILD}"
        defs[m], undefs[m] = symbols(paths)
    assert defs["base"], "nm read no symbols"
    assert violations(g, defs, undefs) == []


def included_modules(m):
    """The modules whose headers src/<m>/ includes (either spelling)."""
    found = set()
    d = os.path.join(SOURCE, "src", m)
    for f in os.listdir(d):
        if f.endswith((".c", ".h")):
            with open(os.path.join(d, f), errors="replace") as fh:
                for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', fh.read(), re.M):
                    parts = inc.split("/")
                    if len(parts) == 3 and parts[0] == "..":
                        found.add(parts[1])
                    elif len(parts) == 2:
                        found.add(parts[0])
    return found - {m}


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not installed")
def test_every_declared_dependency_is_used():
    """The graph says what the code does: a module listed in kn_module(m ...) is one m
    includes or calls. A stale entry would let a new upward include through unnoticed."""
    g = graph()
    defs, undefs = {}, {}
    for m in g:
        defs[m], undefs[m] = symbols(objects_of(m))
    stale = []
    for m, deps in g.items():
        called = {d for d in deps if undefs[m] & defs[d]}
        for d in sorted(set(deps) - included_modules(m) - called):
            stale.append(f"kn_module({m} ...) declares {d}, but src/{m} neither includes nor "
                         f"calls it: remove it from CMakeLists.txt and docs/modules.md")
    assert stale == []


# ---- the document -------------------------------------------------------------------

def test_modules_doc_matches_the_build():
    g = graph()
    doc = {}
    with open(os.path.join(SOURCE, "docs", "modules.md")) as f:
        for line in f:
            m = re.match(r"\|\s*`(\w+)`\s*\|[^|]*\|([^|]*)\|\s*$", line)
            if m:
                doc[m.group(1)] = sorted(re.findall(r"`(\w+)`", m.group(2)))
    assert doc == {m: sorted(d) for m, d in g.items()}
