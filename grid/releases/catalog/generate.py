"""Refresh the SGLang catalog from the released wheels: ``python -m grid.releases.catalog.generate``.

For every SGLang release from :data:`FIRST_RELEASE` to the newest on the package index (``pip index versions sglang``)
it downloads the wheel without dependencies (``pip download --no-deps sglang==X -d .cache/sglang-wheels``; the newest
post-release of each release, e.g. 0.5.10.post1), unpacks only its ``.py`` files into a temporary folder, and writes
``grid/releases/catalog/data/sglang-<release>.json`` (see grid/releases/catalog/extract.py for what is read). Each wheel
is read in its own Python process (``PYTHONHASHSEED=0``: the same order of set-built choices every time), so one
release's stubbed imports cannot leak into the next. Wheels stay in the
git-ignored cache folder; neither they nor SGLang's code are committed, only the extracted facts.

Options::

    --releases 0.5.9 0.5.23     only these releases (default: FIRST_RELEASE .. newest)
    --cache DIR                 wheel cache (default .cache/sglang-wheels)
    --out DIR                   where the JSON files go (default: grid/releases/catalog/data)

msgspec must be installed (``pip install msgspec``): 0.5.20+ build ServerArgs as msgspec-validated dataclasses.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.version import Version

#: The oldest release the catalog covers (0.5.9 .. newest).
FIRST_RELEASE = "0.5.9"
DATA_DIR = Path(__file__).resolve().parent / "data"
CACHE_DIR = Path(".cache/sglang-wheels")


def available_releases(first: str = FIRST_RELEASE) -> list[str]:
    """The newest post-release of every SGLang release >= ``first`` on the package index, oldest first."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True,
                         text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("Available versions:"))
    versions = [Version(v.strip()) for v in line.split(":", 1)[1].split(",")]
    best: dict[tuple[int, ...], Version] = {}
    for v in versions:
        if v.is_prerelease or v.is_devrelease or v < Version(first):
            continue
        if v.release not in best or v > best[v.release]:
            best[v.release] = v
    return [str(best[k]) for k in sorted(best)]


def newest_post(release: str) -> str:
    """``0.5.10`` -> ``0.5.10.post1`` when the index has a post-release of it."""
    matches = [v for v in available_releases(release) if Version(v).release == Version(release).release]
    return matches[-1] if matches else release


def download(version: str, cache: Path) -> Path:
    """The cached wheel of ``sglang==version``, downloaded without dependencies when absent."""
    cache.mkdir(parents=True, exist_ok=True)
    pattern = re.compile(rf"sglang-{re.escape(version)}-.*\.whl$")
    hits = [p for p in cache.iterdir() if pattern.match(p.name)]
    if not hits:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}",
                        "-d", str(cache)], check=True)
        hits = [p for p in cache.iterdir() if pattern.match(p.name)]
    if not hits:
        raise FileNotFoundError(f"pip download left no wheel for sglang=={version} in {cache}")
    return sorted(hits)[-1]


def out_path(out: Path, version: str) -> Path:
    """``sglang-0.5.10.json`` for wheel version 0.5.10.post1: one file per release."""
    return out / f"sglang-{'.'.join(map(str, Version(version).release))}.json"


def _one(wheel: Path, out: Path) -> None:
    from grid.releases.catalog.extract import dumps, release_record

    with tempfile.TemporaryDirectory(prefix="sglang-catalog-") as tmp:
        record = release_record(wheel, Path(tmp))
    path = out_path(out, record["release"])
    path.write_text(dumps(record))
    print(f"{path}: {len(record['options'])} options ({record['extracted_by']}), {len(record['routes'])} routes, "
          f"{len(record['metrics'])} metrics, {len(record['refusals'])} refusals")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grid.releases.catalog.generate", description=__doc__.split("\n")[0])
    ap.add_argument("--releases", nargs="*", help=f"releases to refresh (default: all from {FIRST_RELEASE})")
    ap.add_argument("--cache", type=Path, default=CACHE_DIR)
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # internal: read one wheel in this process
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        _one(args.one, args.out)
        return 0
    versions = [newest_post(r) for r in args.releases] if args.releases else available_releases()
    failed = []
    for version in versions:
        wheel = download(version, args.cache)
        # one hash seed for every run: SGLang builds some choices lists from sets (--sampling-backend's), whose
        # order would otherwise change from one regeneration to the next
        proc = subprocess.run([sys.executable, "-m", "grid.releases.catalog.generate", "--one", str(wheel),
                               "--out", str(args.out)], env={**os.environ, "PYTHONHASHSEED": "0"})
        if proc.returncode:
            failed.append(version)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
