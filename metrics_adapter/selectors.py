"""Kubernetes label selectors: the whole grammar of k8s.io/apimachinery/pkg/labels.

    selector    := requirement ("," requirement)*     (empty selector: matches everything)
    requirement := KEY                                 exists
                 | "!" KEY                             does not exist
                 | KEY ("=" | "==" | "!=") VALUE
                 | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"
                 | KEY (">" | "<") INTEGER             (as kube-apiserver's Gt / Lt)

Keys are qualified names (optional DNS-subdomain prefix and "/", then at most 63 of
[A-Za-z0-9-_.] starting and ending alphanumeric); values are empty or the same 63-char
shape. `!=` and `notin` also match objects without the key, as in Kubernetes. Every parse
error is a `SelectorError` (HTTP 400) that quotes the selector and says what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kvspread.names import DNS_SUBDOMAIN
from metrics_adapter.errors import SelectorError

__all__ = ["Requirement", "Selector", "parse_selector", "label_key_problem", "EVERYTHING"]

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SPECIAL = "=!(),<>"
_OPS = ("exists", "!", "=", "!=", "in", "notin", "gt", "lt")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement: key, operator (exists ! = != in notin gt lt) and values."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        op = self.op
        if op == "exists":
            return present
        if op == "!":
            return not present
        if op in ("=", "in"):
            return present and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            have = int(labels[self.key])
        except ValueError:
            return False
        want = int(self.values[0])
        return have > want if op == "gt" else have < want

    def __str__(self) -> str:
        if self.op == "exists":
            return self.key
        if self.op == "!":
            return "!" + self.key
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        sym = {"gt": ">", "lt": "<"}.get(self.op, self.op)
        return f"{self.key}{sym}{self.values[0]}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A conjunction of requirements; matches a label mapping when all do."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def equalities(self) -> dict[str, str]:
        """key -> value for the `=`/`==`/single-value `in` requirements (for query building)."""
        out: dict[str, str] = {}
        for r in self.requirements:
            if r.op == "=" or (r.op == "in" and len(r.values) == 1):
                out[r.key] = r.values[0]
        return out

    def without(self, key: str) -> Selector:
        """The same selector less every requirement on `key`."""
        return Selector(tuple(r for r in self.requirements if r.key != key))

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = Selector()


def _tokens(text: str) -> list[tuple[str, int]]:
    """Split into identifiers and operator symbols, with their offsets."""
    out: list[tuple[str, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "(),":
            out.append((c, i))
            i += 1
        elif c in "=!<>":
            two = text[i : i + 2]
            if two in ("==", "!="):
                out.append((two, i))
                i += 2
            else:
                out.append((c, i))
                i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append((text[i:j], i))
            i = j
    return out


def label_key_problem(key: str) -> str | None:
    """Why `key` cannot be a selector's label key (what `parse_selector` would say), or
    None: a rules file's label names are checked with it, so a name no selector can hold
    is refused at the start, not matched by nothing for ever."""
    try:
        _check_key(key, "label")
    except SelectorError as exc:
        return exc.message.removeprefix("label: ")
    return None


def _check_key(key: str, where: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not DNS_SUBDOMAIN.fullmatch(prefix):  # 1-253 characters, as kvspread.names says
            raise SelectorError(
                f"{where}: invalid label key {key!r}: prefix must be a DNS subdomain"
            )
    if not name or len(name) > 63 or not _NAME.match(name):
        raise SelectorError(
            f"{where}: invalid label key {key!r}: name part must be 1-63 characters of "
            "[A-Za-z0-9-_.] starting and ending with an alphanumeric character"
        )


def _check_value(value: str, where: str) -> None:
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise SelectorError(
            f"{where}: invalid label value {value!r}: must be empty or 1-63 characters of "
            "[A-Za-z0-9-_.] starting and ending with an alphanumeric character"
        )


def parse_selector(text: str | None) -> Selector:
    """Parse a label selector string; None or blank gives the match-everything selector.

    Raises SelectorError naming the selector, the position and the problem.
    """
    if text is None or not text.strip():
        return EVERYTHING
    if len(text) > 4096:
        raise SelectorError("label selector is longer than 4096 characters")
    toks = _tokens(text)
    reqs: list[Requirement] = []
    pos = 0

    def where(k: int) -> str:
        at = toks[k][1] if k < len(toks) else len(text)
        return f"unable to parse label selector {text!r} at position {at}"

    def ident(k: int, what: str) -> str:
        if k >= len(toks) or toks[k][0] in ("(", ")", ",", "=", "==", "!=", "!", "<", ">"):
            got = repr(toks[k][0]) if k < len(toks) else "end of selector"
            raise SelectorError(f"{where(k)}: expected {what}, found {got}")
        return toks[k][0]

    while True:
        negate = pos < len(toks) and toks[pos][0] == "!"
        if negate:
            pos += 1
        key = ident(pos, "a label key")
        _check_key(key, where(pos))
        pos += 1
        if negate:
            reqs.append(Requirement(key, "!"))
        elif pos >= len(toks) or toks[pos][0] == ",":
            reqs.append(Requirement(key, "exists"))
        else:
            op = toks[pos][0]
            if op in ("=", "==", "!="):
                pos += 1
                value = ""
                if pos < len(toks) and toks[pos][0] not in (",", "(", ")", "=", "==", "!=", "!"):
                    value = toks[pos][0]
                    pos += 1
                elif pos < len(toks) and toks[pos][0] != ",":
                    raise SelectorError(f"{where(pos)}: expected a value, found {toks[pos][0]!r}")
                _check_value(value, where(pos - 1))
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
            elif op in ("<", ">"):
                pos += 1
                value = ident(pos, "an integer")
                try:
                    int(value)
                except ValueError:
                    raise SelectorError(
                        f"{where(pos)}: for '<' and '>' the value must be an integer, got {value!r}"
                    ) from None
                pos += 1
                reqs.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
            elif op in ("in", "notin"):
                pos += 1
                if pos >= len(toks) or toks[pos][0] != "(":
                    raise SelectorError(f"{where(pos)}: expected '(' after {op!r}")
                pos += 1
                values: list[str] = []
                expect_value = True
                while True:
                    if pos >= len(toks):
                        raise SelectorError(f"{where(pos)}: missing ')'")
                    t = toks[pos][0]
                    if t == ")":
                        if expect_value and values:
                            values.append("")
                        pos += 1
                        break
                    if t == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                        pos += 1
                        continue
                    if not expect_value:
                        raise SelectorError(f"{where(pos)}: expected ',' or ')', found {t!r}")
                    if t in ("(", "=", "==", "!=", "!", "<", ">"):
                        raise SelectorError(f"{where(pos)}: expected a value, found {t!r}")
                    _check_value(t, where(pos))
                    values.append(t)
                    expect_value = False
                    pos += 1
                if not values:
                    raise SelectorError(f"{where(pos)}: the set of values for {op!r} is empty")
                reqs.append(Requirement(key, op, tuple(sorted(set(values)))))
            else:
                raise SelectorError(
                    f"{where(pos)}: expected an operator (=, ==, !=, in, notin, <, >) or ',', "
                    f"found {op!r}"
                )
        if pos >= len(toks):
            break
        if toks[pos][0] != ",":
            raise SelectorError(f"{where(pos)}: expected ',' found {toks[pos][0]!r}")
        pos += 1
        if pos >= len(toks):
            raise SelectorError(f"{where(pos)}: trailing ','")
    return Selector(tuple(reqs))
