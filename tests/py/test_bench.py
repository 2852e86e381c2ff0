"""kinetic bench: llama-bench's tests and field names, on the real tiny model."""
import json
import os
import subprocess

KINETIC = os.environ.get("KINETIC", "build/kinetic")
MODEL = os.path.join(os.environ.get("KN_SHARED", "../shared"), "models", "aidreams260K.gguf")


def run(*args):
    return subprocess.run([KINETIC, "bench", *args], capture_output=True, text=True, timeout=120)


def test_json_fields():
    p = run(MODEL, "-p", "16,8", "-n", "4", "-t", "1,2", "-r", "2", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert [(r["n_threads"], r["n_prompt"], r["n_gen"]) for r in res] == [
        (1, 16, 0), (1, 8, 0), (1, 0, 4), (2, 16, 0), (2, 8, 0), (2, 0, 4)]
    import gguf
    reader = gguf.GGUFReader(MODEL)
    params = sum(int(t.n_elements) for t in reader.tensors)
    size = sum(int(t.n_bytes) for t in reader.tensors)
    for r in res:
        assert r["avg_ts"] > 0 and r["stddev_ts"] >= 0 and len(r["samples_ts"]) == 2
        assert r["model_n_params"] == params and r["model_size"] == size


def test_markdown_table():
    p = run(MODEL, "-p", "8", "-n", "4", "-r", "1", "-t", "1")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "| model | size | params | backend | threads | test | t/s |"
    assert "| pp8 |" in lines[2] and "| tg4 |" in lines[3]
    assert " ± " in lines[2]


def test_bad_arguments():
    for args, part in [((MODEL, "-p", "x"), "-p wants a list"), ((MODEL, "-r", "0"), "-r must be"),
                       ((MODEL, "-t", "0"), "thread counts"), ((MODEL, "-o", "csv"), "-o takes"),
                       ((), "give a model file"), (("/nonexistent.gguf",), "cannot open")]:
        p = run(*args)
        assert p.returncode != 0 and part in p.stderr, (args, p.stderr)
