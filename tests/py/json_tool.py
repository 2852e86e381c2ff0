"""Drives tests/unit/test_json's batch modes: many JSON documents in, one answer each out.
The tool reads "LEN\\nDOC" records and writes "OK LEN\\nBYTES\\n" (the document written
again: "batch" in Kinetic's compact form, "jcs" in RFC 8785's) or "ERR MESSAGE\\n"."""
import os
import subprocess

BUILD = os.environ.get("KN_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tests", "test_json")


def run(mode, docs):
    """[(True, bytes written) or (False, error message)] for each document, in order."""
    data = b"".join(b"%d\n%s" % (len(d), d) for d in docs)
    out = subprocess.run([TOOL, mode], input=data, capture_output=True, check=True).stdout
    res, i = [], 0
    while i < len(out):
        nl = out.index(b"\n", i)
        head = out[i:nl]
        if head.startswith(b"OK "):
            n = int(head[3:])
            res.append((True, out[nl + 1:nl + 1 + n]))
            i = nl + 1 + n + 1
        else:
            res.append((False, head[4:].decode("utf-8", "replace")))
            i = nl + 1
    assert len(res) == len(docs)
    return res
