"""The sandbox of model-written programs (``del-eval --program-of-thought``), tried by hostile programs: each attack
is stopped, scored "no answer", seen to have failed from the host's side too, and the run goes on; the same
attacks succeed without the sandbox (so these tests can fail); ordinary programs print what they print without
it. Run in every sandbox that works here, as the test's user and, when the tests run as root, as an unprivileged
user; a sandbox that cannot work on this machine is skipped with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from del_plugin.evaluation import cli
from del_plugin.evaluation.benchmarks import program as program_module
from del_plugin.evaluation.benchmarks.program import SANDBOXES, UNSANDBOXED, run_program, run_programs
from del_plugin.evaluation.benchmarks.program import folders as program_folders
from del_plugin.evaluation.benchmarks.program import mounts as program_mounts
from del_plugin.evaluation.benchmarks.program.bwrap import bwrap_command, bwrap_executable, bwrap_problem
from del_plugin.evaluation.benchmarks.program.choice import sandbox_problem
from del_plugin.evaluation.benchmarks.program.launch import LAUNCHER, launcher_settings
from del_plugin.evaluation.benchmarks.program.mounts import ALLOWED_PACKAGES, hidden_mounts, python_binds

from repo import REPO
from sandbox_programs import (
    CONTROLS,
    ORDINARY,
    SECRET_VARIABLE,
    STOPPED_BY,
    Observer,
    answer_hunter,
    run_and_observe,
    secret_reader,
)

UNPRIVILEGED = 64321  # a user (and group) with no account here: nothing on the machine is theirs


def require(sandbox: str) -> None:
    if sandbox != UNSANDBOXED and (problem := sandbox_problem(sandbox)):
        pytest.skip(f"the {sandbox} sandbox cannot run here: {problem}")


@pytest.fixture
def planted_in_home():
    """A file in the user's HOME (removed afterwards), which no program may read."""
    path = Path.home() / f".del-eval-sandbox-test-{uuid.uuid4().hex}"
    path.write_text("the user's secret\n", encoding="utf-8")
    yield str(path)
    path.unlink(missing_ok=True)


def assert_stopped(result: dict) -> None:
    """Every attack of :func:`run_and_observe`'s ``result`` printed nothing (no answer), ended as
    :data:`STOPPED_BY` says (the others fail on what they cannot see), and the host saw nothing of it."""
    for name, run in result["runs"].items():
        status, words = STOPPED_BY.get(name, ("error", ""))
        assert run["stdout"] == "" and run["status"] == status and words in run["detail"], (name, run)
    clean = {"written": [], "connections": 0, "signals": 0, "processes_left": 0, "folders_left": []}
    assert result["observed"] == clean
    assert result["secret"] not in json.dumps(result["runs"])


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_hostile_programs_are_stopped_and_score_no_answer(sandbox, planted_in_home, tmp_path):
    require(sandbox)
    assert_stopped(run_and_observe(sandbox, planted_in_home, str(REPO), str(tmp_path)))


def test_without_the_sandbox_the_attacks_succeed_and_a_detached_child_costs_nothing(planted_in_home, tmp_path):
    # the control: the hostile programs are real attacks (the harmless ones, run as they are)
    result = run_and_observe(UNSANDBOXED, planted_in_home, str(REPO), str(tmp_path), names=CONTROLS)
    runs = result["runs"]
    for name in CONTROLS:
        if name != "detached child keeps writing":
            assert runs[name]["status"] == "ok" and int(runs[name]["stdout"]) > 0, (name, runs[name])
    assert (result["observed"]["connections"], result["observed"]["signals"]) == (1, 1)
    # a child in a session of its own, still filling the program's folder: killed, the folder removed, and the
    # run goes on (it made removing the folder fail with "Directory not empty" and stopped del-eval score)
    assert runs["detached child keeps writing"] == {"status": "ok", "stdout": "", "detail": ""}
    assert result["observed"]["processes_left"] == 0 and result["observed"]["folders_left"] == []


_RUN_IN_EACH = """
import json, sys
sys.path.insert(0, sys.argv[1] + '/tests/helpers')
from sandbox_programs import load_program_module
program, code = load_program_module(sys.argv[1]), sys.stdin.read()
print(json.dumps({mode: program.run_program(code, sandbox=mode, timeout_s=20).__dict__ for mode in sys.argv[2:]}))
"""


