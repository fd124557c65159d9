"""A clone stands alone: no tracked file reads a path outside the repository, and the vendored data is intact.

The scan reads every tracked text file and flags each way a path can climb out of the repository root: a
``Path(__file__)`` climbed past the root (``parents[N]`` or a chain of ``.parent``), the parent of a root
constant, a literal ``../`` path, and the machine-local GSM8K folder that stands beside this repository on the
developers' machines. The scanner is tested on lines that must be flagged, so that it cannot pass vacuously.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from del_plugin.evaluation.gsm8k import GSM8K_DIR, gsm8k_rows
from tools.assets import GSM8K_TRAIN_DIR

from repo import REPO

SCANNED_SUFFIXES = {".py", ".cfg", ".toml", ".yml", ".yaml", ".sh", ".txt", ".lock", ""}

_PARENTS = re.compile(r"Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?\.parents\[(\d+)\]")
_PARENT_CHAIN = re.compile(r"Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?((?:\.parent)+)")
_ROOT_PARENT = re.compile(r"\b(?:REPO|REPO_ROOT|ROOT|PROJECT_ROOT)\.parent\b")
_DOTDOT = re.compile(r"""(?:^|["'\s=(/])\.\.[/\\]""")
_BESIDE = re.compile(r"shared/data|/ *[\"']shared[\"'] */")


def escapes(relpath: str, text: str) -> list[str]:
    """The lines of ``text`` (tracked at ``relpath``) that read a path outside the repository."""
    steps_to_root = len(Path(relpath).parts)  # from the file: one step per folder, one more to the root
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if relpath.endswith(".py") else line
        climbs = [int(n) + 1 for n in _PARENTS.findall(code)]  # parents[0] is one step up: the file's folder
        climbs += [chain.count(".parent") for chain in _PARENT_CHAIN.findall(code)]
        if (
            any(up > steps_to_root for up in climbs)
            or _ROOT_PARENT.search(code)
            or _DOTDOT.search(code)
            or _BESIDE.search(code)
        ):
            found.append(f"{relpath}:{number}: {line.strip()}")
    return found


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    files = [REPO / name for name in listed.decode().split("\0") if name]
    return [f for f in files if f.suffix in SCANNED_SUFFIXES and f.is_file()]


# The sibling folder that once held the data, named once: the cases below are bad on purpose, and spelling the
# name out in them would make other scanners of this tree report them as real reads.
SIBLING = "shared"


@pytest.mark.parametrize(
    ("relpath", "line"),
    [
        ("tests/helpers.py", f'DATA = Path(__file__).resolve().parents[2] / "{SIBLING}" / "data"'),
        ("bench/collation.py", "DATA = Path(__file__).parent.parent.parent / 'data'"),
        ("bench/train_step.py", 'GSM8K = benchlib.REPO_ROOT.parent / "data"'),
        ("experiments/pipeline.py", 'open("../data/train.jsonl")'),
        ("Makefile", f"\tpython bench/run_all.py --data ../{SIBLING}/data/gsm8k"),
    ],
)
def test_the_scanner_flags_reads_outside_the_repository(relpath, line):
    assert escapes(relpath, line), line


@pytest.mark.parametrize(
    ("relpath", "line"),
    [
        ("tests/axolotl/test_examples.py", "REPO = Path(__file__).resolve().parents[1]"),
        ("tools/assets.py", 'GSM8K_DIR = Path(__file__).resolve().parents[1] / "data" / "gsm8k"'),
        ("bench/benchlib.py", "RESULTS_DIR = REPO_ROOT / 'bench' / 'results'"),
        ("del_plugin/core/places.py", "x = a[..., :-1]  # '..' in code is not a path"),
    ],
)
def test_the_scanner_passes_reads_inside_the_repository(relpath, line):
    assert not escapes(relpath, line), line


def test_no_tracked_file_reads_outside_the_repository():
    files = [f for f in tracked_text_files() if f != Path(__file__).resolve()]  # this file's cases are bad on purpose
    assert len(files) > 50  # the scan really ran over the tree
    found = [hit for f in files for hit in escapes(str(f.relative_to(REPO)), f.read_text(encoding="utf-8"))]
    assert not found, "tracked files read outside the repository:\n" + "\n".join(found)


# The published checksums of the upstream files (del_plugin/evaluation/data/README.md, tools/data/gsm8k/README.md):
# the vendored rows are unchanged. The test split ships in the package, the train split stays in the clone.
GSM8K_SHA256 = {
    "train": ("17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465", 7473, GSM8K_TRAIN_DIR),
    "test": ("3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", 1319, GSM8K_DIR),
}


@pytest.mark.parametrize("split", sorted(GSM8K_SHA256))
def test_vendored_gsm8k_is_inside_the_repository_and_unchanged(split):
    digest, rows, folder = GSM8K_SHA256[split]
    assert folder.resolve().is_relative_to(REPO)
    assert (folder / "LICENSE").read_text().startswith("MIT License")
    raw = gzip.decompress((folder / f"{split}.jsonl.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == digest
    every = gsm8k_rows(None, split, directory=folder)
    assert len(every) == rows == raw.count(b"\n")
    assert gsm8k_rows(3, split, directory=folder) == every[:3]
    assert all("####" in row["answer"] and row["question"] for row in every)
    with pytest.raises(KeyError, match="unknown GSM8K split"):
        gsm8k_rows(1, "validation")


def test_the_package_ships_the_scoring_split_only_and_says_where_the_train_split_is():
    assert sorted(p.name for p in GSM8K_DIR.iterdir()) == ["LICENSE", "test.jsonl.gz"]
    with pytest.raises(FileNotFoundError, match=r"test split only.*load_dataset\('openai/gsm8k', 'main'\)"):
        gsm8k_rows(1, "train")
    assert gsm8k_rows(1) == gsm8k_rows(1, "test")  # the default is what the package holds
