"""The repack cache (docs/performance.md, "Cold start") through the real binary: `kinetic
run` gives the same tokens, logits (--logits-out, byte for byte) and receipt with the cache
off, on a first run (which writes the file) and on a second one (which maps it without
rewriting it); a damaged file (a flipped byte in the header or the data, truncated, grown,
another model's file under this model's name with its header made to match) is refused by
its MAC with a one-line note and rebuilt; an unusable folder costs a note, never an error;
concurrent first runs leave one valid file; files of another build of the model and the
least recently used beyond the limit are removed. Models: `kinetic synth` tiny Q4_K_M
(Q4_K and Q6_K weights, both repacked)."""
import json
import os
import subprocess
import tempfile

import pytest

from srvutil import Server

KINETIC = os.environ.get("KINETIC", "build/kinetic")
MAX_FILES = 16  # RCACHE_MAX_FILES in src/engine/rcache.c
HEADER = 4096   # RCACHE_HEADER_BYTES


def kn(*args, env=None, check=True):
    p = subprocess.run([KINETIC, *map(str, args)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"kinetic {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="kn_rcache_")
    # The model-hash cache (which names the model) in the test's folder too.
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = os.path.join(d, "xdg")
    for seed in ("5", "6"):
        kn("synth", "--arch", "llama", "--preset", "tiny", "--type", "q4_k_m", "--seed", seed,
           "-o", os.path.join(d, f"m{seed}.gguf"))
    yield d
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old
    subprocess.run(["rm", "-rf", d])


def model(work, seed="5"):
    return os.path.join(work, f"m{seed}.gguf")


def cmd(work, cache, tag, seed="5"):
    lf, rf = os.path.join(work, f"{tag}.logits"), os.path.join(work, f"{tag}.receipt.json")
    args = ["run", model(work, seed), "Once upon a time", "--temp", "0.8", "--seed", "3",
            "-n", "12", "-t", "2", "--json", "--logits-out", lf, "--receipt", rf]
    if cache is not None:
        args += ["--repack-cache", cache]
    return args, lf, rf


def result(p, lf, rf):
    with open(lf, "rb") as f:
        logits = f.read()
    with open(rf) as f:
        rec = json.load(f)
    rec.pop("timing", None)
    rec.pop("created", None)
    return json.loads(p.stdout)["tokens"], logits, rec


def gen(work, cache, tag="x", seed="5", env=None):
    """One run; returns ((tokens, logits, receipt), stderr)."""
    args, lf, rf = cmd(work, cache, tag, seed)
    p = kn(*args, env=env)
    return result(p, lf, rf), p.stderr


def krp(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".krp"))


@pytest.fixture(scope="module")
def ref(work):
    out, err = gen(work, "off", "ref")
    assert "repack cache" not in err, err
    return out


def wrote_only(err):
    """The notes of a run that built the file: one line saying where, and nothing else."""
    notes = [l for l in err.splitlines() if "note" in l]
    return len(notes) == 1 and "repack cache wrote " in notes[0] and "MiB" in notes[0]


def test_same_bits_off_first_second(work, ref):
    folder = os.path.join(work, "c_same")
    first, err = gen(work, folder, "first")
    assert wrote_only(err), err
    files = krp(folder)
    assert len(files) == 1, files
    assert files[0] in err, err
    name = os.path.basename(files[0])
    assert len(name.split("-")[0]) == 64 and len(name.split("-")[1]) == 16, name
    st = os.stat(files[0])
    second, err = gen(work, folder, "second")
    assert "note" not in err, err
    assert os.stat(files[0]).st_ino == st.st_ino  # mapped, not rewritten
    assert first == ref and second == ref
    assert not [n for n in os.listdir(folder) if ".tmp." in n]
    # Every SIMD level reads the same layout: one file serves them all.
    line = kn("--version").stdout.split("isa:")[1].splitlines()[0]
    for isa in [i for i in line.split("(")[0].split() if i != "scalar"]:
        out, err = gen(work, folder, f"isa_{isa}", env={"KINETIC_ISA": isa})
        assert out[:2] == ref[:2] and "note" not in err, (isa, err)  # the receipt names the ISA
    assert krp(folder) == files and os.stat(files[0]).st_ino == st.st_ino


def test_env_var_and_off(work, ref):
    folder = os.path.join(work, "c_env")
    out, err = gen(work, None, "env", env={"KINETIC_REPACK_CACHE": folder})
    assert out == ref and len(krp(folder)) == 1, err
    off = os.path.join(work, "c_off")
    xoff = os.path.join(work, "xdg_off")  # where the default would write
    out, _ = gen(work, None, "envoff", env={"KINETIC_REPACK_CACHE": "off", "XDG_CACHE_HOME": xoff})
    assert out == ref and not os.path.exists(os.path.join(xoff, "kinetic", "repack"))
    # The flag goes over the variable.
    out, _ = gen(work, "off", "flagoff", env={"KINETIC_REPACK_CACHE": off})
    assert out == ref and not os.path.exists(off)
    # The default folder: $XDG_CACHE_HOME/kinetic/repack.
    xdg = os.path.join(work, "xdg_default")
    out, _ = gen(work, None, "xdg", env={"XDG_CACHE_HOME": xdg, "KINETIC_REPACK_CACHE": ""})
    assert out == ref and len(krp(os.path.join(xdg, "kinetic", "repack"))) == 1
    # A scalar run repacks nothing: no file.
    scal = os.path.join(work, "c_scalar")
    p = kn(*cmd(work, scal, "scalar")[0], env={"KINETIC_ISA": "scalar"})
    assert "repack cache" not in p.stderr and krp(scal) == []


def flip(path, off):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x10]))