def test_a_program_cannot_read_the_parents_environment(tmp_path):
    """A secret in the environment del-eval was started with (HF_TOKEN, as a shell would pass it), looked for in
    /proc/<ppid>/environ, every ancestor's environment and command line, and every process's environment: out of
    sight in every sandbox (its own PID namespace and /proc); found without one. The caller is a process started
    with the secret (a process's /proc/<pid>/environ is the environment it was started with), running
    program.py alone."""
    secret = f"hf_{uuid.uuid4().hex}"
    sandboxes = [s for s in SANDBOXES if not sandbox_problem(s)]
    if not sandboxes:
        pytest.skip("no sandbox works here: " + "; ".join(map(sandbox_problem, SANDBOXES)))
    command = [sys.executable, "-I", "-c", _RUN_IN_EACH, str(REPO), *sandboxes, UNSANDBOXED]
    environment = dict(os.environ, **{SECRET_VARIABLE: secret})
    result = subprocess.run(
        command, input=secret_reader(secret), capture_output=True, text=True, env=environment, timeout=300
    )
    runs = json.loads(result.stdout)
    for sandbox in sandboxes:
        run = runs[sandbox]
        assert (run["status"], run["stdout"]) == ("error", "") and "nowhere in sight" in run["detail"], run
    assert runs[UNSANDBOXED]["status"] == "ok" and int(runs[UNSANDBOXED]["stdout"]) >= 1, runs[UNSANDBOXED]


@pytest.mark.parametrize("sandbox", SANDBOXES + (UNSANDBOXED,))
def test_ordinary_programs_print_what_they_print_without_the_sandbox(sandbox):
    """The programs of the evaluation's tests (SVAMP 0, GSM8K 0, ...), sympy from the virtual environment, a
    temporary file and a subprocess; a failing program gives no output, as without the sandbox."""
    require(sandbox)
    runs = run_programs([code for code, _ in ORDINARY], sandbox=sandbox, timeout_s=20)
    for (code, printed), run in zip(ORDINARY, runs):
        expected = ("error", "") if printed is None else ("ok", printed)
        assert (run.status, run.stdout) == expected, (code, run)


_ALLOWED_IMPORTS = (
    "\n".join(f"import {name}" for name in ALLOWED_PACKAGES)
    + """
import numpy, sympy
print(int(numpy.array([3, 4]).sum()), sympy.Rational(1, 3) + sympy.Rational(1, 6))
try:
    import lm_eval
except ImportError:
    print('no lm_eval')
"""
)


@pytest.mark.parametrize("sandbox", SANDBOXES + (UNSANDBOXED,))
def test_a_program_imports_the_allowed_packages_and_no_other(sandbox):
    pytest.importorskip("lm_eval")  # installed beside del-eval (the lock): out of sight in a sandbox
    require(sandbox)
    run = run_program(_ALLOWED_IMPORTS, sandbox=sandbox, timeout_s=60)
    assert run.status == "ok", run
    assert run.stdout == ("7 1/2\n" if sandbox == UNSANDBOXED else "7 1/2\nno lm_eval\n")


@pytest.mark.parametrize("sandbox", SANDBOXES + (UNSANDBOXED,))
def test_no_answer_is_found_through_sys_path_and_proc_shows_nothing(sandbox):
    """lm-eval (in the lock) ships 11 MATH test problems with their answers
    (``lm_eval/tasks/score/math/to_be_fixed_questions.json``): a program that walks every importable package's
    data files for them finds none in a sandbox, where it reads no launcher command line and no mount table
    either (no procfs); without the sandbox it finds the file (so the test can fail) and its launcher's command
    line holds no setting (they come on stdin)."""
    lm_eval = pytest.importorskip("lm_eval")
    require(sandbox)
    key = Path(lm_eval.__file__).parent / "tasks" / "score" / "math" / "to_be_fixed_questions.json"
    needles = [problem["problem"][:60] for problem in json.loads(key.read_text(encoding="utf-8"))]
    run = run_program(answer_hunter(needles), sandbox=sandbox, timeout_s=300)
    assert run.status == "ok", run
    result = json.loads(run.stdout)
    assert result["walked"] > 0  # it read the files it could see (the standard library's, numpy's, ...)
    if sandbox != UNSANDBOXED:
        assert result["found"] == [] and set(result["proc"].values()) == {None}, result
        return
    assert any(Path(found).samefile(key) for found in result["found"]), result["found"]
    launcher = result["proc"][next(iter(result["proc"]))].split("\0")  # /proc/<ppid>/cmdline: the launcher
    assert launcher == [sys.executable, "-I", "-c", LAUNCHER, ""]


