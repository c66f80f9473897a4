"""Release numbers, parsed one way everywhere (``packaging.version``, PEP 440): grid's flag catalog, the twin's
parser and its performance model all compare SGLang releases as ``(major, minor, patch)`` tuples."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

ReleaseTuple = tuple[int, int, int]


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
