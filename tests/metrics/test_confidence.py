import math

import pytest

from grid.metrics import confidence
from grid.metrics.confidence import T_975, interval, overlaps, t_quantile


def test_interval_of_three_repeats_exact():
    iv = interval([98.0, 100.0, 102.0])          # mean 100, s = 2, t(0.975, 2) = 4.303 (table; scipy: 4.3027)
    assert (iv.n, iv.mean, iv.low, iv.high) == (3, 100.0, 98.0, 102.0)
    half = t_quantile(2) * 2.0 / math.sqrt(3)
    assert iv.ci_low == pytest.approx(100.0 - half) and iv.ci_high == pytest.approx(100.0 + half)
    assert half == pytest.approx(4.968, abs=0.001)     # 4.303 * 2 / 1.732
    assert iv.measured and iv.half_width == pytest.approx(half)


def test_single_value_has_no_interval():
    iv = interval([7.5])
    assert (iv.n, iv.mean, iv.ci_low, iv.ci_high, iv.measured) == (1, 7.5, None, None, False)
    with pytest.raises(ValueError, match="at least two repeats"):
        overlaps(iv, interval([1.0, 2.0]))
    with pytest.raises(ValueError, match="no values"):
        interval([])
    with pytest.raises(ValueError, match="finite"):
        interval([1.0, float("nan")])


def test_overlap():
    a = interval([98.0, 100.0, 102.0])     # 95.03 .. 104.97
    b = interval([104.0, 106.0, 108.0])    # 101.03 .. 110.97
    c = interval([111.0, 112.0, 113.0])    # 109.52 .. 114.48
    assert overlaps(a, b) and overlaps(b, a)
    assert not overlaps(a, c)


def test_t_table_without_scipy(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    assert t_quantile(1) == 12.706 and t_quantile(4) == 2.776 and t_quantile(30) == 2.042
    assert t_quantile(200) == 2.042          # capped at the 30 row: wider than 1.96, on the safe side
    with pytest.raises(ValueError, match="only 0.95 is tabulated"):
        t_quantile(4, 0.9)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)
    assert confidence.CONFIDENCE == 0.95 and len(T_975) == 30
