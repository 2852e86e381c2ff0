"""The model-hash cache across processes (XDG_CACHE_HOME in a temp folder): hashes equal
b3sum's, a second process answers from the cache, a corrupt cache is ignored with a warning
and rebuilt, and many concurrent writers leave a valid cache holding every entry.

The program is the unit test's `hash` mode: `test_hashcache hash FILE` prints
"<hex> hits=N misses=N corrupt=N"."""
import json
import os
import shutil
import subprocess

import pytest

BUILD = os.environ.get("KN_BUILD", os.path.join(os.path.dirname(__file__), "../../build"))
TOOL = os.path.join(BUILD, "tests", "test_hashcache")


def run(path, cache_home, check=True):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    r = subprocess.run([TOOL, "hash", str(path)], capture_output=True, text=True, env=env)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def parse(out):
    hexd, *kv = out.split()
    return hexd, {k: int(v) for k, v in (x.split("=") for x in kv)}


@pytest.fixture
def env(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + os.urandom(300_000))
    return tmp_path, model, tmp_path / "cache"


def test_second_process_hits_cache(env):
    tmp, model, cache = env
    h1, s1 = parse(run(model, cache).stdout)
    h2, s2 = parse(run(model, cache).stdout)
    assert h1 == h2
    assert s1 == {"hits": 0, "misses": 1, "corrupt": 0}
    assert s2 == {"hits": 1, "misses": 0, "corrupt": 0}
    if shutil.which("b3sum"):
        want = subprocess.run(["b3sum", "--no-names", str(model)], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert h1 == want
    data = json.loads((cache / "kinetic" / "hashes.json").read_text())
    entry = data["files"][str(model.resolve())]
    st = os.stat(model)
    assert data["version"] == 1
    assert entry == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "blake3": h1}


def test_changed_file_is_rehashed(env):
    tmp, model, cache = env
    h1, _ = parse(run(model, cache).stdout)
    st = os.stat(model)
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # only the mtime, by 1 ns
    h2, s2 = parse(run(model, cache).stdout)
    assert h2 == h1 and s2["misses"] == 1
    with open(model, "r+b") as f:  # same size and mtime restored, content changed: the
        f.seek(4)                  # (after the GGUF magic)
        f.write(b"X")              # cache cannot see this (documented), so change the size
        f.seek(0, 2)
        f.write(b"more")
    h3, s3 = parse(run(model, cache).stdout)
    assert h3 != h1 and s3["misses"] == 1
    _, s4 = parse(run(model, cache).stdout)
    assert s4["hits"] == 1


def test_corrupt_cache_warns_and_is_rebuilt(env):
    tmp, model, cache = env
    h1, _ = parse(run(model, cache).stdout)
    path = cache / "kinetic" / "hashes.json"
    path.write_bytes(b'{"version": 1, "files": {"/x": ')
    r = run(model, cache)
    h2, s2 = parse(r.stdout)
    assert h2 == h1 and s2["misses"] == 1 and s2["corrupt"] >= 1
    assert "ignoring the model-hash cache" in r.stderr and "hashes.json" in r.stderr
    assert json.loads(path.read_text())["files"][str(model.resolve())]["blake3"] == h1
    r = run(model, cache)
    assert parse(r.stdout)[1]["hits"] == 1 and r.stderr == ""


def test_concurrent_writers_keep_every_entry(tmp_path):
    cache = tmp_path / "cache"
    files = []
    for i in range(12):
        p = tmp_path / f"m{i}.bin"
        p.write_bytes(b"GGUF" + os.urandom(1000 + 777 * i))
        files.append(p)
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    for rnd in range(3):
        if rnd == 2:  # and once more after every file changed
            for p in files:
                with open(p, "ab") as f:
                    f.write(b"!")
        procs = [subprocess.Popen([TOOL, "hash", str(p)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for p in files]
        outs = [p.communicate() for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        assert not any(e for _, e in outs), outs  # no corrupt cache was ever seen
        data = json.loads((cache / "kinetic" / "hashes.json").read_text())
        assert set(data["files"]) == {str(p.resolve()) for p in files}
        for p, (o, _) in zip(files, outs):
            assert data["files"][str(p.resolve())]["blake3"] == o.split()[0]
    leftovers = [n for n in os.listdir(cache / "kinetic") if ".tmp." in n]
    assert leftovers == []


def test_missing_file_is_an_error(tmp_path):
    r = run(tmp_path / "none.gguf", tmp_path / "cache", check=False)
    assert r.returncode == 1 and "none.gguf" in r.stderr and "cannot open" in r.stderr
