"""The launcher of one model-written program (see :mod:`del_plugin.evaluation.benchmarks.program`).

It is run as ``python -I -c <the source of this file>``, with ``{"settings": ..., "source": <the program>}`` as
JSON on stdin (nothing of a run in its command line, which a program could read), its stdout and stderr on files
of the caller, and a status pipe on the file descriptor ``status_fd``. It uses the standard library only, since it
runs outside the project (inside bwrap's sandbox, or in the sandbox it builds).

Three modes (``settings["mode"]``):

* ``"namespaces"``: build the sandbox here with Linux namespaces. The launcher unshares a user, mount, network,
  PID, IPC, UTS and cgroup namespace, maps one user (an unprivileged uid, ``nobody``, when it runs as root, so
  that the kernel enforces the process limit; the caller's own uid otherwise), and forks the namespace's init.
  The init mounts a new root on a tmpfs holding only ``binds`` (read-only), the package ``views`` (each folder of
  packages an empty read-only tmpfs with only the allowed packages bound into it), a few device nodes and the
  program's folder (a small tmpfs), pivots into it, detaches the old root, forbids new user namespaces (through a
  fresh ``/proc`` of its PID namespace, unmounted then: the program has an empty ``/proc``, so no mount table
  naming the host's paths), and forks the program. When the program ends the init ends, and the kernel kills
  whatever the program left in its PID namespace.
* ``"bwrap"``: bwrap built the sandbox and runs this as the PID namespace's init (``--as-pid-1``); only the limits
  are set here.

The settings' ``hidden`` places (the answer key, where a bind shows it) are covered by an empty read-only tmpfs
(a file by ``/dev/null``); the monitor is made undumpable, so that the program, of the same user under bwrap,
cannot ptrace it.
* ``"none"``: no isolation; only the limits.

In every mode a monitor forks the program, which (in ``"namespaces"``) drops every capability and, run by root,
changes to nobody, sets its limits, writes ``R`` to the status pipe and closes it, and runs the code as ``__main__``;
the monitor then writes the program's wait status (``"<status>\\n"``). The caller reads ``R`` as "the sandbox
started" and the status as how the program ended.
"""

import ctypes
import json
import os
import re
import resource
import signal
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# pivot_root has no libc wrapper: its system call number per machine
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41, "ppc64le": 203, "ppc64": 203}
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91, "loongarch64": 91, "ppc64le": 184, "ppc64": 184}
_NAMESPACES = ("CLONE_NEWUSER", "CLONE_NEWNS", "CLONE_NEWNET", "CLONE_NEWPID", "CLONE_NEWIPC", "CLONE_NEWUTS")
_DEVICES = ("null", "zero", "full", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """The sandbox could not be built (before any of the program ran)."""


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _prctl(option, arg2, arg3=0):
    _check(_libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), 0, 0), f"prctl({option})")


def _mount(source, target, fstype, flags, data=None):
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    result = _libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {source or fstype} on {target}")


def _syscall_number(table):
    machine = os.uname().machine
    if machine not in table:
        raise SetupError(f"the namespaces sandbox does not know this machine ({machine})")
    return table[machine]


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _mount_points(proc):
    """The mount points of this mount namespace (mountinfo's fifth field, its octal escapes undone)."""
    with open(f"{proc}/self/mountinfo", "rb") as handle:
        points = [line.split()[4] for line in handle]
    unescape = lambda m: bytes([int(m.group(1), 8)])  # noqa: E731
    return [os.fsdecode(re.sub(rb"\\([0-7]{3})", unescape, p)) for p in points]


def _bind_read_only(source, target, proc):
    """Bind ``source`` (a path of the old root, mounted at /.oldroot) on ``target``, with what is mounted under
    it, and make every mount there read-only, keeping the flags a user namespace may not clear."""
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    for point in _mount_points(proc):
        if point == target or point.startswith(target.rstrip("/") + "/"):
            kept = os.statvfs(point).f_flag & MS_NOEXEC  # ST_NOEXEC == MS_NOEXEC
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | kept)


