"""docs/architecture.md's module map and layer diagram agree with the tree: every module of
CMakeLists.txt has its row, in order, with its declared uses and its lines to the nearest
hundred, and the layer diagram names every module (scripts/architecture_table.py, which
--write fixes)."""
import os
import shutil
import subprocess
import sys

SOURCE = os.environ.get("KN_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE, "scripts", "architecture_table.py")


def check(root):
    return subprocess.run([sys.executable, os.path.join(root, "scripts", "architecture_table.py")],
                          capture_output=True, text=True, timeout=60)


def test_the_document_matches_the_tree():
    r = check(SOURCE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_drifted_document_fails(tmp_path):
    """The check can fail: a module grown by 500 lines, or one left out of the layer
    diagram, is found and named."""
    root = tmp_path / "tree"
    for d in ("scripts", "docs"):
        shutil.copytree(os.path.join(SOURCE, d), root / d)
    shutil.copy(os.path.join(SOURCE, "CMakeLists.txt"), root)
    shutil.copytree(os.path.join(SOURCE, "src"), root / "src")
    assert check(root).returncode == 0
    with open(root / "src" / "text" / "padding.c", "w") as f:
        f.write("\n" * 500)
    r = check(root)
    assert r.returncode == 1 and "module map differs" in r.stdout, r.stdout
    os.remove(root / "src" / "text" / "padding.c")
    doc = (root / "docs" / "architecture.md").read_text()
    (root / "docs" / "architecture.md").write_text(doc.replace("vulkan  cuda ", "vk  cu "))
    r = check(root)
    assert r.returncode == 1 and "layer diagram leaves out: vulkan, cuda" in r.stdout, r.stdout
