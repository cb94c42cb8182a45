"""Errors shared by the pure spec modules (importable by the API without torch, xgboost or pyspark)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class SpecError(ValueError):
    """A request field that cannot work; ``path`` locates it (``params.grid.maxDepth``). ``also`` holds the other
    fields' problems found in the same pass (``Problems``), so that one 422 names them all, as pydantic's do."""

    def __init__(self, path: str, message: str, *, also: Sequence[SpecError] = ()) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.also = tuple(also)

    @property
    def problems(self) -> tuple[SpecError, ...]:
        """This problem and the others found with it, in the order they were found."""
        return (self, *self.also)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.message), {"also": self.also})


class Problems:
    """Collects the problems of fields checked independently of each other; ``raise_found`` raises them as one
    ``SpecError`` (the first, with the rest in ``also``). A check that depends on an earlier field's value runs
    after ``raise_found``, so it never reports a consequence of a problem already named."""

    def __init__(self) -> None:
        self.found: list[SpecError] = []
        self.bad: set[str] = set()
        """The fields :meth:`check` found invalid: the rules that read them are left out."""

    def check(self, name: str, run: Callable[[], Any], default: Any) -> Any:
        """``run()``'s value, or ``default`` when it raised a SpecError (kept, and ``name`` marked bad)."""
        found = len(self.found)
        with self.field():
            return run()
        if len(self.found) > found:
            self.bad.add(name)
        return default

    @contextmanager
    def field(self) -> Iterator[None]:
        try:
            yield
        except SpecError as exc:
            self.found.extend(exc.problems)

    def raise_found(self) -> None:
        if self.found:
            first, *rest = self.found
            raise SpecError(first.path, first.message, also=rest)
