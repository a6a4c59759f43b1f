"""The mixin every frozen value type uses to round-trip to JSON (pydantic validates)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self

from pydantic import TypeAdapter

__all__ = ["JsonValue", "adapter"]

# Values that cross module borders are frozen, keyword-only pydantic dataclasses: validated when
# built, so a document read back from disk is checked field by field against these types.


class JsonValue:
    """Mixin: ``to_json`` / ``from_json`` for the frozen values (pydantic validates)."""

    #: fields left out of the JSON when empty, so documents written before they existed
    #: round-trip unchanged
    OMIT_WHEN_EMPTY: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples as lists)."""
        return _to_json(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        """Rebuild from ``to_json`` output; unknown keys are ignored, bad values raise
        pydantic.ValidationError (a ValueError)."""
        return adapter(cls).validate_python(data)  # type: ignore[no-any-return]


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(kind: Any) -> TypeAdapter[Any]:
    """The (cached) pydantic TypeAdapter of a value type: validation and JSON Schema."""
    if kind not in _ADAPTERS:
        _ADAPTERS[kind] = TypeAdapter(kind)
    return _ADAPTERS[kind]


def _empty(value: Any) -> bool:
    """None or an empty text or collection (a 0 is a value, never omitted)."""
    return value is None or (isinstance(value, (str, tuple, list, dict)) and not value)


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        omit = value.OMIT_WHEN_EMPTY if isinstance(value, JsonValue) else ()
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.name in omit and _empty(getattr(value, f.name)))}
    if isinstance(value, (tuple, list)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    return value