def _map_user(settings, unshare):
    """Call ``unshare`` and map the user and group into the new user namespace; return the ids the program changes
    to (None: it keeps its own). Anyone but root keeps their own ids, mapped by themselves. Root maps itself and
    an unprivileged user (``nobody``), which the program changes to, since the kernel does not count root's
    processes against a process limit; a helper left outside writes that map (once inside, a process may map
    only its own user). Root inside stays harmless to the program: it cannot become root (no set-user-ID
    programs: no new privileges, and every mount ``nosuid``)."""
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:
        unshare()
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        return None, None
    uid, gid = settings["root_uid"], settings["root_gid"]
    go, wait = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(wait)
        code = 1
        try:
            if os.read(go, 1) == b"1":
                _write(f"/proc/{os.getppid()}/uid_map", f"0 0 1\n{uid} {uid} 1\n")
                _write(f"/proc/{os.getppid()}/gid_map", f"0 0 1\n{gid} {gid} 1\n")
                code = 0
        finally:
            os._exit(code)
    os.close(go)
    try:
        unshare()
    finally:
        os.write(wait, b"1")
        os.close(wait)
        _, status = os.waitpid(helper, 0)
    if status != 0:
        raise SetupError("could not map the user namespace's user")
    return uid, gid


def _build_root(settings, folder):
    """In the new mount namespace: a new root holding only what the program needs; pivot into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    os.chdir(folder)
    os.mkdir(".oldroot")
    _check(_libc.syscall(_syscall_number(_SYS_PIVOT_ROOT), b".", b".oldroot"), "pivot_root")
    os.chdir("/")
    os.mkdir("/proc", 0o555)
    try:  # a fresh /proc: this PID namespace's processes only; refused where the host's /proc is partly masked
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        proc = "/proc"
    except SetupError:  # (containers): then no /proc at all, which hides the caller as well
        proc = None
    work = settings["folder"]
    os.mkdir(work, 0o755)
    tmpfs = f"size={settings['folder_bytes']},nr_inodes={settings['folder_files']},mode=1777"
    _mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
    for link, target in settings["symlinks"]:
        os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
        os.symlink(target, link)
    for source, target in settings["binds"]:
        _bind_read_only("/.oldroot" + source, target, proc or "/.oldroot/proc")
    for view, packages in settings["views"]:  # only the allowed packages in each folder of packages
        _mount("tmpfs", view, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=256,mode=0755")
        for source, target in packages:
            _bind_read_only("/.oldroot" + source, target, proc or "/.oldroot/proc")
        _mount(None, view, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for target, kind in settings["hidden"]:  # the answer key: an empty read-only tmpfs (a file: /dev/null) over it
        if kind == "folder":
            _mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=1")
        else:
            _mount("/.oldroot/dev/null", target, None, MS_BIND)
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir("/dev", 0o755)
    for device in _DEVICES:
        if os.path.exists(f"/.oldroot/dev/{device}"):
            open(f"/dev/{device}", "a").close()
            _mount(f"/.oldroot/dev/{device}", f"/dev/{device}", None, MS_BIND)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{fd}", f"/dev/{name}")
    os.symlink("/proc/self/fd", "/dev/fd")
    _check(_libc.umount2(b"/.oldroot", MNT_DETACH), "umount the old root")
    os.rmdir("/.oldroot")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if proc:  # no user namespaces inside: nothing in which to gain capabilities again (a failure stops the setup)
        _write("/proc/sys/user/max_user_namespaces", "0")
        # then no /proc: its mountinfo would show the host's path of every bind (the limit above stays)
        _check(_libc.umount2(b"/proc", MNT_DETACH), "umount /proc")


def _drop_privileges(uid, gid):
    """Give up every capability for good (bounding set, ambient, effective, permitted, inheritable), change to
    ``uid``/``gid`` unless None, and allow no new privileges (set-user-ID programs do not raise them)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            raise SetupError(f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(ctypes.get_errno())}")
    if uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.syscall(_syscall_number(_SYS_CAPSET), header, data), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _set_limits(settings):
    """Hard = soft, so that the program cannot raise them; the CPU's hard limit one second later, because Linux
    sends SIGKILL, not SIGXCPU, when both are reached on the same tick."""
    cpu, memory, output = settings["cpu_seconds"], settings["memory_bytes"], settings["output_bytes"]
    limits = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_FSIZE, output, output),
        (resource.RLIMIT_NOFILE, 64, 64),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if settings["processes"]:
        limits.append((resource.RLIMIT_NPROC, settings["processes"], settings["processes"]))
    for limit, soft, hard in limits:
        resource.setrlimit(limit, (soft, hard))


