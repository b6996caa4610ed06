"""Data files from elsewhere: lone surrogates are refused at read time, and a record's size in
containers and a JSON-lines file's size are bounded (names the file, the line and the field)."""

from __future__ import annotations

import json
import re
import time

import pytest

from ragen_torchrl.envs.games import records
from ragen_torchrl.envs.games.records import RecordError, parse_json, read_records


def write(tmp_path, text: str, name: str = "data.jsonl"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"question": "a\\ud800b", "answer": "1"}', "field 'question'"),  # a high surrogate alone
        ('{"question": "ok", "answer": ["x", "\\udfff"]}', "field 'answer[1]'"),  # a low one alone
        ('{"question": "ok", "tags": {"\\udc00": 1}}', "field 'tags'"),  # in a key
    ],
)
def test_a_lone_surrogate_escape_is_refused_at_read_time_naming_line_and_field(tmp_path, line, field):
    path = write(tmp_path, '{"question": "fine \\ud83d\\ude00", "answer": "2"}\n' + line + "\n")
    with pytest.raises(
        RecordError, match=rf"line 2: {re.escape(field)}.*lone surrogate"
    ):  # main: read, fails when encoded
        read_records(path, "fields 'question' and 'answer'")


def test_a_surrogate_pair_is_text_and_reads(tmp_path):
    path = write(tmp_path, '{"q": "\\ud83d\\ude00"}\n')
    [(_, rec)] = read_records(path, "field 'q'")
    assert rec["q"] == "\U0001f600" and rec["q"].encode("utf-8")


def test_a_lone_surrogate_inside_a_json_string_field_names_it():
    with pytest.raises(RecordError, match=r"x.jsonl, line 3, field 'tests': field 'inputs\[0\]': a lone surrogate"):
        parse_json('{"inputs": ["\\ud800"]}', "x.jsonl, line 3, field 'tests'")


def test_a_line_of_a_million_empty_lists_is_refused_before_it_is_parsed(tmp_path):
    n = records.MAX_CONTAINERS + 10
    path = write(tmp_path, '{"q": [' + "[]," * n + "[]]}\n")  # ~3 MB; main: parsed into n lists
    t0 = time.perf_counter()
    with pytest.raises(RecordError, match=rf"line 1: more than {records.MAX_CONTAINERS} arrays and objects"):
        read_records(path, "field 'q'")
    assert time.perf_counter() - t0 < 5.0


def test_brackets_inside_strings_do_not_count(tmp_path):
    text = "[" * (records.MAX_CONTAINERS + 10)
    path = write(tmp_path, json.dumps({"q": text}) + "\n")
    [(_, rec)] = read_records(path, "field 'q'")
    assert rec["q"] == text


def test_a_json_lines_file_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    path = write(tmp_path, '{"q": 1}\n' * 100)
    monkeypatch.setattr(records, "MAX_JSONL_BYTES", 500)  # main: no such limit, every line is read
    with pytest.raises(RecordError, match=r"900 bytes, over the limit of 500 for a data file"):
        read_records(path, "field 'q'")
