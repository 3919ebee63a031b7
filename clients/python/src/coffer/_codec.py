"""JSON to and from the dataclasses of _models, by their type hints."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from datetime import datetime, timezone
from functools import cache
from typing import Any


def encode(value: Any) -> Any:
    """encode turns a request dataclass into JSON values; None fields are left out."""
    if dataclasses.is_dataclass(value):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is not None:
                out[f.metadata.get("json", f.name)] = encode(v)
        return out
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a time sent to coffer needs a zone (a naive datetime is ambiguous)")
        return value.isoformat()
    return value


def dumps(value: Any) -> bytes:
    """dumps is the body of a request: UTF-8 JSON, non-ASCII as it is (meta is
    bounded as sent, and \\u00e9 is six bytes for two)."""
    return json.dumps(encode(value), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode(cls: type, obj: Any) -> Any:
    """decode builds an answer dataclass from JSON values; names it does not
    know are ignored, so that a newer server's fields do not break it."""
    if obj is None:
        return None
    kwargs = {}
    for f, hint in _hints(cls):
        name = f.metadata.get("json", f.name)
        if name in obj:
            kwargs[f.name] = _value(hint, obj[name])
    return cls(**kwargs)


@cache
def _hints(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.metadata.get("wire", True)]


def _value(hint: Any, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(hint, types.UnionType):  # X | None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_value(item, x) for x in v]
    if hint is datetime:
        return parse_time(v)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode(hint, v)
    return v


def parse_time(s: str) -> datetime:
    """parse_time reads an RFC 3339 time; datetime keeps microseconds, as PostgreSQL does."""
    return datetime.fromisoformat(s).astimezone(timezone.utc)
