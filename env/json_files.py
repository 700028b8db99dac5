"""JSON data files read so that a file that does not parse names itself and its line.

Owns `JSONFileError` (a ValueError whose message is one line: `<file>:<line>: invalid JSON
(<reason>)`), `read_json` (a whole small file: a manifest) and `stream_json` (a large file
streamed with ijson, never loaded whole: Mind2Web task lists). ijson reports no position, so a
streamed file's line is exact where the file ends early (truncated: its last line), else the
lines of the chunks the parser was reading (`<file>:N-M:`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import ijson

T = TypeVar("T")


class JSONFileError(ValueError):
    """A JSON data file that does not parse; the message names the file and the line."""


def read_json(path: Path) -> Any:
    """The JSON value of the file at `path`, or `JSONFileError` naming its line."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise JSONFileError(f"{path}:{err.lineno}: invalid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise JSONFileError(f"{path}: not UTF-8 text ({err.reason})") from None


class _LineCounter:
    """A binary file that knows which lines its last two chunks span (the parser, which may
    read one chunk ahead, stops inside them)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._newlines = 0
        self._starts = [1, 1]  # first line of the chunk before the last, and of the last
        self.last = 1  # the line of the last byte read

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        if chunk:
            self._starts = [self._starts[1], self._newlines + 1]
            self._newlines += chunk.count(b"\n")
            self.last = max(self._newlines + (0 if chunk.endswith(b"\n") else 1),
                            self._starts[1])
        return chunk

    def where(self, at_end: bool) -> str:
        """The line the parser stopped on: the last one when the file ended early, else the
        lines of the chunks it was reading."""
        first = self._starts[0]
        return str(self.last) if at_end or first == self.last else f"{first}-{self.last}"


def stream_json(path: Path, parse: Callable[[IO[bytes]], Iterator[T]]) -> Iterator[T]:
    """What `parse` (an ijson function of a binary file) yields for the file at `path`;
    `JSONFileError` naming the file and line where it does not parse."""
    with path.open("rb") as raw:
        counter = _LineCounter(raw)
        try:
            yield from parse(counter)
        except ijson.JSONError as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            at_end = "premature EOF" in reason
            if at_end:
                reason += ": the file ends early (truncated?)"
            raise JSONFileError(f"{path}:{counter.where(at_end)}: invalid JSON ({reason})"
                                ) from None
