"""One release parser for the flag catalog, the twin's parser and its performance model (grid/versions.py)."""

import pytest

from grid.releases.flags import parse_version as catalog_version
from grid.versions import release_tuple

PARSERS = (release_tuple, catalog_version)


@pytest.mark.parametrize("text, expected", [("0.5.9", (0, 5, 9)), ("0.5.13.post1", (0, 5, 13)), ("1.0", (1, 0, 0)),
                                            ("0.5.10rc1", (0, 5, 10)), (" 0.5.23 ", (0, 5, 23)),
                                            ("0.5.9.1", (0, 5, 9))])
def test_every_parser_reads_a_release_alike(text, expected):
    assert [parse(text) for parse in PARSERS] == [expected] * len(PARSERS)


@pytest.mark.parametrize("text", ["external", "1", "", "vllm 0.32.0"])
def test_every_parser_refuses_what_is_not_a_release(text):
    for parse in PARSERS:
        with pytest.raises(ValueError, match="not an SGLang version"):
            parse(text)
