"""``python -m del_plugin.examples [FOLDER]``: write the example configs (``examples/`` of the source tree: the
quick starts, the paper's reproductions and ablation, ``compare-with-mle.yml``, the trainer scripts) into FOLDER,
default ``./examples``, so that the commands the docs give (``axolotl train examples/qwen3-8b/qlora-24gb.yml
--sweep examples/compare-with-mle.yml``) work after ``pip install`` as they do in a clone.

The package installs them as data files under ``<prefix>/share/del-plugin/examples`` (setup.cfg,
``[options.data_files]``); from a clone (or an editable install) they are read from the tree itself.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

__all__ = ["examples_folder", "main", "write_examples"]

MARKER = "compare-with-mle.yml"  # a file every copy of the examples holds
INSTALLED = ("share", "del-plugin", "examples")


def examples_folder() -> Path:
    """The examples this package came with: the source tree's ``examples/`` beside the package, else the installed
    data files."""
    tree = Path(__file__).resolve().parents[1] / "examples"
    if (tree / MARKER).is_file():
        return tree
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        files = distribution("del-plugin").files or []
    except PackageNotFoundError:
        files = []
    for file in files:
        if file.parts[-len(INSTALLED) - 1 :] == (*INSTALLED, MARKER):
            return Path(file.locate()).resolve().parent
    raise FileNotFoundError(
        "the example configs are neither beside the package (a clone) nor installed with it (share/del-plugin/"
        "examples); reinstall del-plugin, or take them from the source repository's examples/"
    )


def write_examples(folder: Path) -> list[Path]:
    """Copy every example file into ``folder``, keeping their relative paths; refuses (``FileExistsError``) before
    writing anything if one of them is already there."""
    source = examples_folder()
    files = sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    targets = [folder / p.relative_to(source) for p in files]
    present = [str(t) for t in targets if t.exists()]
    if present:
        shown = ", ".join(present[:3]) + (f" and {len(present) - 3} more" if len(present) > 3 else "")
        raise FileExistsError(f"{shown} already there; nothing written: choose another folder")
    for path, target in zip(files, targets):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m del_plugin.examples", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", nargs="?", default="examples", type=Path, help="where to write them (./examples)")
    args = parser.parse_args(argv)
    try:
        written = write_examples(args.folder)
    except (FileExistsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{len(written)} example files written to {args.folder}/, e.g. {written[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
