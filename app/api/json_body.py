"""Large JSON bodies parsed off the event loop, in pieces, and looked at before they are parsed.

FastAPI parses a body with ``json.loads`` on the event loop. For an 8 MB body that took seconds, during which the
driver answered nothing, ``/healthz`` included. A worker thread alone does not help: ``json.loads`` (like orjson and
pydantic's JSON parser) holds the GIL for the whole document, so the loop waits for it all the same. So a body over
:data:`INLINE_BYTES` is cut at its commas, found with numpy on the raw bytes (brackets and commas inside strings
skipped), into pieces of at most :data:`PIECE_BYTES`, each parsed by ``json.loads`` on a worker thread: between two
pieces the interpreter hands the GIL to the loop. The result is the value ``json.loads`` gives for the whole body;
a body it would refuse is refused with the error of the piece that failed (its position in the whole body).

The same scan tells how many items an array of the body holds before anything is parsed (:meth:`Shape.length`):
``POST /predict`` refuses too many rows at once (app/api/routes/inference.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, NoReturn

import numpy as np
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

INLINE_BYTES = 256 * 1024
"""Bodies up to this size are parsed as FastAPI parses them (on the loop: a few milliseconds)."""
PIECE_BYTES = 64 * 1024
"""The most one ``json.loads`` call parses of a larger body (well under a millisecond of GIL on a quiet machine)."""
_WHITESPACE = b" \t\n\r"
_STRUCTURE = np.zeros(256, dtype=bool)
_STRUCTURE[list(b"[]{},:")] = True
_OPEN, _CLOSE = {ord("["): ord("]"), ord("{"): ord("}")}, (ord("]"), ord("}"))
_AFTER = {b"": b"", b"[": b"]", b'{"":': b"}"}


class Shape:
    """Where a JSON text's brackets, commas and colons are (outside strings), and how deep each one is."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        raw = np.frombuffer(body, dtype=np.uint8)
        quotes = raw == ord('"')
        if b"\\" in body:  # a quote after an odd run of backslashes is escaped, inside a string
            index = np.arange(raw.size, dtype=np.int32)
            last_other = np.maximum.accumulate(np.where(raw == ord("\\"), np.int32(-1), index))
            quotes[1:] &= ((index - last_other)[:-1] & 1) == 0  # (backslashes ending at the byte before)
        outside = (np.cumsum(quotes, dtype=np.int32) & 1) == 0
        self.at = np.flatnonzero(outside & _STRUCTURE[raw])
        self.kind = raw[self.at]
        step = np.isin(self.kind, list(_OPEN)).astype(np.int32) - np.isin(self.kind, _CLOSE)
        self.depth = np.cumsum(step, dtype=np.int32)  # after each byte: 1 inside the outermost brackets
        self.pieces = 0

    def parse(self) -> Any:
        """``json.loads(body)``, a piece at a time."""
        return self._value(0, len(self.body))

    def length(self, *path: str) -> int | None:
        """How many items the array at ``path`` (object keys from the top) holds; None where there is none."""
        span = (0, len(self.body))
        for key in path:
            found = self._container(*span)
            if found is None or self.kind[found[0]] != ord("{"):
                return None
            members = self._members(*self._items(*found), int(self.depth[found[0]]))
            member = next((value for name, value in members if name == key), None)
            if member is None:
                return None
            span = member
        found = self._container(*span)
        if found is None or self.kind[found[0]] != ord("["):
            return None
        return len(self._items(*found)[0])

    def _container(self, start: int, end: int) -> tuple[int, int] | None:
        """(index of the opening bracket, of its closing one) in ``at`` when ``[start, end)`` is one array or object
        (whitespace around it); None otherwise (a scalar, or not one value: the pieces' parse says what is wrong)."""
        first, stop = (int(i) for i in np.searchsorted(self.at, [start, end]))
        if first >= stop or self.kind[first] not in _OPEN or self.body[start : self.at[first]].strip(_WHITESPACE):
            return None
        last, level = stop - 1, self.depth[first]
        if self.kind[last] != _OPEN[self.kind[first]] or self.body[self.at[last] + 1 : end].strip(_WHITESPACE):
            return None
        if self.depth[last] != level - 1 or (last > first + 1 and self.depth[first + 1 : last].min() < level):
            return None
        return first, last

    def _opens(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` begins (after whitespace) with a ``[`` or ``{``."""
        first = int(np.searchsorted(self.at, start))
        if first >= self.at.size or self.at[first] >= end or self.kind[first] not in _OPEN:
            return False
        return not self.body[start : self.at[first]].strip(_WHITESPACE)

    def _items(self, first: int, last: int, close: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends): the byte ranges between the container's commas, its items or members (none when it is
        empty). ``close``: where the last one ends, when not at the bracket ``last``."""
        inside = slice(first + 1, last)
        commas = self.at[inside][(self.kind[inside] == ord(",")) & (self.depth[inside] == self.depth[first])]
        starts = np.concatenate(([self.at[first] + 1], commas + 1))
        ends = np.concatenate((commas, [self.at[last] if close is None else close]))
        if close is None and not commas.size and not self.body[starts[0] : ends[0]].strip(_WHITESPACE):
            return starts[:0], ends[:0]
        return starts, ends

    def _colon(self, start: int, end: int, level: int) -> int | None:
        """The byte of a member's colon (at the object's ``level``), or None."""
        first, stop = np.searchsorted(self.at, [start, end])
        found = np.flatnonzero((self.kind[first:stop] == ord(":")) & (self.depth[first:stop] == level))
        return int(self.at[first + found[0]]) if found.size else None

    def _member(self, start: int, end: int, level: int) -> tuple[str | None, tuple[int, int]]:
        """(key, byte range of the value); (None, the member's range) where it has no key (a string, then a colon)."""
        colon = self._colon(start, end, level)
        try:
            key = self._loads(start, colon) if colon is not None else None
        except json.JSONDecodeError:
            key = None
        return (key, (colon + 1, end)) if isinstance(key, str) and colon is not None else (None, (start, end))

    def _members(
        self, starts: np.ndarray, ends: np.ndarray, level: int
    ) -> Iterator[tuple[str | None, tuple[int, int]]]:
        """An object's members (see :meth:`_member`)."""
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            yield self._member(start, end, level)

    def _value(self, start: int, end: int, before: bytes = b"", closed: bool = True) -> Any:
        """The value in ``[start, end)``, where ``before`` leaves a parse (b"": the top; b"[": an array's item;
        b'{"":': a member's value) so that an error is the one json.loads gives of the whole body. ``closed=False``:
        the container around it does not close (the body, or the container, ends or closes with the other bracket
        at ``end``): json.loads's error comes at ``end`` at the latest, and is raised."""
        if end - start <= PIECE_BYTES or not self._opens(start, end):
            return self._alone(start, end, before, closed)  # a scalar more than a piece long fails or ends at once
        found = self._container(start, end)
        if found is None:
            return self._broken(start, end, before)
        level = int(self.depth[found[0]])
        if self.kind[found[0]] == ord("{"):
            value: Any = self._object(*self._items(*found), level)
        else:
            value = self._array(*self._items(*found), start)
        if not closed:
            self._fail("Expecting ',' delimiter", end)
        return value

    def _object(self, starts: np.ndarray, ends: np.ndarray, level: int) -> dict[str, Any]:
        parts: dict[str, Any] = {}
        for key, (a, b) in self._members(starts, ends, level):
            if key is None:
                self._loads(a, b, b"{")  # raises what json.loads says of it (at the end at the latest)
                self._fail("Expecting ':' delimiter", a)
            parts[key] = self._value(a, b, b'{"":')  # a member replaces one of the same key: json.loads's order
        return parts

    def _array(self, starts: np.ndarray, ends: np.ndarray, start: int) -> list[Any]:
        items: list[Any] = []
        if not starts.size:
            return items
        big = (ends - starts) > PIECE_BYTES  # parsed alone; the rest in runs of one window of the body
        window = (starts - start) // PIECE_BYTES
        cut = np.flatnonzero(big[1:] | big[:-1] | (window[1:] != window[:-1])) + 1
        for a, b in zip([0, *cut.tolist()], [*cut.tolist(), len(starts)], strict=True):
            if big[a]:
                items.append(self._value(int(starts[a]), int(ends[a]), b"["))
            elif self.body[starts[a] : ends[b - 1]].strip(_WHITESPACE):
                items.extend(self._loads(int(starts[a]), int(ends[b - 1]), b"[", b"]"))
            else:  # an empty item alone in its run ("[..., ]"): "[]" would take it
                self._fail("Expecting value", int(ends[a]))
        return items

    def _broken(self, start: int, end: int, before: bytes) -> Any:
        """``[start, end)`` opens a container that does not close as one value should: it closes and more follows,
        closes with the other bracket, or runs to the end unclosed. Parsed a piece at a time up to json.loads's
        error, which is raised (one json.loads of it all held the GIL, and the service, for the whole body)."""
        first, stop = (int(i) for i in np.searchsorted(self.at, [start, end]))
        level = int(self.depth[first])
        dips = np.flatnonzero(self.depth[first + 1 : stop] < level)
        last = first + 1 + int(dips[0]) if dips.size else stop
        if last < stop and self.kind[last] == _OPEN[self.kind[first]]:  # one value, then more
            after = int(self.at[last]) + 1
            self._value(start, after, before)
            rest = self.body[after:end]
            self._fail("Expecting ',' delimiter" if before else "Extra data", end - len(rest.lstrip(_WHITESPACE)))
        close = int(self.at[last]) + 1 if last < stop else end  # the other bracket ends its last item (an error)
        starts, ends = self._items(first, last, close)
        tail = int(starts[-1]), int(ends[-1])
        if self.kind[first] == ord("{"):
            self._object(starts[:-1], ends[:-1], level)
            key, (a, b) = self._member(*tail, level)
            if key is None:
                self._loads(a, b, b"{")  # raises what json.loads says of it
            else:
                self._value(a, b, b'{"":', closed=False)
        else:
            self._array(starts[:-1], ends[:-1], start)
            self._value(*tail, b"[", closed=False)
        return self._alone(start, end, before)  # not reached: json.loads of it all, as a last resort

    def _alone(self, start: int, end: int, before: bytes, closed: bool = True) -> Any:
        """One json.loads of ``[start, end)`` where ``before`` leaves the parse (closed after it unless not
        ``closed``)."""
        if closed and before == b"[" and not self.body[start:end].strip(_WHITESPACE):  # "[ ]" would take it
            self._fail("Expecting value", end)
        value = self._loads(start, end, before, _AFTER[before] if closed else b"")
        return value[0] if before == b"[" else value[""] if before else value

    def _loads(self, start: int, end: int, before: bytes = b"", after: bytes = b"") -> Any:
        """``json.loads`` of the body's bytes ``[start, end)`` (between ``before`` and ``after``); an error at its
        place in the whole body."""
        self.pieces += 1
        try:
            return json.loads(before + self.body[start:end] + after)
        except json.JSONDecodeError as exc:
            self._fail(
                exc.msg, max(start, start + len(exc.doc[: exc.pos].encode("utf-8", "surrogatepass")) - len(before))
            )

    def _fail(self, msg: str, at: int) -> NoReturn:
        """Raise json.loads's error ``msg`` at the body's byte ``at`` (counted in characters, as json.loads counts)."""
        doc = self.body[:at].decode("utf-8", "replace")
        raise json.JSONDecodeError(msg, doc, len(doc)) from None


def parse_in_pieces(body: bytes, shape: Shape | None = None) -> Any:
    """``json.loads(body)``, a piece at a time where the body is UTF-8 (the encoding JSON's RFC requires and every
    client sends); one call otherwise."""
    if json.detect_encoding(body) != "utf-8":
        return json.loads(body)
    try:
        return (shape or Shape(body)).parse()
    except RecursionError:  # nested deeper than the pieces' descent goes (hundreds of levels): one call, as before
        return json.loads(body)


class _ParsedRequest(Request):
    """The request with its body read and parsed already (or the parse's error, raised where FastAPI parses)."""

    def __init__(self, request: Request, body: bytes, parsed: Any, error: Exception | None) -> None:
        super().__init__(request.scope, request.receive)
        self._given, self._parsed, self._error = body, parsed, error

    async def body(self) -> bytes:
        return self._given

    async def json(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._parsed


class OffLoopJsonRoute(APIRoute):
    """A route whose JSON body, when larger than :data:`INLINE_BYTES`, is parsed on a worker thread a piece at a
    time; :meth:`check_raw` looks at its :class:`Shape` first (on the thread too), and may refuse it unparsed."""

    def check_raw(self, request: Request, shape: Shape) -> None:
        """Raise to refuse the body before it is parsed (the route's own problem)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def handler(request: Request) -> Response:
            body = await request.body()
            if len(body) <= INLINE_BYTES or json.detect_encoding(body) != "utf-8":
                return await handle(request)
            shape = await run_in_threadpool(Shape, body)
            self.check_raw(request, shape)
            try:
                parsed, error = await run_in_threadpool(parse_in_pieces, body, shape), None
            except Exception as exc:  # ValueError, RecursionError: FastAPI answers them as it would have
                parsed, error = None, exc
            return await handle(_ParsedRequest(request, body, parsed, error))

        return handler
