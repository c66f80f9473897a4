"""Repository hygiene: every source a reader is pointed to ships with grid or is public.

* No tracked file cites files outside the repository (a sibling "shared" folder) or an absolute path of one machine.
* Every link into docs/sources.md with an anchor (and every in-page anchor link inside docs/sources.md) names a
  heading that exists, with anchors computed the way GitHub renders Markdown headings.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "sources.md"

# Built from pieces so that this file does not match itself.
FORBIDDEN = {
    "path outside the repository": re.compile(re.escape("..") + "/" + "shared"),
    "absolute machine path": re.compile("(?<![A-Za-z0-9_.~-])/" + "work/"),
    # a citation must be one a reader can follow: an upstream file or issue link, or docs/sources.md
    "a reference file the repository does not hold": re.compile(r"\bsglang" + r"\.md\b"),
    "a tracker issue the repository does not hold": re.compile(r"\b[Ii]ssue" + r"s? #?\d+"),
}
SOURCES_LINK = re.compile(r"docs/sources\.md#([A-Za-z0-9_-]+)")
IN_PAGE_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces -> hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    """All anchors of a Markdown text's headings (outside code fences), with GitHub's -1, -2 suffixes for repeats."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match is None:
            continue
        base = github_anchor(match.group(2))
        count = seen.get(base, 0)
        anchors.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return anchors


def tracked_text_files() -> list[tuple[str, str]]:
    """(path, text) of every tracked file that decodes as UTF-8; skips when this is not a git checkout."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    names = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    files = []
    for name in names.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file():
            continue
        try:
            files.append((name, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return files


def test_github_anchor_matches_github_rendering():
    assert github_anchor("SGLang log formats, readiness phases, failure modes") == (
        "sglang-log-formats-readiness-phases-failure-modes")
    assert github_anchor("Bare-metal reference run (E1)") == "bare-metal-reference-run-e1"
    assert github_anchor("SGLang HTTP API and bench_serving") == "sglang-http-api-and-bench_serving"
    assert github_anchor("`/metrics` endpoint") == "metrics-endpoint"
    assert heading_anchors("# A\n## A\n```\n# not a heading\n```\n### B c\n") == {"a", "a-1", "b-c"}


def test_forbidden_patterns_catch_what_they_should():
    bad_lines = ["Source: ../" + "shared/reference/x.md", "see /" + "work/main/conf", "(sglang" + ".md §1.2)",
                 "# issue" + " 26 item 5: ...", "(Issue" + " 9 §2)"]
    good_lines = ["docs/sources.md#hardware-spec-sheets", "https://example.org/network/x", "a/homework/b",
                  "https://github.com/sgl-project/sglang/issues/6830", "the issue is the host", "sglang#6830"]
    assert all(any(p.search(line) for p in FORBIDDEN.values()) for line in bad_lines)
    assert not any(p.search(line) for p in FORBIDDEN.values() for line in good_lines)


def test_no_tracked_file_cites_unshipped_or_machine_paths():
    offenders = []
    for name, text in tracked_text_files():
        for lineno, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    offenders.append(f"{name}:{lineno}: {what}: {line.strip()[:100]}")
    assert offenders == [], "\n".join(offenders)


def test_sources_md_has_the_sections_code_points_to():
    anchors = heading_anchors(SOURCES.read_text(encoding="utf-8"))
    for required in ("hardware-spec-sheets", "interconnect-and-all-reduce-latency", "launch-overhead-and-startup",
                     "model-architectures", "the-seed-session", "sglang-log-formats-readiness-phases-failure-modes",
                     "ray-process-cleanup"):
        assert required in anchors


def test_every_sources_md_link_names_an_existing_anchor():
    sources_text = SOURCES.read_text(encoding="utf-8")
    anchors = heading_anchors(sources_text)
    broken = []
    for name, text in tracked_text_files():
        for lineno, line in enumerate(text.splitlines(), 1):
            targets = SOURCES_LINK.findall(line)
            if name == "docs/sources.md":
                targets += IN_PAGE_LINK.findall(line)
            broken += [f"{name}:{lineno}: #{t}" for t in targets if t not in anchors]
    assert broken == [], "anchors missing from docs/sources.md:\n" + "\n".join(broken)
