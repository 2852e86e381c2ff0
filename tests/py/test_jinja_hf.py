"""Kinetic's Jinja engine against Python's jinja2 configured as transformers configures it
for chat templates: every template in shared/templates/*.jinja and in the shared tokenizer
configs, rendered with every conversation in tests/data/jinja/conversations, must give the
same bytes; when the reference fails, Kinetic must fail too, and for raise_exception with
the same message."""
import json
import os
import subprocess
import tempfile

import pytest

import jinja_ref

SOURCE = os.environ.get("KN_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("KN_BUILD", os.path.join(SOURCE, "build"))
TOOL = os.path.join(BUILD, "tests", "jinja_render")

TEMPLATES = jinja_ref.load_templates()
CONVS = jinja_ref.load_conversations(SOURCE)


def kinetic_render(template, context, tmp):
    tpath = os.path.join(tmp, "t.jinja")
    cpath = os.path.join(tmp, "c.json")
    with open(tpath, "w", encoding="utf-8", newline="") as f:
        f.write(template)
    with open(cpath, "w", encoding="utf-8") as f:
        json.dump(context, f, ensure_ascii=False)
    p = subprocess.run([TOOL, tpath, cpath, "--time", str(jinja_ref.FIXED_TIME)],
                       capture_output=True, timeout=30)
    assert b"Sanitizer" not in p.stderr and b"runtime error:" not in p.stderr, p.stderr.decode()
    assert p.returncode in (0, 1), f"jinja_render exited with {p.returncode}: {p.stderr!r}"
    if p.returncode == 0:
        return ("ok", p.stdout.decode("utf-8"))
    head, _, msg = p.stderr.decode("utf-8", "replace").partition("\n")
    kind = head.split()[1] if len(head.split()) > 1 else "?"
    if kind == "raised":
        return ("raised", msg[:-1] if msg.endswith("\n") else msg)
    return ("error", kind, msg.strip())


def compare(ref, got):
    """None when they agree, else a description."""
    if ref[0] == "ok":
        if got == ref:
            return None
        if got[0] != "ok":
            return f"reference renders, Kinetic fails: {got}"
        a, b = ref[1], got[1]
        i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        return (f"output differs at char {i}: reference {a[max(0, i - 40):i + 60]!r} "
                f"Kinetic {b[max(0, i - 40):i + 60]!r}")
    if ref[0] == "raised":
        if got == ref:
            return None
        return f"reference raise_exception({ref[1]!r}), Kinetic {got}"
    if got[0] == "ok":
        return f"reference fails ({ref[1]}: {ref[2]}), Kinetic renders"
    want = ERROR_KINDS.get(ref[1], {"type"})
    if got[0] != "error" or got[1] not in want:
        return f"reference fails with {ref[1]} ({ref[2]}), Kinetic with {got}"
    return None


# jinja2's exception classes and the engine's error kinds that correspond to them.
ERROR_KINDS = {
    "UndefinedError": {"undefined"},
    "SecurityError": {"security"},
    "TemplateSyntaxError": {"syntax"},
    "TemplateAssertionError": {"syntax"},
    "SyntaxError": {"syntax"},
    "TypeError": {"type"},
    "ValueError": {"type"},
    "ZeroDivisionError": {"type"},
    "IndexError": {"type"},
    "KeyError": {"type"},
    "AttributeError": {"type"},
    "OverflowError": {"type", "limit"},
}


@pytest.mark.parametrize("tid,src,bos,eos", TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_template_matches_reference(tid, src, bos, eos):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for cname, conv in CONVS:
            ctx = jinja_ref.chat_context(conv, bos, eos)
            ref = jinja_ref.render(src, ctx)
            got = kinetic_render(src, ctx, tmp)
            d = compare(ref, got)
            if d:
                failures.append(f"{tid} x {cname}: {d}")
    assert not failures, "\n".join(failures)


def test_every_template_renders_somewhere():
    """Each template must render at least one conversation in the reference (else the
    comparison would only compare errors)."""
    dead = []
    for tid, src, bos, eos in TEMPLATES:
        if not any(jinja_ref.render(src, jinja_ref.chat_context(c, bos, eos))[0] == "ok"
                   for _, c in CONVS):
            dead.append(tid)
    assert not dead, f"templates the reference never renders: {dead}"
