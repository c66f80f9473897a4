"""Release behaviour is one table of named features (grid/releases/features.py): where the catalog of each release
can show a feature, the table agrees with it at every catalogued release; the twin asks the table instead of comparing
release numbers (its failure rows keep the release ranges of the reports they cite, docs/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grid.releases import catalog
from grid.releases.features import FEATURES, holds
from grid.releases.flags import parse_version

ROOT = Path(__file__).resolve().parents[2]
RELEASES = catalog.releases()


def test_every_feature_spans_catalogued_releases():
    known = {parse_version(r) for r in RELEASES}
    for f in FEATURES.values():
        assert parse_version(f.since) in known and (f.until is None or parse_version(f.until) in known), f.name
        assert f.until is None or parse_version(f.since) <= parse_version(f.until), f.name
        assert f.what and f.source, f.name


def test_an_unknown_feature_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="no release feature 'nope'; known: .*caches_last_output_token"):
        holds("nope", (0, 5, 9))


@pytest.mark.parametrize("release", RELEASES)
def test_the_features_the_catalog_shows_agree_with_it(release):
    rel, ver = catalog.release(release), parse_version(release)
    prefill = " ".join(rel.log_formats["prefill"])
    assert holds("prefill_line_pending_token", ver) is ("#pending-token: " in prefill)
    assert holds("prefill_line_graph_before_throughput", ver) is (
        prefill.index("{}: {}") < prefill.index("input throughput"))
    assert holds("attn_dp_size_flag", ver) is ("--attn-dp-size" in rel.by_flag)
    assert holds("dsa_named", ver) is ("--dsa-prefill-backend" in rel.by_flag)


def test_the_twin_compares_no_release_numbers_but_in_its_failure_rows():
    gate = re.compile(r"(?:>=?|<=?)\s*\(0, 5, \d+\)|\(0, 5, \d+\)\s*(?:<=?|>=?)")
    for path in sorted((ROOT / "grid" / "twin").glob("*.py")):
        if path.name == "failures.py":  # a known failure's release range comes with the report it cites
            continue
        assert not gate.search(path.read_text()), path.name
