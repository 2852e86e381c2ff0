"""Reference chat-template renderer: Python's jinja2 set up exactly as Hugging Face
transformers sets it up for chat templates (chat_template_utils._compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension, transformers' tojson filter (json.dumps with ensure_ascii=False, optional indent,
separators and sort_keys), and the raise_exception and strftime_now globals. strftime_now
reads a fixed time here so that both renderers see the same clock.

render() returns ("ok", text), ("raised", message) for raise_exception, or
("error", exception class name, message) for any other failure."""
import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from testdata import DATA

FIXED_TIME = 1764374400  # 2025-11-29 00:00:00 UTC


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What raise_exception raises (transformers raises a plain TemplateError)."""


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _env(now):
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_COMPILED = {}


def render(template, context, now=FIXED_TIME):
    try:
        key = (template, now)
        if key not in _COMPILED:
            _COMPILED[key] = _env(now).from_string(template)
        return ("ok", _COMPILED[key].render(**context))
    except RaisedByTemplate as e:
        return ("raised", e.message)
    except Exception as e:  # noqa: BLE001 - any failure is a result to compare
        return ("error", type(e).__name__, str(e))


def chat_context(conv, bos_token, eos_token):
    """The variables apply_chat_template passes: messages, tools, documents,
    add_generation_prompt, the special tokens, then chat_template_kwargs."""
    ctx = {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": conv.get("documents"),
        "add_generation_prompt": conv.get("add_generation_prompt", False),
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    ctx.update(conv.get("kwargs", {}))
    return ctx


def load_templates():
    """(id, template source, bos, eos, note) for every template the tests cover."""
    out = []
    tdir = os.path.join(DATA, "templates")
    for name in sorted(os.listdir(tdir)):
        if name.endswith(".jinja"):
            with open(os.path.join(tdir, name), encoding="utf-8") as f:
                out.append((name[:-6], f.read(), "<s>", "</s>"))
    kdir = os.path.join(DATA, "tokenizers")
    for fam in sorted(os.listdir(kdir)):
        p = os.path.join(kdir, fam, "tokenizer_config.json")
        if not os.path.exists(p):
            continue
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
        ct = cfg.get("chat_template")
        if not ct:
            continue

        def tok(v):
            if isinstance(v, dict):
                return v.get("content", "")
            return v or ""

        bos, eos = tok(cfg.get("bos_token")), tok(cfg.get("eos_token"))
        if isinstance(ct, str):
            out.append((f"tokenizer-{fam}", ct, bos, eos))
        else:
            for item in ct:
                out.append((f"tokenizer-{fam}-{item['name']}", item["template"], bos, eos))
    return out


def load_conversations(source_dir):
    d = os.path.join(source_dir, "tests", "data", "jinja", "conversations")
    out = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".json"):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                out.append((name[:-5], json.load(f)))
    return out
