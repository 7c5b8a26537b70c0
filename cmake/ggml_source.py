"""Derive the ggml source tree we build: the pinned archive plus our patch series.

Used by CMakeLists.txt at configure time (`derive`) and by CI's patch verification
(`verify`). The archive comes from the package registry through pip, is cached outside the
build tree, and is checked against the sha256 in vendor/ggml/pin.json before anything is
extracted. Patches in patches/*.patch are applied in name order; one that does not apply
cleanly stops everything and is named.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN_FILE = ROOT / "vendor" / "ggml" / "pin.json"
PATCH_DIR = ROOT / "patches"
STAMP = ".pyggml-tree.json"


class TreeError(RuntimeError):
    pass


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pyggml" / "downloads"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_archive(pin: dict, cache_dir: Path) -> Path:
    """Return the pinned archive from the cache, downloading it through pip if needed."""
    archive = cache_dir / pin["archive"]
    if archive.exists():
        if sha256_of(archive) == pin["sha256"]:
            return archive
        archive.unlink()   # a damaged download: fetch it again
    cache_dir.mkdir(parents=True, exist_ok=True)
    requirement = f"{pin['package']}=={pin['version']}"
    print(f"-- pyggml: downloading {requirement} (source archive) into {cache_dir}", flush=True)
    # --no-binary names the package alone: pip must still prepare the sdist's metadata (it
    # cannot skip that), but its build requirements then come as wheels in seconds instead of
    # being compiled from their own sdists for minutes (--no-binary :all:)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", pin["package"],
               "-d", str(cache_dir), requirement]
    result = subprocess.run(command, capture_output=True, text=True)
    if not archive.exists():
        raise TreeError(f"pip could not download {requirement}: {result.stderr.strip()[-2000:]}")
    actual = sha256_of(archive)
    if actual != pin["sha256"]:
        raise TreeError(f"The archive {archive} has sha256 {actual}, but vendor/ggml/pin.json "
                        f"expects {pin['sha256']}; refusing to build from it.")
    return archive


def extract_tree(archive: Path, pin: dict, dest: Path) -> None:
    prefix = pin["tree"].rstrip("/") + "/"
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name == pin["license"]:
                member.name = "LICENSE"
            elif member.name.startswith(prefix):
                member.name = member.name[len(prefix):]
            else:
                continue
            tar.extract(member, dest, filter="data")


def patch_files(patch_dir: Path) -> list[Path]:
    return sorted(patch_dir.glob("*.patch"))


def apply_patches(tree: Path, patches: list[Path]) -> None:
    import patch_ng

    for patch in patches:
        patch_set = patch_ng.fromfile(str(patch))
        if not patch_set or not patch_set.apply(strip=0, root=str(tree)):
            raise TreeError(f"The patch {patch.name} does not apply cleanly to the pinned ggml "
                            "tree; rebase it onto the pin in vendor/ggml/pin.json.")


def tree_digest(tree: Path) -> str:
    """One sha256 over every file's relative path and content, the stamp excluded."""
    digest = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and p.name != STAMP):
        digest.update(path.relative_to(tree).as_posix().encode() + b"\0")
        digest.update(sha256_of(path).encode())
    return digest.hexdigest()


def recipe(pin: dict, patches: list[Path]) -> dict:
    return {"archive_sha256": pin["sha256"], "ggml_version": pin["ggml_version"],
            "patches": {p.name: sha256_of(p) for p in patches}}


def derive(dest: Path, cache_dir: Path, patch_dir: Path = PATCH_DIR) -> dict:
    """Build the patched tree at dest (reusing it when the recipe is unchanged)."""
    pin = json.loads(PIN_FILE.read_text())
    patches = patch_files(patch_dir)
    wanted = recipe(pin, patches)
    stamp = dest / STAMP
    if stamp.exists():
        current = json.loads(stamp.read_text())
        if current.get("recipe") == wanted:
            return current
    archive = fetch_archive(pin, cache_dir)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    extract_tree(archive, pin, dest)
    apply_patches(dest, patches)
    info = {"recipe": wanted, "tree_sha256": tree_digest(dest)}
    stamp.write_text(json.dumps(info, indent=2) + "\n")
    return info


def different_files(a: Path, b: Path) -> list[str]:
    def listing(tree: Path) -> dict[str, str]:
        return {p.relative_to(tree).as_posix(): sha256_of(p)
                for p in tree.rglob("*") if p.is_file() and p.name != STAMP}

    left, right = listing(a), listing(b)
    return sorted(name for name in left.keys() | right.keys() if left.get(name) != right.get(name))


def verify(build_tree: Path | None, installed_digest: str | None, cache_dir: Path) -> None:
    """Re-derive the tree from scratch; each patch must apply in order; compare results."""
    pin = json.loads(PIN_FILE.read_text())
    patches = patch_files(PATCH_DIR)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "ggml"
        fresh.mkdir()
        extract_tree(fetch_archive(pin, cache_dir), pin, fresh)
        for index in range(len(patches)):
            apply_patches(fresh, patches[index:index + 1])
            print(f"applies cleanly: {patches[index].name}")
        digest = tree_digest(fresh)
        if build_tree is not None:
            changed = different_files(fresh, build_tree)
            if changed:
                raise TreeError(f"The build tree {build_tree} differs from the pin plus patches "
                                f"in {len(changed)} files, e.g. {changed[:5]}.")
            print(f"build tree identical: {build_tree}")
        if installed_digest is not None and installed_digest != digest:
            raise TreeError(f"The installed pyggml was built from tree {installed_digest}, but the "
                            f"pin plus patches give {digest}.")
        print(f"tree sha256 {digest}: {len(patches)} patches verified")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=default_cache_dir())
    sub = parser.add_subparsers(dest="command", required=True)
    derive_cmd = sub.add_parser("derive", help="write the patched ggml tree")
    derive_cmd.add_argument("dest", type=Path)
    verify_cmd = sub.add_parser("verify", help="re-derive and compare")
    verify_cmd.add_argument("--build-tree", type=Path)
    verify_cmd.add_argument("--installed-digest")
    args = parser.parse_args(argv)
    try:
        if args.command == "derive":
            info = derive(args.dest, args.cache)
            print(f"-- pyggml: ggml tree {args.dest} (sha256 {info['tree_sha256'][:16]})")
        else:
            verify(args.build_tree, args.installed_digest, args.cache)
    except TreeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
