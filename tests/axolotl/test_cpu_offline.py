"""The CPU recipe with no Hugging Face hub, from what `make setup` provides: the offline twin of the CPU example and
the clone's assets/ folder it reads, the .venv default that keeps Axolotl's telemetry from blocking an offline run,
the sweep wrapper that reports a failed arm, and the README's CPU commands run as written, offline, end to end."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
import yaml

from del_plugin.axolotl import sweep
from del_plugin.axolotl.check import main as del_check
from tools.assets import CPU_EXAMPLE_ASSETS, cpu_example_assets, gsm8k_train_file, smollm2_dir
from tools.venv_defaults import DEFAULTS, PTH_NAME, install_defaults

from gsm8k_rows import gsm8k_rows
from repo import REPO

EXAMPLE = REPO / "examples" / "smollm2-135m-cpu.yml"
OFFLINE = REPO / "examples" / "smollm2-135m-cpu-offline.yml"
SWEEP = REPO / "examples" / "compare-with-mle.yml"
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
# no route to any host: the hub, PostHog (Axolotl's telemetry) and anything else a run might try
UNREACHABLE = "http://127.0.0.1:9"


def offline_env(**changes: str | None) -> dict[str, str]:
    """This process's environment with the hub off and unreachable, this clone's del_plugin first, the venv's
    commands (accelerate, del-eval) on PATH; ``changes`` set (None removes)."""
    env = {k: v for k, v in os.environ.items() if k not in ("AXOLOTL_LOG_LEVEL", "LOG_LEVEL")}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_ENDPOINT=UNREACHABLE,
        HTTP_PROXY=UNREACHABLE,
        HTTPS_PROXY=UNREACHABLE,
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# ------------------------------------------------------------------ the offline twin and what make setup provides


def test_the_offline_twin_is_the_cpu_example_with_local_model_and_data():
    """Every key but the model, the data and the output folder is the example's; the model and the data are the
    names `make setup` links into assets/ (CPU_EXAMPLE_ASSETS), relative to the clone's root."""
    online = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    offline = yaml.safe_load(OFFLINE.read_text(encoding="utf-8"))
    changed = {"base_model", "datasets", "output_dir"}
    assert {k: v for k, v in offline.items() if k not in changed} == {
        k: v for k, v in online.items() if k not in changed
    }
    assert offline["base_model"] == "./assets/SmolLM2-135M-Instruct"
    (dataset,) = offline["datasets"]
    assert dataset["path"] == "./assets/gsm8k-train.jsonl" and dataset["ds_type"] == "json"
    assert dataset["type"] == online["datasets"][0]["type"]
    assert {Path(offline["base_model"]).name, Path(dataset["path"]).name} == set(CPU_EXAMPLE_ASSETS)
    assert offline["output_dir"] == "./outputs/del-smollm2-135m-cpu-offline"


