"""The base of every request body's objects: unknown fields are refused, and so is a number or a boolean written
as text.

pydantic's lax mode takes ``"2"`` for an integer field and ``"yes"`` or ``1`` for a boolean one, while the settings
checked below the schema (the optimizer, the gradient-sharing block, online rows) take JSON numbers only: one body
could hold a ``"2"`` that passed and a ``"0.01"`` that did not. Strict mode would also refuse ``2.0`` for an
integer, which JSON Schema calls an integer; so only text (and numbers for booleans) is refused here, and the rest
stays pydantic's.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import types
from collections.abc import Hashable
from typing import Annotated, Any, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.schemas import reader_options

_SCALARS = (bool, int, float)


@functools.cache
def _scalar_kinds(annotation: Any) -> frozenset[type]:
    """The JSON scalar types a field takes when it takes nothing but numbers or booleans (and null); else empty."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalar_kinds(get_args(annotation)[0])
    args = get_args(annotation) if origin in (Union, types.UnionType) else (annotation,)
    kinds = frozenset(a for a in args if a is not type(None))
    return kinds if kinds and all(k in _SCALARS for k in kinds) else frozenset()


def _fits_unquoted(text: str, kinds: frozenset[type]) -> bool:
    """Whether ``text`` without its quotes is a value of one of ``kinds`` ("3" for a whole number, "true")."""
    try:
        value = json.loads(text.strip())
    except ValueError:
        return False
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, float) and not math.isfinite(value):  # "NaN": refused unquoted too
        return False
    return (int in kinds and isinstance(value, int)) or (float in kinds and isinstance(value, int | float))


def not_text(cls: type, data: Any) -> Any:
    """A model validator (``mode="before"``) of an object that names a model: ``"model": "taxi-fare"``, as other
    serving tools take it, said only "Input should be a valid dictionary or object to extract fields from"."""
    if isinstance(data, str):
        name = json.dumps(data, ensure_ascii=False)
        raise ValueError(f'a model is an object, not the text {name}: write {{"name": {name}}} (with "version" '
                         'or "alias" to pick one, else the newest version)')  # fmt: skip
    return data


def _needs(kinds: frozenset[type]) -> str:
    if kinds == {bool}:
        return "true or false"
    return "a whole number" if kinds == {int} else "a number"


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _closest_name(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """An unknown field's error names the field of this object it is closest to (``dataset.lable``: did you
        mean 'label'?), as a typo is the usual reason for one."""
        try:
            return handler(data)
        except ValidationError as exc:
            names = [field.alias or name for name, field in cls.model_fields.items()]
            errors = exc.errors()
            hints = [_closest(e, names) for e in errors]
            if not any(hints):
                raise
            details: list[Any] = []
            for error, hint in zip(errors, hints, strict=True):  # every message as it was (those of objects inside
                text = f"Extra inputs are not permitted; {hint}" if hint else error["msg"]  # carry their hints)
                details.append({"type": PydanticCustomError(error["type"], text), "loc": error["loc"],
                                "input": error["input"]})  # fmt: skip
            rebuilt = ValidationError.from_exception_data(exc.title, details)
            raise rebuilt from None

    @field_validator("*", mode="before")
    @classmethod
    def _json_types(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        annotation = cast(Hashable, cls.model_fields[info.field_name].annotation)
        kinds = _scalar_kinds(annotation)
        if not kinds or value is None:
            return value
        if isinstance(value, str):
            text = json.dumps(value, ensure_ascii=False)
            hint = " (write it without quotes)" if _fits_unquoted(value, kinds) else ""  # not for "one"
            raise ValueError(f"must be {_needs(kinds)}, got the text {text}{hint}")
        if (kinds == {bool}) != isinstance(value, bool):  # pydantic's lax mode takes 1 for true and true for 1
            raise ValueError(f"must be {_needs(kinds)}, got {json.dumps(value)}")
        return value

    @field_validator("options", mode="after", check_fields=False)
    @classmethod
    def _reader_options(cls, value: Any, info: ValidationInfo) -> Any:
        """Reader options pass to Spark, which copies each into the Hadoop configuration the files are read with:
        only Spark's documented options of the format are taken (app/schemas/reader_options.py), and its true/false
        ones take true or false."""
        wrong = reader_options.problem(info.data.get("format"), value or {})
        if wrong:
            raise ValueError(wrong)
        for key, given in (value or {}).items():  # Spark reads anything but "true" as false: header "maybe" was
            if isinstance(key, str) and key.lower() in _SWITCHES and str(given).lower() not in ("true", "false"):
                raise ValueError(f"{key}: true or false, got {json.dumps(given)}")  # read as no header, silently
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _valid_text(cls, value: Any) -> Any:
        """A lone surrogate (``"\\ud800"``, which JSON allows and UTF-8 cannot hold) in a text field: a 422 here,
        not a failure of whatever stores, logs or answers it."""
        found = _SURROGATE.search(value) if isinstance(value, str) else None
        if found:
            raise ValueError(f"holds an unpaired surrogate (\\u{ord(found.group()):04x} at character "
                             f"{found.start() + 1}): send text as valid Unicode")  # fmt: skip
        return value


_SURROGATE = re.compile("[\ud800-\udfff]")


_SWITCHES = frozenset(o.lower() for o in (
    "header", "inferSchema", "multiLine", "enforceSchema", "ignoreLeadingWhiteSpace", "ignoreTrailingWhiteSpace",
    "allowComments", "allowUnquotedFieldNames", "allowSingleQuotes", "allowNumericLeadingZeros",
    "allowBackslashEscapingAnyCharacter", "allowUnquotedControlChars", "prefersDecimal",
    "dropFieldIfAllNull", "escapeQuotes", "quoteAll", "mergeSchema", "recursiveFileLookup",
))  # fmt: skip
"""Spark's boolean reader options (CSV, JSON lines, parquet)."""


def _closest(error: Any, names: list[str]) -> str | None:
    """'did you mean ...?' for an unknown field of this object (not of one inside it), when one is close."""
    if error["type"] != "extra_forbidden" or len(error["loc"]) != 1:
        return None
    close = difflib.get_close_matches(str(error["loc"][0]), names, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None
