"""Installing the package as a user does: the wheel built from this tree, installed with pip into a fresh virtual
environment that already holds Axolotl and torch (this test environment's site-packages, seen through a folder of
links that leaves out this environment's own del-plugin), with no index. Nothing is downloaded and no other
package is installed, upgraded or removed; what Axolotl then reads is the package's real metadata: the
``axolotl.plugins`` entry point and the console scripts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from repo import REPO

pytestmark = pytest.mark.e2e  # installs the wheel and starts Python with Axolotl twice (under a minute)

PLUGIN = "del_plugin.DELPlugin"
OURS = re.compile(r"^(del_plugin|del-plugin|__editable__[._]+del_plugin)", re.I)


def run(*cmd, **kwargs) -> subprocess.CompletedProcess:
    # not from this tree's root, whose del_plugin/ `python -c` would import first
    kwargs.setdefault("cwd", tempfile.gettempdir())
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def host_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", AXOLOTL_DO_NOT_TRACK="1", OMP_NUM_THREADS="1", **extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> dict:
    work = tmp_path_factory.mktemp("install")
    # a fresh environment beside the existing one: its packages, less our own, through a folder of links
    host = Path(sysconfig.get_paths()["purelib"])
    view = work / "existing-site-packages"
    view.mkdir()
    for entry in host.iterdir():
        if not OURS.match(entry.name):
            (view / entry.name).symlink_to(entry)
    run(sys.executable, "-m", "venv", "--without-pip", work / "venv")
    python = work / "venv" / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "existing.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n", encoding="utf-8")

    probe = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    )
    before = json.loads(run(python, "-c", probe, env=host_env()).stdout)
    installed = run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-index",
        "--no-build-isolation",
        wheel,
        env=host_env(),
    )
    after = json.loads(run(python, "-c", probe, env=host_env()).stdout)
    return {
        "python": python,
        "bin": python.parent,
        "wheel": wheel,
        "pip": installed.stdout,
        "before": before,
        "after": after,
    }


def test_pip_installs_the_wheel_beside_axolotl_and_torch_without_moving_them(venv):
    assert "del-plugin" not in venv["before"]  # the fresh environment did not see this environment's del-plugin
    assert venv["after"] == {**venv["before"], "del-plugin": "0.1.0"}
    assert re.search(r"^Successfully installed del-plugin-0\.1\.0$", venv["pip"], re.M), venv["pip"]
    assert "Uninstalling" not in venv["pip"] and "Downloading" not in venv["pip"]
    # and the environment is the one the tests run in: the same torch and Axolotl
    import axolotl  # noqa: F401
    import torch

    assert venv["after"]["torch"] == torch.__version__.split("+")[0] or venv["after"]["torch"] == torch.__version__
    assert venv["after"]["axolotl"] == "0.21.0"


def test_the_wheel_never_pins_torch_below_what_axolotl_allows(venv):
    """An upper bound on torch would make pip move a newer torch that Axolotl allows; read from the wheel's own
    metadata and Axolotl's."""
    import importlib.metadata
    import zipfile

    from packaging.requirements import Requirement

    with zipfile.ZipFile(venv["wheel"]) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = wheel.read(name).decode()
    ours = {r.name: r for r in map(Requirement, re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)) if not r.marker}
    theirs = {r.name: r for r in map(Requirement, importlib.metadata.requires("axolotl")) if not r.marker}
    for package in ("torch", "numpy"):
        assert not [s for s in ours[package].specifier if s.operator in ("<", "<=", "==", "~=", "===")], ours[package]
        # every version Axolotl's bounds allow, at its edges, is allowed by ours
        for spec in theirs[package].specifier:
            if spec.operator in (">=", "=="):
                assert spec.version in ours[package].specifier, (package, spec)
    extra = [r for r in map(Requirement, re.findall(r"^Requires-Dist: (.+)$", metadata, re.M)) if r.name == "axolotl"]
    from del_plugin.axolotl.plugin import SUPPORTED_AXOLOTL

    assert {str(r.specifier) for r in extra} == {str(Requirement(f"axolotl{SUPPORTED_AXOLOTL}").specifier)}