def test_make_setup_provides_the_offline_assets_and_the_venv_default():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assets_line = re.search(r"^\t\$\(PY\) -m tools\.assets (.*)$", makefile, re.MULTILINE)
    assert assets_line and "cpu-example" in assets_line.group(1).split()
    setup = re.search(r"^setup: .*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert setup and "$(PY) -m tools.venv_defaults" in setup.group(1)
    assert "/assets/" in (REPO / ".gitignore").read_text(encoding="utf-8").split()


def test_the_gsm8k_training_file_holds_the_packaged_train_split():
    path = gsm8k_train_file()
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 7473  # GSM8K's training split
    assert rows[:3] == gsm8k_rows(3, split="train")
    assert all(set(row) == {"question", "answer"} and "####" in row["answer"] for row in rows)


def test_cpu_example_assets_links_the_cached_files_and_mends_a_stale_link(tmp_path):
    folder = cpu_example_assets(tmp_path / "assets")
    assert (folder / "SmolLM2-135M-Instruct").resolve() == smollm2_dir().resolve()
    assert (folder / "gsm8k-train.jsonl").resolve() == gsm8k_train_file().resolve()
    stale = folder / "gsm8k-train.jsonl"
    stale.unlink()
    stale.symlink_to(tmp_path / "gone.jsonl")
    cpu_example_assets(folder)
    assert stale.resolve() == gsm8k_train_file().resolve()


def offline_workdir(tmp_path: Path, rows: int | None = None) -> Path:
    """A folder laid out as the clone's root for the commands: examples/ (the clone's) and assets/ as `make setup`
    makes it; ``rows``: the training file holds GSM8K's first ``rows`` problems instead of all (for time)."""
    work = tmp_path / "clone"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    assets = cpu_example_assets(work / "assets")
    if rows is not None:
        (assets / "gsm8k-train.jsonl").unlink()
        text = "".join(json.dumps(row) + "\n" for row in gsm8k_rows(rows, split="train"))
        (assets / "gsm8k-train.jsonl").write_text(text, encoding="utf-8")
    return work


def test_del_check_cpu_passes_the_offline_twin_from_the_clones_root(tmp_path, capsys, monkeypatch):
    """The relative model path is read from assets/ (no --local, no hub)."""
    monkeypatch.chdir(offline_workdir(tmp_path))
    status = del_check(["examples/smollm2-135m-cpu-offline.yml", "--cpu"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.startswith("ok           validation: Axolotl's validation for a machine without a GPU (--cpu) passed")


# ------------------------------------------------------------------ Axolotl's telemetry, offline


def python_with_site_dir(site_dir: Path, code: str) -> list[str]:
    """A command running ``code`` in a Python whose site directories include ``site_dir``: its .pth files are read
    as those of the venv's site-packages are at start-up (``site.addsitedir`` is what ``site`` runs for them)."""
    boot = f"import site; site.addsitedir({str(site_dir)!r})\n"
    return [sys.executable, "-c", boot + code]


def python_reading_only(site_dir: Path, code: str) -> list[str]:
    """As :func:`python_with_site_dir`, but the venv's own .pth files are not read (``-S``: its site-packages are put
    on ``sys.path`` as plain folders), so that ``site_dir``'s are the only ones: ``make setup`` writes the same
    default into the venv, which would otherwise set the variable in every case."""
    paths = sysconfig.get_paths()
    boot = (
        f"import sys; sys.path += [{paths['purelib']!r}, {paths['platlib']!r}]\n"
        f"import site; site.addsitedir({str(site_dir)!r})\n"
    )
    return [sys.executable, "-S", "-c", boot + code]


TELEMETRY = (
    "import os\nfrom axolotl.telemetry.manager import TelemetryManager\n"
    "print(os.environ.get('AXOLOTL_DO_NOT_TRACK'), TelemetryManager().enabled)"
)


def test_the_venv_default_turns_axolotls_telemetry_off_unless_the_user_set_it(tmp_path):
    """The default is what turns Axolotl's telemetry off (it is on by default: its PostHog client is what retries
    without end offline), and a user's own setting wins."""
    install_defaults(tmp_path)
    assert (tmp_path / PTH_NAME).is_file() and DEFAULTS == {"AXOLOTL_DO_NOT_TRACK": "1"}

    def enabled(site: Path, **changes) -> str:
        env = offline_env(**({"AXOLOTL_DO_NOT_TRACK": None, "DO_NOT_TRACK": None} | changes))
        done = subprocess.run(python_reading_only(site, TELEMETRY), env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()[-2] + " " + done.stdout.split()[-1]

    assert enabled(tmp_path) == "1 False"
    assert enabled(tmp_path / "empty") == "None True"  # without it Axolotl's telemetry is on
    assert enabled(tmp_path, AXOLOTL_DO_NOT_TRACK="0") == "0 True"


@NO_GPU
@pytest.mark.e2e
def test_a_config_typo_offline_exits_with_the_error(tmp_path):
    """`axolotl train` on the offline twin with a misspelled key, offline, AXOLOTL_DO_NOT_TRACK unset but for the
    venv's default: the refusal ends the process (without the default Axolotl's telemetry retried at exit for over five
    minutes: measured here, still running after 420 s; with connections refused instead of unanswered, 205 s).
    The timeout only catches that hang; the run itself took 57-167 s with other work on the machine."""
    (tmp_path / "site").mkdir()
    install_defaults(tmp_path / "site")
    work = offline_workdir(tmp_path)
    config = work / "typo.yml"
    cfg = yaml.safe_load(OFFLINE.read_text(encoding="utf-8"))
    cfg["del_alpah"] = cfg.pop("del_alpha")
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    code = (
        f"import sys, runpy; sys.argv = ['axolotl', 'train', {str(config)!r}]\n"
        "runpy.run_module('axolotl.cli.main', run_name='__main__')"
    )
    # offline as a laptop without a network is: a connection is never answered (a refused one fails at once, and
    # Axolotl's telemetry then gives up after a few minutes instead of hanging)
    with silent_proxy() as proxy:
        env = offline_env(AXOLOTL_DO_NOT_TRACK=None, DO_NOT_TRACK=None, HTTP_PROXY=proxy, HTTPS_PROXY=proxy)
        command = python_with_site_dir(tmp_path / "site", code)
        # its own session: a hang is stopped with the processes `axolotl train` started (accelerate's child)
        process = subprocess.Popen(
            command,
            env=env,
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=360)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output = process.communicate()[0]
            pytest.fail(f"still running after 360 s (Axolotl's telemetry retrying?):\n{output[-4000:]}")
    assert process.returncode != 0, output[-4000:]
    assert "del_alpah" in output and "del_alpha" in output, output[-4000:]


@contextlib.contextmanager
def silent_proxy():
    """A proxy address whose connections are accepted by the kernel and never answered."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


# ------------------------------------------------------------------ the sweep, arm by arm


class Runs:
    """Stands in for starting each arm's process (only that): records the command and the arm's config, returns
    the given exit statuses in turn."""

    def __init__(self, *statuses: int):
        self.statuses, self.commands, self.configs = list(statuses), [], []

    def __call__(self, command):
        self.commands.append(command)
        self.configs.append(yaml.safe_load(Path(command[4]).read_text(encoding="utf-8")))
        return subprocess.CompletedProcess(command, self.statuses.pop(0))


def test_the_sweep_runs_axolotls_arms_in_its_order_and_passes_the_options():
    runs = Runs(0, 0)
    results = sweep.run_arms(str(OFFLINE), str(SWEEP), ["--max-steps", "2"], run=runs)
    out = "outputs/del-smollm2-135m-cpu-offline"  # as Axolotl writes the arm's output_dir
    assert results == [(f"{out}/sweep0001", 0), (f"{out}/sweep0002", 0)]
    # Axolotl's order: the config as written, then its del_alpha 0 twin (tests/axolotl/test_examples.py)
    assert [c["del_alpha"] for c in runs.configs] == [0.03, 0.0]
    assert [c[:4] for c in runs.commands] == [[sys.executable, "-m", "axolotl.cli.main", "train"]] * 2
    assert all(c[5:] == ["--max-steps", "2"] for c in runs.commands)
    assert not any(Path(c[4]).exists() for c in runs.commands)  # Axolotl's temporary arm configs removed


def test_a_failed_arm_makes_the_sweep_fail(monkeypatch, capsys):
    runs = Runs(0, 1)
    monkeypatch.setattr(sweep.subprocess, "run", runs)
    assert sweep.main([str(OFFLINE), "--sweep", str(SWEEP)]) == 1
    out = capsys.readouterr()
    assert "ok     outputs/del-smollm2-135m-cpu-offline/sweep0001" in out.out
    assert "FAILED outputs/del-smollm2-135m-cpu-offline/sweep0002 (axolotl train exited 1)" in out.out
    assert "1 of 2 arms failed" in out.err
    monkeypatch.setattr(sweep.subprocess, "run", Runs(0, 0))
    assert sweep.main([str(OFFLINE), "--sweep", str(SWEEP)]) == 0


def test_the_sweep_refuses_a_wrong_command_line_with_status_2(tmp_path):
    with pytest.raises(SystemExit) as stop:
        sweep.main([str(OFFLINE)])  # no --sweep
    assert stop.value.code == 2
    with pytest.raises(SystemExit) as stop:
        sweep.main([str(tmp_path / "missing.yml"), "--sweep", str(SWEEP)])
    assert stop.value.code == 2


@NO_GPU
@pytest.mark.e2e
def test_a_refused_arm_fails_the_sweep_where_axolotls_own_exits_0(tmp_path):
    """The wrapper and Axolotl for real, on a sweep whose two arms the plugin refuses (`del_alpha: -1`, a misspelled
    `del_alpah`), so that no arm trains: exit status 1, a FAILED line per arm (Axolotl's own `--sweep` exits 0
    here: `axolotl/cli/main.py`, `train`)."""
    bad = tmp_path / "sweep.yml"
    bad.write_text(yaml.safe_dump({"_": [{"del_alpha": -1.0}, {"del_alpah": 0.1}]}), encoding="utf-8")
    env = offline_env(AXOLOTL_DO_NOT_TRACK="1")
    wrapper = subprocess.run(
        [sys.executable, "-m", "del_plugin.axolotl.sweep", str(EXAMPLE), "--sweep", str(bad)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert wrapper.returncode == 1, (wrapper.stdout + wrapper.stderr)[-4000:]
    assert wrapper.stdout.count("FAILED outputs/del-smollm2-135m-cpu/sweep000") == 2, wrapper.stdout


# ------------------------------------------------------------------ the README's CPU commands, offline


def readme_cpu_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- cpu-offline[^>]*-->\n```bash\n(.*?)```", text, re.DOTALL)
    assert block, "the README lost its offline CPU commands"
    return [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]


def for_time(command: list[str]) -> list[str]:
    """A README command with what the test changes for time: two training steps (`--max-steps 2`, as the README
    says to try them), two problems and 8 new tokens for each score."""
    command = list(command)
    if command[:3] == ["python", "-m", "del_plugin.axolotl.sweep"]:
        return [sys.executable, *command[1:], "--max-steps", "2"]
    if command[:2] == ["del-eval", "run"]:
        for option, value in (("--limit", "2"), ("--max-new-tokens", "8")):
            command[command.index(option) + 1] = value
    assert command[0] == "del-eval", command
    return [str(Path(sys.executable).parent / "del-eval"), *command[1:]]


def test_the_readme_cpu_commands_are_the_offline_twins():
    commands = readme_cpu_commands()
    assert [c[:3] for c in commands] == [
        ["python", "-m", "del_plugin.axolotl.sweep"],
        ["del-eval", "run", "--model"],
        ["del-eval", "run", "--model"],
        ["del-eval", "compare", "eval/mle"],
    ]
    assert commands[0][3:] == ["examples/smollm2-135m-cpu-offline.yml", "--sweep", "examples/compare-with-mle.yml"]
    out = yaml.safe_load(OFFLINE.read_text(encoding="utf-8"))["output_dir"].removeprefix("./")
    assert [commands[1][3], commands[2][3]] == [f"{out}/sweep0001", f"{out}/sweep0002"]


@NO_GPU
@pytest.mark.e2e
def test_the_readme_cpu_commands_run_offline_to_a_verdict(tmp_path):
    """The README's offline CPU commands, as written but for time (`for_time`), from a folder laid out as the clone
    (examples/, assets/ as `make setup` links it, with the training file cut to GSM8K's first 16 problems), with
    the hub off and every host unreachable. AXOLOTL_DO_NOT_TRACK is 1, as the .venv's default sets it
    (test_the_venv_default_turns_axolotls_telemetry_off_unless_the_user_set_it)."""
    work = offline_workdir(tmp_path, rows=16)
    env = offline_env(AXOLOTL_DO_NOT_TRACK="1", OMP_NUM_THREADS="1")
    outputs = []
    for command in readme_cpu_commands():
        done = subprocess.run(for_time(command), env=env, cwd=work, capture_output=True, text=True, timeout=600)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, f"{shlex.join(command)}\n{outputs[-1][-6000:]}"
    trained = work / "outputs" / "del-smollm2-135m-cpu-offline"
    for arm in ("sweep0001", "sweep0002"):
        assert (trained / arm / "adapter_config.json").is_file(), outputs[0][-4000:]
    assert re.findall(r"DEL is on: criterion del, alpha ([\d.]+)", outputs[0]) == ["0.03", "0.0"]
    assert re.search(r"(?i)verdict", outputs[-1]), outputs[-1][-4000:]
