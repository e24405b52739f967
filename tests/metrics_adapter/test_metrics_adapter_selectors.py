"""Label selectors: the Kubernetes grammar, matching semantics, clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics_adapter.errors import SelectorError
from metrics_adapter.selectors import label_key_problem, parse_selector

LABELS = {"service": "vision", "modality": "image", "namespace": "llm", "gpus": "4"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        pytest.param("", True, id="empty selects everything"),
        pytest.param("service=vision", True, id="="),
        pytest.param("service==vision", True, id="=="),
        pytest.param("service!=vision", False, id="!="),
        pytest.param("absent!=x", True, id="!= matches a missing key"),
        pytest.param("service in (text, vision)", True, id="in"),
        pytest.param("service notin (text,vision)", False, id="notin"),
        pytest.param("absent notin (a)", True, id="notin matches a missing key"),
        pytest.param("absent in (a)", False, id="in needs the key"),
        pytest.param("modality", True, id="exists"),
        pytest.param("!modality", False, id="does not exist"),
        pytest.param("!absent", True, id="absent key"),
        pytest.param("gpus>2,gpus<8", True, id="gt and lt"),
        pytest.param("gpus>4", False, id="gt is strict"),
        pytest.param(" service = vision , modality in (image) ", True, id="spaces"),
        pytest.param("service=vision,modality=text", False, id="conjunction"),
        pytest.param("kvspread.io/model=llama", False, id="prefixed key"),
        pytest.param("service=", False, id="empty value"),
    ],
)
def test_grammar_and_matching(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("service in ()", "empty"),
        ("service in (a", "missing ')'"),
        ("=vision", "expected a label key"),
        ("service vision", "expected an operator"),
        ("service=a b", "expected ','"),
        ("a,", "trailing"),
        ("gpus>x", "integer"),
        ("bad key!=1", "expected an operator"),
        ("-bad=1", "invalid label key"),
        ("k=" + "v" * 64, "invalid label value"),
        ("UPPER.example/x=1", "prefix"),
        ("service in (a b)", "expected ',' or ')'"),
    ],
)
def test_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        parse_selector(text)
    assert message in str(exc.value)
    assert repr(text) in str(exc.value)
    assert exc.value.code == 400


def test_a_label_key_prefix_is_a_whole_dns_subdomain() -> None:
    """`^...$` with `re.match` let a prefix end in a newline (`$` matches before it); the
    prefix is now `kvspread.names.DNS_SUBDOMAIN`, matched whole."""
    assert label_key_problem("example.com/name") is None
    assert label_key_problem("x" * 253 + "/name") is None
    for bad in ("abc\n/name", "x" * 254 + "/name", "/name", "A/name"):
        assert "prefix must be a DNS subdomain" in (label_key_problem(bad) or "")


def test_round_trip() -> None:
    s = parse_selector("a=1,b!=2,c in (y,x),d notin (z),e,!f,g>3")
    assert str(s) == "a=1,b!=2,c in (x,y),d notin (z),e,!f,g>3"
    assert parse_selector(str(s)) == s


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("ab=!(), inotx.-/_<>9 \t")), max_size=40)
    | st.text(max_size=30)
)
def test_fuzzed_selectors_parse_or_raise_selector_error(text: str) -> None:
    try:
        sel = parse_selector(text)
    except SelectorError:
        return
    sel.matches(LABELS)
    assert parse_selector(str(sel)) == sel
