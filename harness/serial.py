"""The JSON round-trip of the typed results (results.py re-exports it): dataclasses, enums and typing
constructs to plain JSON values and back, a record of an older version read with what it has."""
from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from typing import Any


def to_dict(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def from_dict(cls: Any, data: Any) -> Any:
    """Rebuild `cls` (a dataclass, enum, or typing construct) from `to_dict` output."""
    if data is None:
        return None
    origin = typing.get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(cls) if a is not type(None)]
        return from_dict(inner[0], data) if len(inner) == 1 else data
    if origin is list:
        (item,) = typing.get_args(cls)
        return [from_dict(item, v) for v in data]
    if origin is dict:
        _, value = typing.get_args(cls)
        return {k: from_dict(value, v) for k, v in data.items()}
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return cls(data)
    if dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):  # valid JSON of the wrong shape: a list, a number
            raise TypeError(f"a {cls.__name__} must be a JSON object, not {type(data).__name__} {str(data)[:40]}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: from_dict(hints[k], v) for k, v in data.items() if k in names})
    return data


def to_json(obj: Any, indent: int | None = 2) -> str:
    return json.dumps(to_dict(obj), indent=indent)


def from_json(cls: Any, text: str) -> Any:
    return from_dict(cls, json.loads(text))
