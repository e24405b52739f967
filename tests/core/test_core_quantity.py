from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvspread.quantity import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24Gi", Decimal(24 * 2**30)),
        ("16000Mi", Decimal(16000 * 2**20)),
        ("40G", Decimal(40 * 10**9)),
        ("1500m", Decimal("1.5")),
        ("2.5e10", Decimal("2.5e10")),
        ("100", Decimal(100)),
        ("0.5Ki", Decimal(512)),
        ("1E3", Decimal(1000)),
        ("1E", Decimal(10**18)),  # exa, not an exponent without digits (an internal error once)
        ("1.5E", Decimal("1.5e18")),
        (" 7k ", Decimal(7000)),
        (3, Decimal(3)),
    ],
    ids=lambda v: str(v),
)
def test_parse_accepts_kubernetes_forms(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    ["lots", "", "Gi", "12 Gi", "1.2.3", "10Xi", "1e99", "2e", None, True, float("nan"), "--1"],
)
def test_parse_rejects_with_format_hint(text):
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert "quantity" in str(info.value) or "exponent" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42, "42"),
        (1.5, "1500m"),
        (0.001, "1m"),
        (0.0001, "100u"),
        (1e-9, "1n"),
        (0, "0"),
        (Decimal("2.25"), "2250m"),
        (-1.5, "-1500m"),
    ],
)
def test_format_is_canonical(value, expected):
    assert format_quantity(value) == expected


def test_format_refuses_nan_and_inf():
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(QuantityError):
            format_quantity(bad)


@given(st.decimals(min_value=-(10**12), max_value=10**12, places=3, allow_nan=False))
def test_format_then_parse_round_trips_to_milli(d):
    assert parse_quantity(format_quantity(d)) == d
