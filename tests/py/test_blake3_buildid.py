"""`kinetic --version`: the build id is the first 16 hex digits of the executable's BLAKE3
(checked with b3sum), the ISA line names the levels and the active one, and the prefetch
line the products' software prefetch distance (KINETIC_PREFETCH, else the CPU's default)."""
import os
import shutil
import subprocess

import pytest

KINETIC = os.environ.get("KINETIC", "build/kinetic")


def version(env_extra=None):
    env = dict(os.environ)
    env.pop("KINETIC_ISA", None)
    env.pop("KINETIC_PREFETCH", None)
    env.update(env_extra or {})
    r = subprocess.run([KINETIC, "--version"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(l.split(": ", 1) for l in r.stdout.splitlines()[1:])
    return r.stdout.splitlines()[0], lines, r.stderr


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum not installed")
def test_build_id_is_blake3_of_executable():
    want = subprocess.run(["b3sum", "--no-names", KINETIC], capture_output=True, text=True,
                          check=True).stdout.strip()[:16]
    first, lines, _ = version()
    assert first.startswith("kinetic ")
    assert lines["numerics"] == "canonical-1"
    assert lines["build"] == want


def test_isa_line_lists_levels_and_active():
    _, lines, _ = version()
    levels, active = lines["isa"].split(" (active: ")
    levels = levels.split()
    assert levels[0] == "scalar"
    assert set(levels) <= {"scalar", "avx2", "avx512"}
    assert active.rstrip(")") == levels[-1]  # the best by default
    _, lines, _ = version({"KINETIC_ISA": "scalar"})
    assert lines["isa"].endswith("(active: scalar)")


def test_bad_isa_is_reported():
    _, lines, err = version({"KINETIC_ISA": "sse9"})
    assert lines["isa"].endswith("(active: scalar)")
    assert "KINETIC_ISA" in err and "sse9" in err


def test_prefetch_line_and_override():
    _, lines, err = version()
    default, why = lines["prefetch"].split(" bytes ahead (", 1)
    assert int(default) in (0, 4096) and why.endswith(")") and not err
    _, lines, err = version({"KINETIC_PREFETCH": "8192"})
    assert lines["prefetch"] == "8192 bytes ahead (KINETIC_PREFETCH; default %s)" % default
    # A bad value is a warning naming it, and the default is used.
    _, lines, err = version({"KINETIC_PREFETCH": "8k"})
    assert lines["prefetch"].startswith(default + " bytes ahead (")
    assert "KINETIC_PREFETCH=8k" in err