def test_the_installed_metadata_registers_the_plugin_and_the_commands(venv):
    script = (
        "import importlib.metadata as m, json\n"
        "dist = m.distribution('del-plugin')\n"
        "print(json.dumps({'plugins': [(e.name, e.value) for e in m.entry_points(group='axolotl.plugins')],\n"
        "  'scripts': sorted(e.name for e in dist.entry_points if e.group == 'console_scripts'),\n"
        "  'file': __import__('del_plugin').__file__}))"
    )
    found = json.loads(run(venv["python"], "-c", script, env=host_env()).stdout)
    assert ["del_plugin", "del_plugin:DELPlugin"] in found["plugins"]
    # the test-asset fetcher is not a user command
    assert found["scripts"] == ["del-check", "del-eval", "del-llamafactory"]
    assert Path(found["file"]).is_relative_to(venv["python"].parents[1])  # the installed copy, not this tree
    for script_name in found["scripts"]:  # (tests/axolotl/test_del_check.py runs del-check's main in-process)
        assert (venv["bin"] / script_name).is_file()
    assert "del_plugin.axolotl.check" in (venv["bin"] / "del-check").read_text(encoding="utf-8")
    assert "del_plugin.llamafactory.cli" in (venv["bin"] / "del-llamafactory").read_text(encoding="utf-8")


def example_files() -> list[str]:
    return sorted(
        str(p.relative_to(REPO / "examples"))
        for p in (REPO / "examples").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def test_the_examples_ship_with_the_package_and_one_command_writes_them(venv, tmp_path):
    """`pip install` puts every file of examples/ under <prefix>/share/del-plugin/examples; `python -m
    del_plugin.examples DIR` writes them, byte for byte the tree's, so the docs' commands (--sweep
    examples/compare-with-mle.yml) work outside a clone."""
    import zipfile

    with zipfile.ZipFile(venv["wheel"]) as wheel:
        prefix = "del_plugin-0.1.0.data/data/share/del-plugin/examples/"
        shipped = sorted(n.removeprefix(prefix) for n in wheel.namelist() if n.startswith(prefix))
    assert shipped == example_files()
    done = run(venv["python"], "-m", "del_plugin.examples", tmp_path / "mine", env=host_env(), cwd=tmp_path)
    assert done.stdout.startswith(f"{len(shipped)} example files written to {tmp_path / 'mine'}/")
    for name in shipped:
        assert (tmp_path / "mine" / name).read_bytes() == (REPO / "examples" / name).read_bytes(), name
    again = subprocess.run(
        [venv["python"], "-m", "del_plugin.examples", tmp_path / "mine"], capture_output=True, text=True, env=host_env()
    )
    assert again.returncode == 1 and "already there; nothing written: choose another folder" in again.stderr


AXOLOTL_PROBE = """
import json, sys
from axolotl.integrations.base import PluginManager, get_builtin_plugins
from axolotl.utils.config import prepare_plugins, validate_config
from axolotl.utils.dict import DictDefault

base = json.loads(sys.argv[1])
result = {"discovered": list(get_builtin_plugins())}

plain = DictDefault(dict(base))  # no plugins line, no del_ keys: a user who does not use DEL
prepare_plugins(plain)
validated = validate_config(plain)
result["plain_del_keys"] = sorted(k for k in validated if k.startswith("del_"))
result["plain_trainer"] = repr(PluginManager.get_instance().get_trainer_cls(validated))

forgot = DictDefault({**base, "del_alpha": 0.03})  # DEL keys, the plugins line forgotten
prepare_plugins(forgot)
try:
    validate_config(forgot)
    result["forgot"] = None
except Exception as err:
    result["forgot"] = str(err)

listed = DictDefault({**base, "plugins": ["del_plugin.DELPlugin"], "del_alpha": 0.03})
prepare_plugins(listed)
validated = validate_config(listed)
result["listed_alpha"] = validated.del_alpha
plugins = PluginManager.get_instance().plugins
result["registered"] = [name for name, p in plugins.items() if type(p).__name__ == "DELPlugin"]
result["listed_trainer"] = PluginManager.get_instance().get_trainer_cls(validated).__name__
print("RESULT " + json.dumps(result))
"""


def test_axolotl_discovers_the_plugin_and_it_acts_only_when_listed(venv, tmp_path):
    """Through Axolotl 0.21's own discovery (the installed entry point): a config without DEL is untouched (no
    del_ key, Axolotl's trainer), DEL keys without the plugins line are refused with the line to add, and a listed
    plugin is registered once, under the name configs use."""
    from tools.assets import tiny_model_dir
    from tools.cpu import alpaca_lora_config, write_alpaca_jsonl

    from gsm8k_rows import gsm8k_rows

    data = write_alpaca_jsonl(tmp_path / "d.jsonl", gsm8k_rows(2))
    base = alpaca_lora_config(
        tiny_model_dir("llama-spm"),
        data,
        tmp_path,
        sequence_len=128,
        micro_batch_size=1,
        learning_rate=1e-4,
        num_epochs=1,
    )
    done = run(venv["python"], "-c", AXOLOTL_PROBE, json.dumps(base), env=host_env(), cwd=tmp_path)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))

    assert PLUGIN in result["discovered"]
    assert result["plain_del_keys"] == [] and result["plain_trainer"] == "None"
    assert result["forgot"] and "`del_alpha` set, but the plugin is not listed" in result["forgot"]
    assert f"plugins:\n  - {PLUGIN}" in result["forgot"]
    assert result["listed_alpha"] == 0.03
    assert result["registered"] == [PLUGIN] and result["listed_trainer"] == "DELTrainer"