# ---------------------------------------------------------------------------------------------- another user


def reachable_by_everyone(paths: list[str], staging: str) -> list[str]:
    """Shell commands (for root, in a private mount namespace) that let any user reach ``paths``: a folder on the
    way that others may not enter (a Python installed under /root, mode 700; pytest's folder) is covered with an
    empty tmpfs into which only ``paths`` are bound back, each from a bind made beforehand in the empty folder
    ``staging``."""
    hidden: dict[str, list[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for depth in range(2, len(parts) + int(os.path.isdir(path))):  # folders on the way, and a folder itself
            folder = str(Path(*parts[:depth]))
            if not os.stat(folder).st_mode & 0o001:
                hidden.setdefault(folder, []).append(path)
                break
    bound = [(str(i), path) for i, path in enumerate(p for found in hidden.values() for p in found)]
    # a file (a virtual environment's pyvenv.cfg) is bound onto a file, a folder onto a folder
    make = {path: "mkdir" if os.path.isdir(path) else "touch" for _, path in bound}
    commands = [f"{make[path]} {staging}/{i} && mount --bind {path} {staging}/{i}" for i, path in bound]
    commands += [f"mount -t tmpfs -o mode=755 tmpfs {folder}" for folder in hidden]
    place = {p: f"mkdir -p {p}" if os.path.isdir(p) else f"mkdir -p {os.path.dirname(p)} && touch {p}" for p in make}
    commands += [f"{place[path]} && mount --bind {staging}/{i} {path}" for i, path in bound]
    return commands


def run_as_unprivileged_user(sandbox: str, scratch: Path) -> dict:
    """The hostile programs run by :func:`run_and_observe` in a process of uid and gid :data:`UNPRIVILEGED` (no
    supplementary groups), started by root with ``setpriv`` in a private mount namespace."""
    home = scratch / "home"
    home.mkdir(parents=True)
    planted = home / "planted.txt"
    planted.write_text("the user's secret\n", encoding="utf-8")
    for path in (scratch, home, planted):
        os.chown(path, UNPRIVILEGED, UNPRIVILEGED)
    # a bwrap found on the caller's PATH (say /usr/local/bin) is the one the sandbox runs: on the user's PATH too
    bwrap = bwrap_executable()
    extra = [os.path.dirname(bwrap)] if bwrap and os.path.dirname(bwrap) not in ("/usr/bin", "/bin") else []
    needed = sorted({real for real, _ in python_binds()} | {str(REPO), str(scratch), *extra})
    driver = [sys.executable, str(REPO / "tests" / "helpers" / "sandbox_programs.py"), sandbox, str(planted)]
    user = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups"]
    secret = f"{SECRET_VARIABLE}=hf_{uuid.uuid4().hex}"  # in the environment it starts with: in its /proc/<pid>/environ
    path = ":".join(extra + ["/usr/bin", "/bin"])
    environment = ["env", "-i", f"PATH={path}", f"HOME={home}", f"PYTHONPATH={REPO}", secret]
    command = user + environment + driver + [str(REPO), str(scratch)]
    staging = tempfile.mkdtemp(prefix="del-eval-sandbox-staging-")
    try:
        script = " && ".join(reachable_by_everyone(needed, staging) + [" ".join(command)])
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(staging)  # its folders were mount points in the namespace only
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_hostile_programs_are_stopped_for_an_unprivileged_user(sandbox, tmp_path):
    """As a user without privileges (the path of every non-root user: they map only themselves into the
    sandbox), where the tests run as root."""
    if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs root, setpriv and unshare to start a process as another user")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bwrap is not installed (Debian, Ubuntu: apt install bubblewrap)")
    user = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups", "true"]
    tried = subprocess.run(["unshare", "--mount", "--propagation", "private", *user], capture_output=True, text=True)
    if tried.returncode != 0:  # e.g. a container that refuses mount namespaces
        pytest.skip(f"cannot start a process as uid {UNPRIVILEGED} here: {tried.stderr.strip()}")
    result = run_as_unprivileged_user(sandbox, tmp_path / "scratch")
    assert_stopped(result)


# ---------------------------------------------------------------------------------------------- del-eval score


def test_del_eval_score_runs_hostile_outputs_in_the_sandbox_and_goes_on(planted_in_home, tmp_path):
    """``del-eval score --program-of-thought`` on a predictions file of hostile programs and one honest program:
    the run completes, the honest program's answer is scored, every attack is "no answer", and the report says
    which sandbox ran them."""
    try:
        sandbox = program_module.program_sandbox()  # the one del-eval picks here
    except program_module.SandboxUnavailableError as err:
        pytest.skip(str(err))
    out = tmp_path / "report"
    with Observer(tmp_path / "scratch") as observer:
        programs = observer.programs(planted_in_home, str(REPO))
        del programs["loop forever"]  # 5 s at del-eval's limit; stopped by the wall clock in the tests above
        honest = "dvds = 76 - 25\nprint(dvds)"  # SVAMP 0: 51
        outputs = [honest, *programs.values()]
        predictions = tmp_path / "predictions.jsonl"
        predictions.write_text("".join(json.dumps({"id": i, "output": o}) + "\n" for i, o in enumerate(outputs)))
        environment = dict(os.environ, TMPDIR=str(observer.programs_folder), **{SECRET_VARIABLE: observer.secret})
        environment["PYTHONPATH"] = str(REPO)
        command = [sys.executable, "-m", "del_plugin.evaluation.cli", "score", "--benchmark", "svamp"]
        command += ["--predictions", str(predictions), "--out", str(out), "--program-of-thought"]
        finished = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
        observed = observer.observed(str(REPO))
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "complete" and report["settings"]["program_sandbox"] == sandbox
    assert f"Programs ran in the {sandbox} sandbox." in (out / "report.md").read_text()
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == list(range(len(outputs)))
    assert (records[0]["prediction"], records[0]["correct"]) == ("51", True)
    for name, record in zip(programs, records[1:]):
        status, words = STOPPED_BY.get(name, ("error", ""))
        assert record["prediction"] is None and record["program"]["stdout"] == "", (name, record)
        assert record["program"]["status"] == status and words in record["program"]["detail"], (name, record)
    counts = report["datasets"][0]["generation"]["program_of_thought"]
    assert counts == {"asked": len(outputs), "programs": len(outputs), "ran": 2, "answered": 1, "cot_fallback": 0}
    assert observed == {"written": [], "connections": 0, "signals": 0, "processes_left": 0, "folders_left": []}
    assert observer.secret not in (out / "generations.jsonl").read_text() + finished.stdout + finished.stderr


def test_without_a_sandbox_program_of_thought_stops_before_any_program_unless_unsandboxed(tmp_path):
    """A machine whose kernel refuses new user namespaces (made here by a user namespace that allows none inside
    it): ``--program-of-thought`` stops with the reasons and the fixes before it writes or runs anything. With
    ``--unsandboxed-programs`` the programs run without a sandbox, and the report says so."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to make a user namespace that refuses more")
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(json.dumps({"id": 0, "output": "dvds = 76 - 25\nprint(dvds)"}) + "\n")
    score = ["score", "--benchmark", "svamp", "--predictions", str(predictions), "--program-of-thought"]
    refused = f"{sys.executable} -m del_plugin.evaluation.cli {' '.join(score)} --out {tmp_path / 'refused'}"
    refusing = ["unshare", "--user", "--map-root-user", "sh", "-c", "echo 0 > /proc/sys/user/max_user_namespaces; "]
    if subprocess.run(refusing[:3] + ["true"], capture_output=True).returncode != 0:
        refusing = ["sh", "-c", ""]  # this machine refuses user namespaces already
    result = subprocess.run(
        refusing[:-1] + [refusing[-1] + refused],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=600,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    message = [line for line in result.stderr.splitlines() if line.startswith("del-eval: error:")]
    assert len(message) == 1 and "none works here" in message[0] and "namespaces:" in message[0], result.stderr
    assert "--unsandboxed-programs" in message[0] and "bubblewrap" in message[0]
    assert not (tmp_path / "refused").exists()  # stopped before anything was written or run

    out = tmp_path / "unsandboxed"
    assert cli.main([*score, "--out", str(out), "--unsandboxed-programs"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["program_sandbox"] == UNSANDBOXED and report["datasets"][0]["generation"]["correct"] == 1
    assert "Programs ran without a sandbox." in (out / "report.md").read_text()


_RUN_WITH_ITS_PYTHON = """
import json, sys
sys.path.insert(0, sys.argv[1] + '/tests/helpers')
from sandbox_programs import load_program_module
program, code = load_program_module(sys.argv[1]), sys.stdin.read()
print(json.dumps({
    mode: program.choice.sandbox_problem(mode) or program.run_program(code, sandbox=mode, timeout_s=20).__dict__
    for mode in program.SANDBOXES
}))
"""


def test_a_python_installation_under_tmp_runs_programs_in_a_folder_of_their_own(tmp_path):
    """A virtual environment made under /tmp is bound into the sandbox at its own path: the program's folder is
    then beside /tmp, empty and writable, and what the binds put under /tmp is read-only (in /tmp, bwrap's tmpfs
    hid the interpreter, and the namespaces sandbox showed its folders in the program's folder, writable there)."""
    if not (str(tmp_path.resolve()) + "/").startswith("/tmp/"):
        pytest.skip(f"the tests' temporary folder {tmp_path} is not under /tmp")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    code = (
        "import os, json, sys\nblocked = []\n"
        "for path in [sys.prefix + '/escaped', os.path.dirname(sys.prefix) + '/escaped', '/tmp/escaped']:\n"
        "    try:\n        open(path, 'w').write('x')\n    except OSError:\n        blocked.append(path)\n"
        "open('mine.txt', 'w').write('x')\n"
        "print(json.dumps([sys.prefix, os.getcwd(), sorted(os.listdir('.')), blocked]))"
    )
    result = subprocess.run(
        [str(python), "-I", "-c", _RUN_WITH_ITS_PYTHON, str(REPO)],
        input=code,
        capture_output=True,
        text=True,
        timeout=300,
    )
    runs = json.loads(result.stdout)
    ran = {mode: run for mode, run in runs.items() if isinstance(run, dict)}
    if not ran:
        pytest.skip("no sandbox works here: " + "; ".join(runs.values()))
    for mode, run in ran.items():
        assert run["status"] == "ok", (mode, run)
        prefix, folder, listing, blocked = json.loads(run["stdout"])
        assert prefix == str(venv), (mode, run)
        assert listing == ["mine.txt", "program.py"], (mode, listing)  # nothing of the binds in it
        assert len(blocked) == 3, (mode, blocked)
        assert folder == "/del-eval-program", (mode, run)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv"]  # nothing escaped onto the host


# ---------------------------------------------------------------------------------------------- bwrap, killed runs


def test_bwrap_is_checked_and_run_from_one_absolute_path(tmp_path, monkeypatch):
    """A bwrap found on the caller's PATH only (as in /usr/local/bin) is the one checked and the one the command
    runs, by its absolute path: the programs' own PATH (/usr/bin:/bin) would not find it (the check passed, then
    every program failed with "cannot run bwrap: No such file or directory")."""
    folder = tmp_path / "local-bin"
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho bubblewrap 0.8.0\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    bwrap_executable.cache_clear()
    try:
        assert bwrap_problem() is None
        settings = launcher_settings("bwrap", 3, 5, 1 << 30, 1000, 4)
        assert bwrap_command(settings)[0] == str(fake)
    finally:
        bwrap_executable.cache_clear()


_RUN_ONE = """
import sys
sys.path.insert(0, sys.argv[1] + '/tests/helpers')
from sandbox_programs import load_program_module
program = load_program_module(sys.argv[1])
print(program.run_program('import time\\ntime.sleep(120)\\nprint(1)', sandbox='none', timeout_s=120))
"""


def test_the_folders_of_a_killed_run_are_removed_by_the_next_run_and_a_running_ones_kept(tmp_path):
    """Two runs each with a program running (their folders in TMPDIR); one is killed with SIGKILL (no cleanup of
    its own runs): the next run in this process removes its folder, and keeps the folder of the one still going
    (concurrent runs share TMPDIR)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    environment = dict(os.environ, TMPDIR=str(tmp))
    command = [sys.executable, "-I", "-c", _RUN_ONE, str(REPO)]
    killed, running = (subprocess.Popen(command, env=environment) for _ in range(2))
    try:
        deadline = time.monotonic() + 120
        while len([p for p in tmp.iterdir() if (p / "program.py").exists()]) < 2:
            assert time.monotonic() < deadline, list(tmp.iterdir())
            time.sleep(0.1)
        folders = {p.name.split("-")[4]: p for p in tmp.iterdir()}  # del-eval-program-<pid ns>-<pid>-<start>-*
        assert set(folders) == {str(killed.pid), str(running.pid)}, folders
        killed.kill()
        killed.wait()
        assert folders[str(killed.pid)].exists()  # nothing of the killed run removed it
        # a run's in another PID namespace (a container sharing TMPDIR): its pid means nothing here, kept
        elsewhere = tmp / f"del-eval-program-1-{killed.pid}-1-abc"
        elsewhere.mkdir()
        saved = tempfile.tempdir
        tempfile.tempdir = str(tmp)
        program_folders._remove_folders_of_ended_runs.cache_clear()
        try:
            assert run_programs(["print(6 * 7)"], sandbox=UNSANDBOXED)[0].stdout == "42\n"
        finally:
            tempfile.tempdir = saved
            program_folders._remove_folders_of_ended_runs.cache_clear()
        assert not folders[str(killed.pid)].exists()
        assert folders[str(running.pid)].exists() and elsewhere.exists()  # a run still going keeps its folder
    finally:
        for process in (killed, running):
            process.kill()
            process.wait()


def test_the_answer_key_is_covered_wherever_a_bind_shows_it(tmp_path):
    """Where the covers go (the mounts themselves are tested from inside the sandbox in tests/project/test_install.py):
    a
    hidden folder under a bind shown at two paths (a venv's link and its real path) is covered at both; a hidden
    file inside a covered folder is covered with it; a hidden folder that holds a bind (a --benchmark-dir above
    the Python installation) is not covered whole, and the set file named beside it is."""
    venv = tmp_path / "venv"
    sets = venv / "share" / "sets"
    (sets / "sat").mkdir(parents=True)
    (sets / "sat" / "sat.json").write_text("[]")
    binds = [(str(venv), str(venv)), (str(venv), "/opt/venv-link")]
    covers = hidden_mounts([str(sets), str(sets / "sat" / "sat.json")], binds)
    assert [c for c in covers if "sets" in c[0]] == [["/opt/venv-link/share/sets", "folder"], [str(sets), "folder"]]
    covers = hidden_mounts([str(tmp_path), str(sets / "sat" / "sat.json")], binds)
    assert [c for c in covers if "sat" in c[0]] == [
        ["/opt/venv-link/share/sets/sat/sat.json", "file"],
        [str(sets / "sat" / "sat.json"), "file"],
    ]
    assert [str(tmp_path), "folder"] not in covers


def test_folders_of_packages_become_views_of_the_allowed_ones_and_covers_in_them_go(tmp_path, monkeypatch):
    """Where the package views go (the mounts themselves: the tests above, from inside): each folder of packages
    under a bind, at every path the binds show it, with the allowed packages that lie in it bound back; a cover of
    the answer key inside a view but outside its packages is dropped (out of sight already: no mount point), one
    inside an allowed package or outside every view is kept."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "site-packages"
    for name in ("sympy", "numpy.libs", "lm_eval", "del_plugin/evaluation/data"):
        (site / name).mkdir(parents=True)
    monkeypatch.setattr(program_mounts, "package_folders", lambda: (str(site),))
    monkeypatch.setattr(
        program_mounts, "allowed_package_paths", lambda: (str(site / "numpy.libs"), str(site / "sympy"))
    )
    binds = [(str(venv), str(venv)), (str(venv), "/opt/venv-link")]
    views = program_mounts.package_views(binds)
    link = "/opt/venv-link/lib/site-packages"
    assert views == [
        [link, [[str(site / "numpy.libs"), f"{link}/numpy.libs"], [str(site / "sympy"), f"{link}/sympy"]]],
        [str(site), [[str(site / "numpy.libs"), str(site / "numpy.libs")], [str(site / "sympy"), str(site / "sympy")]]],
    ]
    covers = [[f"{link}/del_plugin/evaluation/data", "folder"], [str(site / "sympy" / "key.json"), "file"]]
    covers += [[str(venv / "share" / "sets"), "folder"]]
    assert program_mounts.shown(covers, views) == covers[1:]
