"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the diff between two objects: what
the fake cluster applies and what a mutator's answer amounts to."""

from __future__ import annotations

import copy
from typing import Any

from .errors import Invalid


def merge(target: Any, patch: Any) -> Any:
    """``target`` with the merge patch ``patch`` applied (``null`` removes a field; lists and
    scalars replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise Invalid(f"JSON patch path {path!r} does not start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str], path: str) -> tuple[Any, str]:
    for token in tokens[:-1]:
        try:
            doc = doc[int(token)] if isinstance(doc, list) else doc[token]
        except (KeyError, IndexError, ValueError, TypeError):
            raise Invalid(f"JSON patch path {path!r} does not exist") from None
    return doc, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path)
    try:
        return parent[int(last)] if isinstance(parent, list) else parent[last]
    except (KeyError, IndexError, ValueError, TypeError):
        raise Invalid(f"JSON patch path {path!r} does not exist") from None


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if not 0 <= index <= len(parent):
            raise Invalid(f"JSON patch path {path!r}: index out of range")
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise Invalid(f"JSON patch path {path!r} does not exist")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    parent, last = _parent(doc, tokens, path)
    try:
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    except (KeyError, IndexError, ValueError, TypeError):
        raise Invalid(f"JSON patch path {path!r} does not exist") from None
    return doc


def _replace(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    _get(doc, path)
    parent, last = _parent(doc, tokens, path)
    parent[int(last) if isinstance(parent, list) else last] = value
    return doc


def apply_json_patch(doc: Any, operations: Any) -> Any:
    """``doc`` with the JSON patch ``operations`` applied; raises
    :class:`~krec_guest.errors.Invalid` (the whole patch fails, as on the API server)."""
    if not isinstance(operations, list):
        raise Invalid("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            doc = _replace(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_get(doc, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise Invalid(f"JSON patch test failed at {path!r}")
        else:
            raise Invalid(f"unknown JSON patch operation {kind!r}")
    return doc


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def diff(before: Any, after: Any, path: str = "") -> list[dict]:
    """The JSON patch from ``before`` to ``after`` (objects compared field by field; a changed
    list or scalar is replaced whole)."""
    if isinstance(before, dict) and isinstance(after, dict):
        ops: list[dict] = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in after.items():
            child = f"{path}/{_escape(key)}"
            if key not in before:
                ops.append({"op": "add", "path": child, "value": value})
            elif before[key] != value:
                ops.extend(diff(before[key], value, child))
        return ops
    if before == after:
        return []
    return [{"op": "replace", "path": path, "value": after}]
