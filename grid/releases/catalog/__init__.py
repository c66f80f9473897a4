"""The SGLang catalog: what each SGLang release accepts and serves, read from its released wheel.

``data/sglang-<release>.json`` holds, per release (0.5.9 .. newest; refreshed by ``python -m
grid.releases.catalog.generate``, see README "Refreshing the SGLang catalog"):

- ``options``: every option of ``ServerArgs.add_cli_args`` (flags, dest, action, type name, nargs, choices, default,
  required, deprecated);
- ``routes``: the HTTP routes of ``sglang/srt/entrypoints/http_server.py``;
- ``metrics``: the Prometheus metric names of the metrics collector modules;
- ``log_formats``: the pieces of the scheduler's ``Prefill batch`` / ``Decode batch`` messages;
- ``refusals``: the messages of the raises/asserts in the server-argument checks (to check the hand-written launch
  rules of grid/releases/checks.py against);
- ``evidence``: named facts the release features of grid/releases/features.py are held to (tests/releases/
  test_features.py): log-line templates, the literal keys of HTTP answers, defaults read off the server arguments.

Everything grid knows about a release's command line (grid/releases/flags.py), and the twin's argparse
(grid/twin/cli.py), is derived from this data. A version between two catalogued releases is answered by the older
one; a version newer than the newest by the newest (with a note, :func:`catalog_note`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"


def _release_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3])


@dataclass(frozen=True)
class Option:
    """One SGLang server option (an argparse action of ``ServerArgs.add_cli_args``)."""

    dest: str
    flags: tuple[str, ...]
    action: str  # store | store_true | store_false | append | count | <SGLang action class name>
    type: str | None  # the type callable's name: int, float, str, human_readable_int, loads, ...
    nargs: Any
    choices: tuple | None
    default: Any
    required: bool
    deprecated: bool


@dataclass(frozen=True)
class Release:
    """The catalog of one SGLang release."""

    release: str
    wheel: str
    options: tuple[Option, ...]
    routes: tuple[dict, ...]
    metrics: tuple[dict, ...]
    log_formats: dict[str, list[str]]
    refusals: tuple[dict, ...]
    #: grid/releases/catalog/extract.py ``evidence``: name -> fact
    evidence: dict[str, Any]
    by_flag: dict[str, Option] = field(repr=False, compare=False)
    by_dest: dict[str, Option] = field(repr=False, compare=False)

    @property
    def key(self) -> tuple[int, ...]:
        return _release_key(self.release)

    @property
    def flags(self) -> frozenset[str]:
        """Every option string this release's parser declares (argparse also accepts unique prefixes of them)."""
        return frozenset(self.by_flag)

    def option(self, dest: str) -> Option | None:
        return self.by_dest.get(dest)

    def choices(self, dest: str) -> tuple | None:
        """The argparse choices of ``dest`` (None: the option is free-form or absent)."""
        opt = self.by_dest.get(dest)
        return None if opt is None else opt.choices

    def route_paths(self) -> frozenset[str]:
        return frozenset(r["path"] for r in self.routes)

    def metric_names(self) -> frozenset[str]:
        return frozenset(m["name"] for m in self.metrics)


def _load(path: Path) -> Release:
    data = json.loads(path.read_text())
    options = tuple(
        Option(dest=o["dest"], flags=tuple(o["flags"]), action=o["action"], type=o["type"], nargs=o["nargs"],
               choices=None if o["choices"] is None else tuple(o["choices"]), default=o["default"],
               required=o["required"], deprecated=o["deprecated"])
        for o in data["options"])
    by_flag = {f: o for o in options for f in o.flags}
    by_dest: dict[str, Option] = {}
    for o in options:
        by_dest.setdefault(o.dest, o)
    release = ".".join(data["release"].split(".")[:3])
    return Release(release=release, wheel=data["wheel"], options=options, routes=tuple(data["routes"]),
                   metrics=tuple(data["metrics"]), log_formats=data["log_formats"], refusals=tuple(data["refusals"]),
                   evidence=data["evidence"], by_flag=by_flag, by_dest=by_dest)


@cache
def releases() -> tuple[str, ...]:
    """The catalogued releases, oldest first (``("0.5.9", "0.5.10", ...)``)."""
    names = [p.name[len("sglang-"):-len(".json")] for p in DATA_DIR.glob("sglang-*.json")]
    if not names:
        raise FileNotFoundError(f"no SGLang catalog data in {DATA_DIR}; run python -m grid.releases.catalog.generate")
    return tuple(sorted(names, key=_release_key))


@cache
def _release_exact(name: str) -> Release:
    return _load(DATA_DIR / f"sglang-{name}.json")


def release(version: str | tuple[int, ...]) -> Release:
    """The catalog entry answering for ``version`` (``"0.5.13.post1"`` or ``(0, 5, 13)``): the newest catalogued
    release not newer than it; the oldest for older versions. Raises ``ValueError`` for a text that is no version."""
    from grid.releases.flags import parse_version

    ver = parse_version(version) if isinstance(version, str) else tuple(version)
    known = releases()
    best = known[0]
    for name in known:
        if _release_key(name) <= ver[:3]:
            best = name
    return _release_exact(best)


def newest() -> str:
    return releases()[-1]


def oldest() -> str:
    return releases()[0]
