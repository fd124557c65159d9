"""Installing the plugin into a LLaMA-Factory environment moves nothing of it. In the LLaMA-Factory lane, a fresh
virtual environment sees the lane's packages (LLaMA-Factory 0.9.5 and its pins ahead of the project's torch and the
rest, as the lane's PYTHONPATH orders them) less del-plugin itself; pip's resolver asked to install the built wheel
there plans del-plugin alone (every requirement met by what is installed). The wheel's ``[llamafactory]`` extra
accepts the LLaMA-Factory installed (pip is not asked to resolve it: the lane leaves out six requirements of
LLaMA-Factory's own, which it would check), and the wheel gives the ``del-llamafactory`` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from llamafactory_runs import LANE_ONLY, LLAMAFACTORY_LANE
from repo import REPO

pytestmark = pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY)
OURS = re.compile(r"^(del_plugin|del-plugin|__editable__[._]+del_plugin)", re.I)


def wheel_requirements(wheel: Path) -> tuple[list[Requirement], str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        lines = archive.read(metadata).decode().splitlines()
        requires = [Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")]
        return requires, archive.read(entry_points).decode()


def lane_view_venv(work: Path) -> Path:
    """A venv whose site holds the lane's overlay, then the project's site-packages less del-plugin."""
    view = work / "view"
    view.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not OURS.match(entry.name):
            (view / entry.name).symlink_to(entry)
    overlay = [p for p in os.environ["PYTHONPATH"].split(os.pathsep) if Path(p, "llamafactory").is_dir()]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True, cwd=work)
    python = work / "venv" / "bin" / "python"
    probe = [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    site = Path(subprocess.run(probe, check=True, capture_output=True, text=True, cwd=work).stdout.strip())
    dirs = "; ".join(f"site.addsitedir({str(d)!r})" for d in [*overlay, view])
    (site / "lane.pth").write_text(f"import site; {dirs}\n", encoding="utf-8")
    return python


def test_pip_plans_the_plugin_alone_beside_llamafactory(tmp_path):
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(REPO)], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("del_plugin-*.whl")
    requires, entry_points = wheel_requirements(wheel)
    assert "del-llamafactory = del_plugin.llamafactory.cli:main" in entry_points
    (extra,) = [r for r in requires if r.name == "llamafactory"]
    assert extra.specifier.contains(version("llamafactory"))
    python = lane_view_venv(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    seen = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('llamafactory'), m.version('torch'))"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert seen.stdout.split() == [version("llamafactory"), version("torch")]
    report = tmp_path / "report.json"
    plan = [sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run", "--no-index"]
    done = subprocess.run([*plan, "--report", str(report), str(wheel)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    planned = [item["metadata"]["name"] for item in json.loads(report.read_text(encoding="utf-8"))["install"]]
    assert planned == ["del-plugin"]