# ---------------------------------------------------------------------------------------------- the answer key

# a program that hunts for the answer key by every path it can think of: each entry of sys.path and its real path,
# through /proc/self/root and /proc/1/root, the given absolute paths (a --benchmark-dir, a link to it), and a walk
# of its whole root for the sets' file names; prints every readable, non-empty file it found
ANSWER_KEY_HUNT = """
import json, os, sys
RELATIVE, ABSOLUTE, NAMES = {relative!r}, {absolute!r}, {names!r}
def readable(path):
    try:
        with open(path, "rb") as handle:
            return bool(handle.read(1))
    except OSError:
        return False
entries = {{e for p in sys.path + [sys.prefix] for e in (p, os.path.realpath(p))}}
found, listed = [], []
for root in ("", "/proc/self/root", "/proc/1/root"):
    found += [root + e + "/" + r for e in entries for r in RELATIVE if readable(root + e + "/" + r)]
    found += [root + a for a in ABSOLUTE if readable(root + a)]
    for e in entries:
        try:
            listed += os.listdir(root + e + "/del_plugin/evaluation/data")
        except OSError:
            pass
for top, folders, files in os.walk("/"):
    if top == "/":
        folders[:] = [f for f in folders if f not in ("proc", "sys", "dev")]
    found += [os.path.join(top, f) for f in files if f in NAMES and readable(os.path.join(top, f))]
print(json.dumps({{"found": sorted(set(found)), "listed": listed}}))
"""

HUNT_DRIVER = """
import json, sys
from del_plugin.evaluation.benchmarks import program
try:
    mode = program.program_sandbox()
except program.SandboxUnavailableError as err:
    print(json.dumps({"skip": str(err)}))
    raise SystemExit
code, hidden = sys.stdin.read(), sys.argv[1:]
runs = {m: program.run_program(code, sandbox=m, timeout_s=60, hidden=hidden).__dict__ for m in (mode, "none")}
print(json.dumps({"mode": mode, "runs": runs}))
"""

# GSM8K problem 1 answered by reading the shipped set from the installed package (the attack that scored 3/3)
READS_THE_KEY = (
    "import gzip, json, os, sys\n"
    "for entry in sys.path:\n"
    "    path = os.path.join(entry, 'del_plugin/evaluation/data/gsm8k/test.jsonl.gz')\n"
    "    if os.path.exists(path):\n"
    "        rows = gzip.open(path).read().decode().splitlines()\n"
    "        print(json.loads(rows[1])['answer'].split('####')[-1].strip())\n"
    "        break\n"
)


