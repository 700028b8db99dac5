"""JSON data files that do not parse name the file and the line (env/json_files.py): a
truncated file streamed with ijson names its last line, a whole file its decoder's line."""

from __future__ import annotations

import ijson
import pytest

from env.json_files import JSONFileError, read_json, stream_json


def _items(path):
    return list(stream_json(path, lambda fh: ijson.items(fh, "item")))


def test_a_truncated_stream_names_its_last_line(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text('[{"a": 1},\n {"b": [1,\n 2')
    with pytest.raises(JSONFileError, match=f"^{path}:3: invalid JSON .*truncated"):
        _items(path)


def test_a_stream_broken_inside_names_the_lines_read(tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text('[1,\n' + '2,\n' * 100_000 + 'x]\n')
    with pytest.raises(JSONFileError) as caught:
        _items(path)
    where = str(caught.value).removeprefix(f"{path}:").split(":")[0]
    first, last = map(int, where.split("-"))
    assert first <= 100_002 <= last and "truncated" not in str(caught.value)


def test_a_whole_file_names_its_line(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text('{\n  "inputs": [\n')
    with pytest.raises(JSONFileError, match=f"^{path}:3: invalid JSON"):
        read_json(path)
    path.write_text('{"a": [1, 2]}')
    assert read_json(path) == {"a": [1, 2]} and _items(tmp_path / "manifest.json") == []