def _prepare_program(settings, source, status_fd, ids):
    """In the program's process: no privileges, its folder, its limits; say so on the status pipe."""
    try:
        _prctl(PR_SET_DUMPABLE, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if settings["mode"] == "namespaces":
            _drop_privileges(*ids)
        os.chdir(settings["folder"])
        with open("program.py", "w", encoding="utf-8") as handle:
            handle.write(source)
        _set_limits(settings)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.write(status_fd, b"R")
        os.close(status_fd)
    except (SetupError, OSError) as err:
        print(f"del-eval sandbox: {err}", file=sys.stderr)
        os._exit(125)


def _monitor(settings, source, status_fd, ids=(None, None)):
    """Fork the program and return in it; here, reap every process handed over (the namespace's init does: PID 1
    in both sandboxes) and report the program's wait status once it ends."""
    # not dumpable (before the fork: no moment without it): no process of the same user (the program, under
    # bwrap) may ptrace this one, freeze it and hold back the program's status, or use its /proc/1/mem; the
    # program is made dumpable again, so that its own /proc files stay its own
    _prctl(PR_SET_DUMPABLE, 0)
    pid = os.fork()
    if pid == 0:
        _prepare_program(settings, source, status_fd, ids)
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a signal from the program to its init ends nothing
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(125)
        if done == pid:
            os.write(status_fd, f"{status}\n".encode())
            os._exit(0)


def _namespaces(settings, source, status_fd):
    """Unshare the namespaces and fork their init, which builds the root and monitors the program (returning in
    the program's process); here, wait for the init."""
    flags = getattr(os, "CLONE_NEWCGROUP", 0)
    for name in _NAMESPACES:
        flags |= getattr(os, name)

    def unshare():
        try:
            os.unshare(flags)
        except OSError as err:
            raise SetupError(f"unshare (user, mount, network, PID namespaces): {err.strerror}") from None

    ids = _map_user(settings, unshare)
    folder = os.getcwd()
    init = os.fork()
    if init == 0:  # PID 1 of the new PID namespace
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _build_root(settings, folder)
        except (SetupError, OSError) as err:
            print(f"del-eval sandbox: {err}", file=sys.stderr)
            os._exit(125)
        _monitor(settings, source, status_fd, ids)
        return
    os.close(status_fd)
    _, status = os.waitpid(init, 0)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125)


def main():
    """Start the program as ``settings`` say; return its source in the program's process (every other process
    of the launcher ends here)."""
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    settings, source = request["settings"], request["source"]
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if settings["mode"] == "namespaces":
            _namespaces(settings, source, settings["status_fd"])
        else:
            _monitor(settings, source, settings["status_fd"])
    except (SetupError, OSError) as err:
        print(f"del-eval sandbox: {err}", file=sys.stderr)
        os._exit(125)
    return source


if __name__ == "__main__":
    _code = compile(main(), "program.py", "exec")
    sys.argv = ["program.py"]
    exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