def damage(work, path, kind):
    size = os.path.getsize(path)
    if kind == "flip_mac":
        flip(path, 3)
    elif kind == "flip_header":
        flip(path, 1000)  # inside the zero padding the MAC covers
    elif kind == "flip_data":
        flip(path, HEADER + (size - HEADER) // 2)
    elif kind == "flip_last":
        flip(path, size - 1)
    elif kind == "truncated":
        os.truncate(path, size - 4096)
    elif kind == "grown":
        with open(path, "ab") as f:
            f.write(b"\0")
    elif kind == "foreign_header":
        other = os.path.join(work, "c_foreign_src")
        gen(work, other, "foreign_src", seed="6")
        [src] = krp(other)
        with open(src, "rb") as f, open(path, "wb") as g:
            g.write(f.read())
    elif kind == "foreign":
        # The other model's file (same shapes, so the same size and layout), its header's
        # keys made this file's: only the MAC can tell.
        other = os.path.join(work, "c_foreign_src")
        gen(work, other, "foreign_src", seed="6")
        [src] = krp(other)
        with open(path, "rb") as f:
            mine = f.read(HEADER)
        with open(src, "rb") as f:
            data = bytearray(f.read())
        assert len(data) == size
        data[32:HEADER] = mine[32:HEADER]  # everything but the MAC
        with open(path, "wb") as f:
            f.write(data)
    else:
        raise ValueError(kind)


@pytest.mark.parametrize("kind", ["flip_mac", "flip_header", "flip_data", "flip_last",
                                  "truncated", "grown", "foreign_header", "foreign"])
def test_damaged_file_refused_and_rebuilt(work, ref, kind):
    folder = os.path.join(work, f"c_{kind}")
    gen(work, folder, f"{kind}0")
    [path] = krp(folder)
    damage(work, path, kind)
    out, err = gen(work, folder, f"{kind}1")
    assert out == ref
    assert "repack cache wrote " in err, err  # the rebuilt file
    notes = [l for l in err.splitlines() if "repack cache" in l and "repack cache wrote " not in l]
    assert len(notes) == 1 and "rebuilding it" in notes[0], err
    if kind == "foreign_header":
        assert "made for another model" in notes[0], notes
    elif kind in ("truncated", "grown"):
        assert "truncated or foreign" in notes[0], notes
    else:
        assert "MAC does not match" in notes[0], notes
    # The rebuilt file is valid: the next run maps it, without a note or a rewrite.
    [path] = krp(folder)
    ino = os.stat(path).st_ino
    out, err = gen(work, folder, f"{kind}2")
    assert out == ref and "repack cache" not in err, err
    assert os.stat(path).st_ino == ino


def test_unusable_folder_is_a_note(work, ref):
    blocker = os.path.join(work, "a_file")
    with open(blocker, "w") as f:
        f.write("not a folder")
    out, err = gen(work, os.path.join(blocker, "sub"), "unusable")
    assert out == ref
    notes = [l for l in err.splitlines() if "repack cache" in l]
    assert len(notes) == 1 and "not written" in notes[0], err
    # A read-only folder (where the user is not root, who may write anyway).
    ro = os.path.join(work, "c_readonly")
    os.makedirs(ro)
    os.chmod(ro, 0o500)
    try:
        out, err = gen(work, ro, "readonly")
        assert out == ref
        if os.geteuid() != 0:
            assert "not written" in err, err
    finally:
        os.chmod(ro, 0o700)


def test_concurrent_first_runs(work, ref):
    folder = os.path.join(work, "c_concurrent")
    procs = []
    for i in range(3):
        args, lf, rf = cmd(work, folder, f"conc{i}")
        procs.append((subprocess.Popen([KINETIC, *args], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True), lf, rf))
    for p, lf, rf in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and ("note" not in err or wrote_only(err)), err
        assert result(subprocess.CompletedProcess(p.args, 0, out, err), lf, rf) == ref
    [path] = krp(folder)
    assert not [n for n in os.listdir(folder) if ".tmp." in n]
    ino = os.stat(path).st_ino
    out, err = gen(work, folder, "conc_after")
    assert out == ref and "note" not in err and os.stat(path).st_ino == ino


def test_eviction(work, ref):
    folder = os.path.join(work, "c_evict")
    gen(work, folder, "ev0")
    [path] = krp(folder)
    mhex, build, layout = os.path.basename(path)[:-4].split("-")
    os.remove(path)
    other_build = os.path.join(folder, f"{mhex}-{'0' * 16}-{layout}.krp")
    others = [os.path.join(folder, f"{i:064x}-{build}-{layout}.krp") for i in range(MAX_FILES + 3)]
    stale_tmp = os.path.join(folder, f"{mhex}-{build}-{layout}.krp.tmp.1")
    for i, p in enumerate([other_build, stale_tmp, *others]):
        with open(p, "wb") as f:
            f.write(b"x")
        os.utime(p, (1_000_000 + i, 1_000_000 + i))  # long ago, older first
    gen(work, folder, "ev1")
    left = krp(folder)
    assert path in left and other_build not in left and not os.path.exists(stale_tmp)
    assert len(left) == MAX_FILES
    # The newest of the others are kept.
    assert set(left) - {path} == set(others[-(MAX_FILES - 1):])


def test_server_env_var(work):
    """The server takes the setting from KINETIC_REPACK_CACHE: the first start writes the
    file, the second maps it, and both answer as a server with the cache off."""
    folder = os.path.join(work, "c_server")
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.8, "seed": 3}
    answers = []
    for setting in ("off", folder, folder):
        with Server(model(work), "--parallel", "1", "-t", "2",
                    env={"KINETIC_REPACK_CACHE": setting}) as srv:
            st, _, js = srv.post("/v1/completions", body)
            assert st == 200, js
            answers.append(js["choices"][0]["text"])
        if setting != "off":
            [path] = krp(folder)
            if len(answers) == 2:
                ino = os.stat(path).st_ino
            else:
                assert os.stat(path).st_ino == ino
    assert answers[0] == answers[1] == answers[2]
