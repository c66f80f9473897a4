"""Release numbers, parsed one way everywhere (``packaging.version``, PEP 440): grid's flag catalog, the twin's
parser and its performance model all compare SGLang releases as ``(major, minor, patch)`` tuples.

A load point also records which server it measured (the ``engine_version`` column): an SGLang release (``0.5.23``),
another engine's name and release (``vllm 0.32.0``), or ``external`` for a server that does not say.
:class:`ServerIdentity` is that column typed: whatever asks "which SGLang release" asks it
(:attr:`ServerIdentity.sglang_version`) and gets None for a server that is not SGLang, never a parse error.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

ReleaseTuple = tuple[int, int, int]

#: The SGLang release grid plans for and the twin plays when none is named (``engine.version`` unset): the release
#: of the tuning session grid was built from, and the oldest one its catalog covers (grid/releases/catalog/data).
DEFAULT_RELEASE = "0.5.9"

#: The family of SGLang servers and of grid's twin (which announces an SGLang release).
SGLANG = "sglang"
#: The ``engine_version`` of a server that says neither its engine nor its version.
UNKNOWN_LABEL = "external"


def release_tuple(text: str) -> ReleaseTuple:
    """``"0.5.13.post1"`` -> ``(0, 5, 13)``; ``"1.0"`` -> ``(1, 0, 0)``; ``"0.5.10rc1"`` -> ``(0, 5, 10)``. Raises
    ``ValueError`` naming the text when it is not a PEP 440 version with at least major and minor."""
    try:
        release = Version(str(text).strip()).release
    except InvalidVersion:
        raise ValueError(f"not an SGLang version: {text!r} (expected e.g. 0.5.9 or 0.5.23)") from None
    if len(release) < 2:
        raise ValueError(f"not an SGLang version: {text!r} (expected e.g. 0.5.9 or 0.5.23)")
    major, minor, patch = (*release[:3], 0)[:3]
    return (major, minor, patch)


@dataclass(frozen=True)
class ServerIdentity:
    """Which server a load point measured: its engine ``family`` (``sglang``, ``vllm``, ...; ``""`` when the server
    does not say) and its ``version`` as the server reports it (None when it does not say).

    Built by the engine (grid.engines.base ``Engine.identity``) and stored as its :attr:`label` in the
    ``engine_version`` column; :meth:`parse` reads that column back."""

    family: str
    version: str | None = None

    @classmethod
    def of_sglang(cls, version: str) -> ServerIdentity:
        """An SGLang server (or the twin) of release ``version``."""
        return cls(SGLANG, version)

    @classmethod
    def parse(cls, label: str | None) -> ServerIdentity:
        """The ``engine_version`` column back into an identity: ``"0.5.23"`` -> SGLang 0.5.23, ``"vllm 0.32.0"`` ->
        vllm 0.32.0, ``"external"``, ``""`` or None -> unknown. Never raises: a label that is neither is kept as an
        unknown engine's version."""
        text = (label or "").strip()
        if not text or text == UNKNOWN_LABEL:
            return cls("")
        if " " in text:
            family, version = text.split(" ", 1)
            return cls("" if family == UNKNOWN_LABEL else family, version.strip() or None)
        try:
            release_tuple(text)
        except ValueError:
            return cls("", text)
        return cls(SGLANG, text)

    @property
    def label(self) -> str:
        """The ``engine_version`` column: SGLang's release as is (so flag catalogs apply), another engine's prefixed
        with its family (``vllm 0.32.0``), ``external`` when the server does not say its version."""
        if not self.version:
            return UNKNOWN_LABEL
        return self.version if self.is_sglang else f"{self.family or UNKNOWN_LABEL} {self.version}"

    @property
    def is_sglang(self) -> bool:
        return self.family == SGLANG

    @property
    def sglang_version(self) -> str | None:
        """The SGLang release this server runs (``"0.5.23"``), or None for a server that is not SGLang, does not
        say, or says a version that is not a release."""
        if not self.is_sglang or not self.version:
            return None
        try:
            release_tuple(self.version)
        except ValueError:
            return None
        return self.version

    @property
    def sglang_release(self) -> ReleaseTuple | None:
        """:attr:`sglang_version` as ``(major, minor, patch)``, or None."""
        version = self.sglang_version
        return release_tuple(version) if version else None

    def describe(self) -> str:
        """For a sentence: ``SGLang 0.5.23``, ``vllm 0.32.0``, ``an engine that does not say its version``."""
        if self.is_sglang:
            return f"SGLang {self.version or '(release not reported)'}"
        if not self.version:
            return f"{self.family} (release not reported)" if self.family else "a server that does not say what it is"
        return f"{self.family} {self.version}" if self.family else f"a server of version {self.version}"
