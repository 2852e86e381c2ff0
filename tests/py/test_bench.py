"""kinetic bench: llama-bench's tests and field names, on the real tiny model."""
import json
import os
import re
import subprocess
from testdata import DATA

KINETIC = os.environ.get("KINETIC", "build/kinetic")
MODEL = os.path.join(DATA, "models", "aidreams260K.gguf")


def run(*args):
    # a small streaming-read buffer: the figure's presence is tested, not the machine
    return subprocess.run([KINETIC, "bench", "--stream-mib", "16", *args], capture_output=True,
                          text=True, timeout=120)


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
    assert lines[0] == ("| model | size | params | backend | threads | test | t/s | weights GB/s |"
                        " stream GB/s |")
    assert "| pp8 |" in lines[2] and "| tg4 |" in lines[3]
    assert " ± " in lines[2]
    assert lines[2].endswith("| - | - |")  # prefill reads the weights once per batch: no figure
    assert re.search(r"\| [0-9.]+ \| [0-9.]+ \([0-9]+%\) \|$", lines[3]), lines[3]


def decode_bytes(path):
    """The bytes of weights one decode token reads, from the file: every tensor, the token
    embedding as one row unless the output is tied to it, experts at used/total."""
    import gguf
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    names = {t.name for t in r.tensors}
    f = r.fields.get(f"{arch}.expert_count")
    n_exp = int(f.parts[-1][0]) if f else 0
    n_used = int(r.fields[f"{arch}.expert_used_count"].parts[-1][0]) if n_exp else 0
    total = 0
    for t in r.tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            total += int(t.n_bytes) // int(t.shape[1])  # gguf-py shape: (n_embd, n_vocab)
        elif "_exps" in t.name and n_exp:
            total += int(t.n_bytes) // n_exp * n_used
        else:
            total += int(t.n_bytes)
    return total


def test_depth_and_weight_rate(tmp_path):
    p = run(MODEL, "-p", "8", "-n", "4", "-d", "0,16", "-t", "1", "-r", "2", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert [(r["n_depth"], r["n_prompt"], r["n_gen"]) for r in res] == [
        (0, 8, 0), (0, 0, 4), (16, 8, 0), (16, 0, 4)]
    want = decode_bytes(MODEL)
    for r in res:
        assert r["weights_bytes_per_token"] == want
        if r["n_gen"]:
            assert abs(r["weights_gbps"] - want * r["avg_ts"] / 1e9) <= 1e-3 * r["weights_gbps"] + 1e-3
            # one streaming read around each repetition; the row gives their median and the
            # median of each repetition's weight rate over its own read
            streams = r["samples_stream_gbps"]
            assert len(streams) == len(r["samples_ts"]) == 2 and min(streams) > 0
            assert abs(r["stream_gbps"] - sum(streams) / 2) < 2e-3
            shares = sorted(want * ts / 1e9 / st for ts, st in zip(r["samples_ts"], streams))
            assert abs(r["stream_share"] - sum(shares) / 2) <= 1e-3 * r["stream_share"] + 1e-4
        else:
            assert r["weights_gbps"] == 0 and r["samples_stream_gbps"] == []
            assert r["stream_gbps"] == 0 and r["stream_share"] == 0
    md = run(MODEL, "-p", "8", "-n", "0", "-d", "16", "-r", "1", "-t", "1")
    assert md.returncode == 0 and "| pp8 @ d16 |" in md.stdout, md.stdout + md.stderr


def test_moe_active_experts(tmp_path):
    # a tiny MoE made here: only the experts a token uses count
    path = str(tmp_path / "moe.gguf")
    s = subprocess.run([KINETIC, "synth", "--arch", "qwen3moe", "--preset", "tiny", "--type", "q8_0",
                        "--seed", "3", "-o", path], capture_output=True, text=True, timeout=120)
    assert s.returncode == 0, s.stderr
    p = run(path, "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)[0]
    total = sum(int(t.n_bytes) for t in __import__("gguf").GGUFReader(path).tensors)
    assert r["weights_bytes_per_token"] == decode_bytes(path) < total


def test_bad_arguments():
    for args, part in [((MODEL, "-p", "x"), "-p wants a list"), ((MODEL, "-r", "0"), "-r must be"),
                       ((MODEL, "-t", "0"), "thread counts"), ((MODEL, "-d", "x"), "-d wants a list"),
                       ((MODEL, "--stream-mib", "-1"), "--stream-mib must be"), ((MODEL, "-o", "csv"), "-o takes"),
                       ((), "give a model file"), (("/nonexistent.gguf",), "cannot open")]:
        p = run(*args)
        assert p.returncode != 0 and part in p.stderr, (args, p.stderr)