def test_no_program_finds_the_answer_key_of_the_installed_package_by_any_path(venv, tmp_path):
    """With the wheel installed (the shipped sets in the virtual environment's site-packages, which the sandbox
    shows the program read-only) and a --benchmark-dir inside that environment too, reached also through a
    symbolic link: no file of any set is readable from inside the sandbox, by any path; the same program without
    the sandbox finds them all (so the test can fail). Then `del-eval score --program-of-thought` on GSM8K: the
    program that read the key scores "no answer", an honest one beside it is scored right."""
    import zipfile

    with zipfile.ZipFile(venv["wheel"]) as wheel:
        shipped = [n for n in wheel.namelist() if n.startswith("del_plugin/evaluation/data/") and ".json" in n]
    assert len(shipped) >= 5, shipped
    sets = venv["python"].parents[1] / "share" / "paper-sets"
    for folder, file in (("simuleq", "simuleq.json"), ("sat", "sat.json")):
        (sets / folder).mkdir(parents=True)
        (sets / folder / file).write_text('[{"answer": 42}]\n', encoding="utf-8")
    link = venv["python"].parents[1] / "lib" / "sets-link"
    link.symlink_to(sets)
    absolute = [str(p) for p in sets.rglob("*.json")] + [str(link / "sat" / "sat.json")]
    names = sorted({Path(p).name for p in shipped + absolute})
    hunt = ANSWER_KEY_HUNT.format(relative=shipped, absolute=absolute, names=names)
    done = run(venv["python"], "-c", HUNT_DRIVER, sets, input=hunt, env=host_env(), cwd=tmp_path)
    result = json.loads(done.stdout)
    if "skip" in result:
        pytest.skip(result["skip"])
    sandboxed, control = result["runs"][result["mode"]], result["runs"]["none"]
    assert sandboxed["status"] == "ok", sandboxed
    assert json.loads(sandboxed["stdout"]) == {"found": [], "listed": []}, (result["mode"], sandboxed["stdout"])
    assert control["status"] == "ok", control
    seen = json.loads(control["stdout"])["found"]
    for name in shipped + absolute:  # without the sandbox, every one of them is there
        assert any(found.endswith(name) for found in seen), (name, seen)

    predictions = tmp_path / "predictions.jsonl"
    honest = "eggs = 16 - 3 - 4\nprint(eggs * 2)"  # GSM8K 0: 18
    lines = [{"id": 0, "output": honest}, {"id": 1, "output": READS_THE_KEY}]
    predictions.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "report"
    command = [venv["bin"] / "del-eval", "score", "--benchmark", "gsm8k", "--predictions", predictions]
    run(*command, "--out", out, "--program-of-thought", env=host_env(), cwd=tmp_path)
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert (records[0]["prediction"], records[0]["correct"]) == ("18", True)
    assert (records[1]["prediction"], records[1]["correct"], records[1]["program"]["stdout"]) == (None, False, "")


def test_the_installed_wheel_scores_every_shipped_set_as_the_tree_does(venv, tmp_path):
    """The wheel carries the scoring data of every set it ships: ``del-eval score`` from the installed package, on
    each set's first four problems (two answered right, two wrong), scores every answer as this tree does."""
    from del_plugin.evaluation import load_benchmark, score_predictions
    from del_plugin.evaluation.benchmarks.names import SHIPPED_NAMES

    assert len(SHIPPED_NAMES) == 5  # GSM8K, MATH, SVAMP, AQuA, MMLU's mathematics
    for name in SHIPPED_NAMES:
        problems = load_benchmark(name, limit=4).problems
        right = "The answer is {}"
        outputs = [
            {"id": p.id, "output": right.format(p.reference) if k % 2 == 0 else right.format(123456789)}
            for k, p in enumerate(problems)
        ]
        expected = score_predictions(name, outputs, tmp_path / "tree" / name)
        predictions = tmp_path / f"{name}.jsonl"
        predictions.write_text("".join(json.dumps(o) + "\n" for o in outputs), encoding="utf-8")
        out = tmp_path / "installed" / name
        command = [venv["bin"] / "del-eval", "score", "--benchmark", name, "--predictions", predictions]
        run(*command, "--out", out, env=host_env(), cwd=tmp_path)
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        (scored,) = report["datasets"]
        assert (scored["generation"]["n"], scored["generation"]["correct"]) == (4, 2), name
        assert scored["source"]["sha256"] == expected["datasets"][0]["source"]["sha256"], name
        records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
        tree = [json.loads(line) for line in (tmp_path / "tree" / name / "generations.jsonl").read_text().splitlines()]
        assert [(r["id"], r["correct"]) for r in records] == [(r["id"], r["correct"]) for r in tree], name
