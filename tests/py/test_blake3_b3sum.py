"""BLAKE3 of files against the independent `b3sum` command, every ISA level and thread
count, sizes around chunk (1024 B) and SIMD-batch (16 KiB, 256 KiB) boundaries, and one
sparse file of at least 1 GiB (skip it with KN_SKIP_SLOW=1; about 2 s in a release build).

The hashing program is the unit test binary's `hash` mode (tests/unit/test_blake3.c)."""
import os
import shutil
import subprocess

import pytest

from srvutil import sanitizer_build

BUILD = os.environ.get("KN_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
HASHER = os.path.join(BUILD, "tests", "test_blake3")
ISAS = ["scalar", "avx2", "avx512"]

pytestmark = pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum not installed")


def b3sum(path):
    out = subprocess.run(["b3sum", "--no-names", path], check=True, capture_output=True,
                         text=True).stdout
    return out.strip()


def kn_hash(path, threads, isa=None, env=None):
    cmd = [HASHER, "hash", path, str(threads)] + ([isa] if isa else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode == 3:
        return None  # this CPU lacks the ISA
    assert r.returncode == 0, r.stderr
    hexd, secs, used = r.stdout.split()
    assert isa is None or used == isa
    return hexd, float(secs), used


SIZES = [0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 2049, 16 * 1024 - 1, 16 * 1024,
         16 * 1024 + 1, 17 * 1024, 256 * 1024, 256 * 1024 + 1, 512 * 1024 + 1000,
         (1 << 20) + 7, (5 << 20) + 12345]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("b3")
    data = os.urandom(max(SIZES))
    paths = {}
    for n in SIZES:
        p = d / f"f{n}"
        p.write_bytes(data[:n])
        paths[n] = str(p)
    return paths


@pytest.mark.parametrize("isa", ISAS)
def test_sizes_match_b3sum(files, isa):
    for n, p in files.items():
        want = b3sum(p)
        for threads in (1, 2, 3):
            got = kn_hash(p, threads, isa)
            if got is None:
                pytest.skip(f"CPU lacks {isa}")
            assert got[0] == want, f"size {n} threads {threads} isa {isa}"


def test_kinetic_isa_is_honoured(files):
    p = files[(1 << 20) + 7]
    want = b3sum(p)
    env = {k: v for k, v in os.environ.items() if k != "KINETIC_ISA"}
    best = kn_hash(p, 1, env=env)
    assert best[0] == want
    seen = {best[2]}
    for level in ISAS:
        got = kn_hash(p, 2, env=dict(env, KINETIC_ISA=level))
        if level == best[2] or ISAS.index(level) < ISAS.index(best[2]):
            assert got[2] == level and got[0] == want
            seen.add(got[2])
        else:  # a level this CPU lacks: kern falls back to scalar, same bytes
            assert got[2] == "scalar" and got[0] == want
    assert "scalar" in seen


def test_missing_file_is_a_clear_error(tmp_path):
    r = subprocess.run([HASHER, "hash", str(tmp_path / "nope"), "1"], capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert "nope" in r.stderr and "cannot open" in r.stderr


# Sanitizer builds: an ASan build hashes about 30x slower; the large file then adds
# nothing the unit test's 9 MiB multi-threaded cases do not already check under the
# sanitizers.

@pytest.mark.skipif(os.environ.get("KN_SKIP_SLOW") == "1", reason="KN_SKIP_SLOW=1")
@pytest.mark.skipif(sanitizer_build(), reason="sanitizer build: too slow (see above)")
def test_one_gib_sparse_file(tmp_path):
    # Sparse: mostly holes (read as zeros) with a few written regions, so it costs no disk
    # and little time to make, but every chunk still has to be hashed.
    p = tmp_path / "big.bin"
    size = (1 << 30) + 4097
    with open(p, "wb") as f:
        f.truncate(size)
        for off in (0, 123456789, (1 << 29) + 5, size - 100):
            f.seek(off)
            f.write(os.urandom(100))
    try:
        # Two threads: the single-threaded path is the same code the smaller files test.
        want = b3sum(str(p))
        got = kn_hash(str(p), 2)
        assert got[0] == want
    finally:
        os.unlink(p)
