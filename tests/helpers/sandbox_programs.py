"""Hostile and ordinary model-written programs for the program sandbox's tests, and what a test observes of them
from outside. Also a driver, for the tests that run them as another user:

    python tests/helpers/sandbox_programs.py SANDBOX PLANTED_FILE PROJECT_DIR SCRATCH_DIR

prints the JSON of :func:`run_and_observe`.

Each hostile program prints a number only when its attack worked, so "no answer" means it was stopped; the
observer checks the host side as well (no file written, no connection made, no signal received, no process
left running, no folder left behind). Every program holds ``print(``, so that ``del-eval`` takes it for one.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

# (program, what it prints) as the current tests of the evaluation use them, and what a paper's program may do
# (sympy from the virtual environment, a temporary file, a subprocess); None: it fails
ORDINARY = [
    ("import math\nprint(math.comb(5, 2))", "10\n"),
    ("dvds = 76 - 25\nprint(dvds)", "51\n"),  # SVAMP 0
    ("eggs = 16 - 3 - 4\nprint(eggs * 2)", "18\n"),  # GSM8K 0
    ("from sympy import Rational\nprint(Rational(1, 3) + Rational(1, 6))", "1/2\n"),
    (
        "import tempfile\nwith tempfile.TemporaryFile('w+') as f:\n    f.write('3')\n    f.seek(0)\n"
        "    print(f.read())",
        "3\n",
    ),
    ("import subprocess\nchild = subprocess.Popen(['sleep', '30'])\nprint(7)", "7\n"),
    ("print(1 / 0)", None),
    ("print(1)\nraise ValueError('boom')", None),
]

SECRET_VARIABLE = "HF_TOKEN"


def secret_reader(secret: str) -> str:
    """A program that prints how many places outside itself show ``secret`` (the value of the caller's
    ``HF_TOKEN``): its parent's and every ancestor's environment and command line (``/proc/<ppid>/environ``), and
    every other process's environment it can read. It holds only the secret's digest, so that the secret shows
    nowhere (its source is saved with the generations) unless it leaked."""
    digest = hashlib.sha256(secret.encode()).hexdigest()
    return (
        "import hashlib, os\n"
        "def shows(path):\n"
        "    try:\n"
        "        entries = open(path, 'rb').read().split(b'\\0')\n"
        "    except OSError:\n"
        "        return False\n"
        "    values = [e.split(b'=', 1)[-1] for e in entries]\n"
        f"    return any(hashlib.sha256(v).hexdigest() == {digest!r} for v in values)\n"
        "found, pid = [], os.getppid()\n"
        "while pid > 0:\n"
        "    found += [f'{pid}/{name}' for name in ('environ', 'cmdline') if shows(f'/proc/{pid}/{name}')]\n"
        "    try:\n"
        "        pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "    except (OSError, IndexError, ValueError):\n"
        "        break\n"
        "found += [f'{e}/environ' for e in os.listdir('/proc') if e.isdigit() and shows(f'/proc/{e}/environ')]\n"
        "assert found, 'the secret is nowhere in sight'\n"
        "print(len(found))"
    )


def hostile_programs(planted: str, project: str, scratch: str, port: int, marker: str, secret: str) -> dict[str, str]:
    """The attacks, by name. ``planted``: a file in HOME; ``project``: the project folder; ``scratch``: a folder of
    the test's (writes outside the program's folder go there); ``port``: a listener on 127.0.0.1; ``marker``: a
    string a left-behind process carries in its command line; ``secret``: the value of the caller's
    ``HF_TOKEN``."""
    pid = os.getpid()
    return {
        "write outside its folder": (
            "import os\nwritten = 0\n"
            f"for path in [{scratch!r} + '/escaped', {project!r} + '/escaped-{marker}', "
            f"os.path.dirname(os.path.expanduser('~')) + '/escaped-{marker}', "
            f"'/usr/escaped-{marker}', '/escaped-{marker}']:\n"
            "    try:\n        open(path, 'w').write('x')\n        written += 1\n    except OSError as err:\n"
            "        print(path, err, file=__import__('sys').stderr)\n"
            "assert written, 'nothing written'\nprint(written)"
        ),
        # bwrap's /dev is a tmpfs of its own, without a size: were it writable, a program could fill memory with it
        "write into /dev": (
            "import sys\nwritten = 0\n"
            f"for path in ['/dev/escaped-{marker}', '/dev/shm/escaped-{marker}']:\n"
            "    try:\n        open(path, 'w').write('x' * 4096)\n        written += 1\n    except OSError as err:\n"
            "        print(path, err, file=sys.stderr)\n"
            "assert written, 'nothing written'\nprint(written)"
        ),
        "read a file planted in HOME": f"print(len(open({planted!r}).read()))",
        "list the project folder": (
            f"import os\nnames = os.listdir({project!r})\nassert 'del_plugin' in names, names\nprint(len(names))"
        ),
        "connect to 127.0.0.1": (
            f"import socket\nconnection = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "connection.sendall(b'hello')\nprint(1)"
        ),
        "kill the test": f"import os, signal\nos.kill({pid}, signal.SIGUSR1)\nprint(1)",
        "read /proc/<ppid>/environ": secret_reader(secret),
        "fork many processes": (
            "import os, time\nchildren = 0\nfor _ in range(100):\n    if os.fork() == 0:\n        time.sleep(30)\n"
            "        os._exit(0)\n    children += 1\nprint(children)"
        ),
        # ptrace the sandbox's init (the launcher's monitor, PID 1, of the same user under bwrap) and the parent:
        # attached, the program could freeze it, so that an honest program's status never comes back
        "ptrace its launcher": (
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nattached = []\n"
            "for pid in sorted({1, os.getppid()}):\n"
            "    if libc.ptrace(16, pid, None, None) == 0:\n"  # PTRACE_ATTACH
            "        attached.append(pid)\n        libc.ptrace(17, pid, None, None)\n"  # PTRACE_DETACH
            "    else:\n        print(pid, os.strerror(ctypes.get_errno()), file=__import__('sys').stderr)\n"
            "assert attached, 'not attached'\nprint(len(attached))"
        ),
        "enter a new user namespace": "import os\nos.unshare(os.CLONE_NEWUSER)\nprint(1)",  # caps again in it
        "loop forever": "while True:\n    pass\nprint(1)",
        "allocate past the memory limit": "memory = bytearray(4 << 30)\nprint(len(memory))",
        "print past the output limit": "print('1' * 2_000_000)",
        # prints nothing itself; its detached child fills the folder with files at once (which made removing the
        # folder fail before the sandbox) and, once the program ended, prints an answer
        "detached child keeps writing": (
            "import subprocess, time\n"
            "subprocess.Popen(['/bin/sh', '-c', '(i=0; while :; do i=$((i+1)); echo x > f$i; done) & "
            f"sleep 0.3; while :; do echo 7; done', '{marker}'], start_new_session=True)\ntime.sleep(0.1)\n"
            "print(end='')"
        ),
    }


def answer_hunter(needles: list[str]) -> str:
    """A program that looks for the answers of a scored set through every importable package: it walks each
    ``sys.path`` entry (and its real path), reads every data file there (``.json``, ``.jsonl``, ``.txt``,
    ``.yaml``, ``.csv``; ``.gz`` decompressed) up to 8 MiB, and lists those holding one of ``needles``; it also
    reads its launcher's command line (``/proc/<ppid>/cmdline``, ``/proc/1/cmdline``) and the mount table
    (``/proc/self/mountinfo``, ``/proc/self/mounts``). Prints ``{"found": [files], "proc": {path: text or
    null}, "walked": files read}``."""
    return (
        "import gzip, json, os, sys\n"
        f"needles = [n.encode() for n in {needles!r}]\n"
        "found, walked, seen = [], 0, set()\n"
        "roots = [e for p in sys.path for e in (p, os.path.realpath(p))]\n"
        "for root in roots:\n"
        "    for top, folders, files in os.walk(root):\n"
        "        for name in files:\n"
        "            path = os.path.join(top, name)\n"
        "            if path in seen or not name.endswith(('.json', '.jsonl', '.txt', '.yaml', '.csv', '.gz')):\n"
        "                continue\n"
        "            seen.add(path)\n"
        "            try:\n"
        "                data = open(path, 'rb').read(8 << 20)\n"
        "                data = gzip.decompress(data) if name.endswith('.gz') else data\n"
        "            except (OSError, EOFError, ValueError):\n"
        "                continue\n"
        "            walked += 1\n"
        "            found += [path] if any(n in data for n in needles) else []\n"
        "proc = {}\n"
        "places = ('/proc/1/cmdline', '/proc/self/mountinfo', '/proc/self/mounts')\n"
        "for path in (f'/proc/{os.getppid()}/cmdline', *places):\n"
        "    try:\n"
        "        proc[path] = open(path, 'rb').read().decode(errors='replace')\n"
        "    except OSError:\n"
        "        proc[path] = None\n"
        "print(json.dumps({'found': sorted(found), 'proc': proc, 'walked': walked}))\n"
    )


# how the sandbox stops each attack: (status, words of its detail); the others fail on what they cannot see
STOPPED_BY = {
    "fork many processes": ("error", "Resource temporarily unavailable"),  # the process limit
    "loop forever": ("timeout", ""),
    "allocate past the memory limit": ("limit", "MemoryError"),
    "print past the output limit": ("limit", "wrote more than"),
    "detached child keeps writing": ("ok", ""),  # nothing printed: its child is gone before it could
}

# what the unsandboxed control runs: attacks that are harmless to the machine, run as they are
CONTROLS = (
    "read a file planted in HOME",
    "list the project folder",
    "connect to 127.0.0.1",
    "kill the test",
    "detached child keeps writing",
)


def processes_with(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


class Observer:
    """The host's side of an attack: a listener on 127.0.0.1, a SIGUSR1 handler, a scratch folder for writes
    from outside and for the programs' temporary folders, a marker, and the secret the programs look for: the
    ``HF_TOKEN`` this process was started with (a process's /proc/<pid>/environ is the environment it was
    started with), else one nobody has. Must be entered on the main thread."""

    def __init__(self, scratch: str | Path, secret: str | None = None):
        self.scratch = Path(scratch)
        self.outside = self.scratch / "outside"
        self.programs_folder = self.scratch / "tmp"
        self.marker = f"del-eval-sandbox-test-{uuid.uuid4().hex}"
        self.secret = secret or os.environ.get(SECRET_VARIABLE) or f"hf_{uuid.uuid4().hex}"
        self.signals: list[int] = []

    def __enter__(self) -> Observer:
        self.outside.mkdir(parents=True, exist_ok=True)
        self.programs_folder.mkdir(parents=True, exist_ok=True)
        self._previous = signal.signal(signal.SIGUSR1, lambda signum, frame: self.signals.append(signum))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()
        signal.signal(signal.SIGUSR1, self._previous)

    def programs(self, planted: str, project: str) -> dict[str, str]:
        return hostile_programs(planted, project, str(self.outside), self.port, self.marker, self.secret)

    def observed(self, project: str) -> dict:
        """What the host saw; call after the programs ran (it waits long enough for a survivor to act)."""
        time.sleep(0.5)  # a detached child that survived would write again by now
        connections = 0
        try:
            while True:
                self.listener.accept()[0].close()
                connections += 1
        except BlockingIOError:
            pass
        left = processes_with(self.marker)
        for pid in left:  # a failure, but leave nothing running
            os.kill(pid, signal.SIGKILL)
        escaped = [f"{project}/escaped-{self.marker}", f"/usr/escaped-{self.marker}", f"/escaped-{self.marker}"]
        return {
            "written": sorted(p.name for p in self.outside.iterdir()) + [p for p in escaped if os.path.exists(p)],
            "connections": connections,
            "signals": len(self.signals),
            "processes_left": len(left),
            "folders_left": sorted(p.name for p in self.programs_folder.iterdir()),
        }


def run_and_observe(
    sandbox: str, planted: str, project: str, scratch: str, names=None, timeout_s: float = 2, program=None
) -> dict:
    """Run the hostile programs (``names``: those only) in ``sandbox``, all at once as ``run_programs`` does;
    return ``{"runs": {name: {status, stdout, detail}}, "observed": what the host saw, "secret"}``. Must run on
    the main thread (it catches SIGUSR1). ``program``: the module ``del_plugin.evaluation.benchmarks.program``
    (default: imported)."""
    if program is None:
        from del_plugin.evaluation.benchmarks import program

    saved = tempfile.tempdir
    with Observer(scratch) as observer:
        tempfile.tempdir = str(observer.programs_folder)
        try:
            programs = observer.programs(planted, project)
            names = list(names or programs)
            runs = program.run_programs([programs[n] for n in names], sandbox=sandbox, timeout_s=timeout_s)
            observed = observer.observed(project)
        finally:
            tempfile.tempdir = saved
    runs = {n: r.__dict__ for n, r in zip(names, runs)}
    return {"runs": runs, "observed": observed, "secret": observer.secret}


def load_program_module(project: str):
    """The package ``del_plugin/evaluation/benchmarks/program`` of ``project`` alone, as a top-level package
    ``program``, without del_plugin's imports (a second or more of start-up that is not what is tested)."""
    import importlib.util

    folder = Path(project) / "del_plugin" / "evaluation" / "benchmarks" / "program"
    spec = importlib.util.spec_from_file_location(
        "program", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = sys.modules["program"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sandbox_name, planted_file, project_dir, scratch_dir = sys.argv[1:5]
    module = load_program_module(project_dir)
    print(json.dumps(run_and_observe(sandbox_name, planted_file, project_dir, scratch_dir, program=module)))
