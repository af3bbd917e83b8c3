"""Label selectors: a ``LabelSelector`` object rendered as the text host calls take, and the
text parsed and matched (what the fake cluster filters with, as kube-apiserver does)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .errors import Invalid


def selector_string(selector: Optional[Mapping[str, Any]]) -> Optional[str]:
    """A ``LabelSelector`` (``matchLabels`` and ``matchExpressions``) as selector text, e.g.
    ``app=web,tier in (be,fe)``; ``None`` when it selects everything. Raises
    :class:`~krec_guest.errors.Invalid` for an unknown operator."""
    if not selector:
        return None
    parts = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, operator = expr.get("key", ""), expr.get("operator", "")
        values = ",".join(sorted(expr.get("values") or []))
        if operator == "In":
            parts.append(f"{key} in ({values})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise Invalid(f"unknown label selector operator {operator!r} for key {key!r}")
    return ",".join(parts) or None


@dataclass(frozen=True)
class Requirement:
    """One term of a selector: ``key``, an operator and its values."""

    key: str
    operator: str  # = != in notin exists !exists
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this term."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        # != and notin also match objects without the key.
        return not present or value not in self.values


_TERM = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<nkey>[^\s,=!()]+)"
    r"|(?P<key>[^\s,=!()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)"
)


def parse(text: Optional[str]) -> list[Requirement]:
    """Parse selector text (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``,
    ``!a``, comma-separated); raises :class:`~krec_guest.errors.Invalid`."""
    requirements: list[Requirement] = []
    if not text or not text.strip():
        return requirements
    at = 0
    while at < len(text):
        match = _TERM.match(text, at)
        if not match or match.end() == at:
            raise Invalid(f"unable to parse requirement: {text[at:]!r} in label selector {text!r}")
        if match.group("nkey"):
            requirements.append(Requirement(match.group("nkey"), "!exists"))
        elif match.group("op"):
            op = "!=" if match.group("op") == "!=" else "="
            requirements.append(Requirement(match.group("key"), op, (match.group("value"),)))
        elif match.group("setop"):
            values = tuple(v.strip() for v in match.group("values").split(",") if v.strip())
            requirements.append(Requirement(match.group("key"), match.group("setop"), values))
        else:
            requirements.append(Requirement(match.group("key"), "exists"))
        at = match.end()
    return requirements


def matches(text: Optional[str], labels: Optional[Mapping[str, str]]) -> bool:
    """Whether ``labels`` satisfy every term of selector ``text``."""
    return all(r.matches(labels or {}) for r in parse(text))
