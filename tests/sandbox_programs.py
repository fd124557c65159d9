"""Hostile and ordinary model-written programs for the program sandbox's tests, and what a test observes of them
from outside. Also a driver, for the tests that run them as another user:

    python tests/sandbox_programs.py SANDBOX PLANTED_FILE PROJECT_DIR SCRATCH_DIR

prints the JSON of :func:`run_and_observe`.

Each hostile program prints a number only when its attack worked, so "no answer" means it was stopped; the
observer checks the host side as well (no file written, no connection made, no signal received, no process
left running, no folder left behind).
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

# (program, what it prints) as the current tests of the evaluation use them; None: it fails
ORDINARY = [
    ("import math\nprint(math.comb(5, 2))", "10\n"),
    ("dvds = 76 - 25\nprint(dvds)", "51\n"),  # SVAMP 0
    ("eggs = 16 - 3 - 4\nprint(eggs * 2)", "18\n"),  # GSM8K 0
    ("from sympy import Rational\nprint(Rational(1, 3) + Rational(1, 6))", "1/2\n"),  # MATH-style, site-packages
    ("import tempfile\nwith tempfile.TemporaryFile('w+') as f:\n    f.write('3')\n    f.seek(0)\n    print(f.read())", "3\n"),
    ("import subprocess\nchild = subprocess.Popen(['sleep', '30'])\nprint(7)", "7\n"),
    ("print(1 / 0)", None),
    ("print(1)\nraise ValueError('boom')", None),
]


def _digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def hostile_programs(planted: str, project: str, scratch: str, port: int, marker: str) -> dict[str, str]:
    """The attacks, by name. ``planted``: a file in HOME; ``project``: the project folder; ``scratch``: a folder of
    the test's (writes outside the program's folder go there); ``port``: a listener on 127.0.0.1; ``marker``: a
    string a left-behind process carries in its command line."""
    pid = os.getpid()
    own = [_digest("/proc/self/environ"), _digest("/proc/self/cmdline")]
    cmdline = open("/proc/self/cmdline", "rb").read()
    return {
        "write outside its folder": (
            "import os\nwritten = 0\n"
            f"for path in [{scratch!r} + '/escaped', {project!r} + '/escaped-{marker}', "
            f"os.path.expanduser('~') + '/../escaped-{marker}', '/usr/escaped-{marker}', '/escaped-{marker}']:\n"
            "    try:\n        open(path, 'w').write('x')\n        written += 1\n    except OSError as err:\n"
            "        print(path, err, file=__import__('sys').stderr)\n"
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
        "read /proc/<ppid>/environ": (
            "import hashlib, os\nhits = 0\n"
            f"for path in ['/proc/{pid}/environ', '/proc/{pid}/cmdline', f'/proc/{{os.getppid()}}/environ']:\n"
            "    try:\n"
            f"        hits += hashlib.sha256(open(path, 'rb').read()).hexdigest() in {own!r}\n"
            "    except OSError:\n        pass\n"
            "for entry in os.listdir('/proc'):\n"
            "    try:\n"
            f"        hits += {cmdline!r} in open(f'/proc/{{entry}}/environ', 'rb').read()\n"
            f"        hits += {cmdline!r} in open(f'/proc/{{entry}}/cmdline', 'rb').read()\n"
            "    except OSError:\n        pass\n"
            "assert hits, 'nothing of the parent readable'\nprint(hits)"
        ),
        "fork many processes": (
            "import os, time\nchildren = 0\nfor _ in range(100):\n    if os.fork() == 0:\n        time.sleep(30)\n"
            "        os._exit(0)\n    children += 1\nprint(children)"
        ),
        "loop forever": "while True:\n    pass",
        "allocate past the memory limit": "memory = bytearray(4 << 30)\nprint(len(memory))",
        "print past the output limit": "print('1' * 2_000_000)",
        # prints nothing itself; its detached child would print an answer and fill the folder after it ends
        "detached child keeps writing": (
            "import subprocess, time\n"
            "subprocess.Popen(['/bin/sh', '-c', 'sleep 0.3; while :; do echo 7; echo x >> writer.log; done', "
            f"'{marker}'], start_new_session=True)\ntime.sleep(0.1)"
        ),
    }


# what the unsandboxed control runs: attacks that are harmless to the machine, run as they are
CONTROLS = (
    "read a file planted in HOME",
    "list the project folder",
    "connect to 127.0.0.1",
    "kill the test",
    "read /proc/<ppid>/environ",
    "detached child keeps writing",
)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def run_and_observe(sandbox: str, planted: str, project: str, scratch: str, names=None, timeout_s: float = 2) -> dict:
    """Run the hostile programs (``names``: those only) in ``sandbox``, all at once as ``run_programs`` does; return
    ``{"runs": {name: {status, stdout, detail}}, "observed": what the host saw}``. Must run on the main thread
    (it catches SIGUSR1)."""
    from del_plugin.evaluation.benchmarks.program import run_programs

    marker = f"del-eval-sandbox-test-{uuid.uuid4().hex}"
    outside = Path(scratch) / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    programs_folder = Path(scratch) / "tmp"
    programs_folder.mkdir(exist_ok=True)
    signals = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: signals.append(signum))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(programs_folder)
    try:
        programs = hostile_programs(planted, project, str(outside), listener.getsockname()[1], marker)
        names = list(names or programs)
        runs = run_programs([programs[n] for n in names], sandbox=sandbox, timeout_s=timeout_s)
        time.sleep(0.5)  # a detached child that survived would write again by now
        connections = 0
        try:
            while True:
                listener.accept()[0].close()
                connections += 1
        except BlockingIOError:
            pass
        left = _processes_with(marker)
        for pid in left:  # a failure, but leave nothing running
            os.kill(pid, signal.SIGKILL)
        observed = {
            "written": sorted(p.name for p in outside.iterdir())
            + [p for p in (f"{project}/escaped-{marker}", f"/usr/escaped-{marker}") if os.path.exists(p)],
            "connections": connections,
            "signals": len(signals),
            "processes_left": len(left),
            "folders_left": sorted(p.name for p in programs_folder.iterdir()),
        }
    finally:
        tempfile.tempdir = saved_tempdir
        listener.close()
        signal.signal(signal.SIGUSR1, previous)
    return {"runs": {n: r.__dict__ for n, r in zip(names, runs)}, "observed": observed}


if __name__ == "__main__":
    sandbox_name, planted_file, project_dir, scratch_dir = sys.argv[1:5]
    print(json.dumps(run_and_observe(sandbox_name, planted_file, project_dir, scratch_dir)))
