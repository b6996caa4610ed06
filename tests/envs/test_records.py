"""Data loaders refuse bad files clearly.

Every case is a tiny hand-written file; every error names the file, the line (or record) and,
where one is at fault, the field. The loaders all read through
:func:`ragen_torchrl.envs.games.records.iter_records` / ``parse_json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ragen_torchrl.envs.games.records as records
from ragen_torchrl.envs.games.countdown import load_countdown_file
from ragen_torchrl.envs.games.deepcoder_data import load_coding_problems
from ragen_torchrl.envs.games.metamathqa import load_metamathqa
from ragen_torchrl.envs.games.records import RecordError, iter_records, read_records
from ragen_torchrl.envs.games.searchqa_data import load_questions
from ragen_torchrl.envs.games.webshop_data import load_goals, load_products

GOOD = '{"target": 24, "nums": [3, 4, 6]}'


def write(tmp_path: Path, text: str | bytes, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


# --------------------------------------------------------------------------- numbers
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("NaN", "NaN is not a number here"),
        ("-Infinity", "-Infinity is not a number here"),
        ("1e400", "1e400 overflows a float"),
        ("9" * 5000, "an integer of 5000 digits exceeds the limit of 4300"),  # main: ValueError without the file
    ],
)
def test_refused_numbers_name_file_line_and_field(tmp_path, value, why):
    path = write(tmp_path, GOOD + "\n" + '{"target": ' + value + ', "nums": [3]}\n')
    with pytest.raises(RecordError) as err:
        load_countdown_file(path)
    assert str(err.value).startswith(f"{path}, line 2: field 'target': {why}"), err.value


def test_nan_never_becomes_the_text_nan_in_prompts_or_gold_answers(tmp_path):
    # main: MetaMathQA's answer NaN -> "nan", SearchQA's answers [NaN] -> ["nan"]
    path = write(tmp_path, '{"question": "q?", "answer": NaN}\n')
    with pytest.raises(RecordError, match=r"line 1: field 'answer': NaN is not a number here"):
        load_metamathqa(path)
    path = write(tmp_path, '{"question": "q?", "answers": ["a", NaN]}\n')
    with pytest.raises(RecordError, match=r"line 1: field 'answers\[1\]': NaN is not a number here"):
        load_questions(path)


def test_webshop_prices_that_overflow_are_named_not_overflow_errors(tmp_path):
    # main: OverflowError (int(inf)) or a float inf price bound
    big = "9" * 400
    for pricing in ([1e10], "$" + big):
        path = write(tmp_path, json.dumps([{"asin": "B0TEST0001", "name": "Mug", "pricing": pricing}]), "p.json")
        with pytest.raises(RecordError, match=r"p.json, record 1: field 'pricing': price .* is not in \[0, 1e\+09\]"):
            load_products(path)
    path = write(tmp_path, '[{"asin": "B0TEST0001", "name": "Mug", "pricing": 1e400}]', "p.json")
    with pytest.raises(RecordError, match=r"p.json, record 1: field 'pricing': 1e400 overflows a float"):
        load_products(path)
    products = load_products(write(tmp_path, '[{"asin": "B0TEST0001", "name": "Mug", "pricing": 5}]', "ok.json"))
    goal = {"asin": "B0TEST0001", "instruction": "a mug", "instruction_attributes": ["red"], "price_upper": int(big)}
    path = write(tmp_path, json.dumps(goal) + "\n", "g.jsonl")
    with pytest.raises(RecordError, match=r"g.jsonl, record 1: field 'price_upper': price 9+ is not in"):
        load_goals(path, products)


def test_deepcoder_json_inside_a_field_is_read_with_the_same_rules(tmp_path):
    rec = {"question": "Add.", "input_output": '{"fn_name": "f", "inputs": [[1]], "outputs": [NaN]}'}
    path = write(tmp_path, json.dumps(rec) + "\n")
    with pytest.raises(RecordError) as err:
        load_coding_problems(path)
    assert str(err.value).startswith(f"{path}, line 1: field 'input_output' is not JSON: field 'outputs[0]': NaN")


# --------------------------------------------------------------------------- structure and text
def test_deep_nesting_is_a_named_error_not_a_recursion_error(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000  # main: RecursionError
    path = write(tmp_path, GOOD + '\n{"target": 1, "nums": ' + deep + "}\n")
    with pytest.raises(RecordError, match=rf"{path}, line 2: nesting deeper than 64 levels"):
        read_records(path, "x")
    shallow = "[" * 100 + "]" * 100  # parses in the json module, still past MAX_DEPTH
    path = write(tmp_path, '{"target": 1, "nums": ' + shallow + "}\n")
    with pytest.raises(RecordError, match=r"line 1: field 'nums\[0\]\[0\].*': nests deeper than 64 levels"):
        read_records(path, "x")


@pytest.mark.parametrize("char", ["\u2028", "\u0085", "\u2029", "\x1c"])
def test_line_separators_inside_a_string_are_text(tmp_path, char):
    # main: str.splitlines split the record there and reported invalid JSON
    path = write(tmp_path, json.dumps({"question": f"a{char}b?", "answer": "c"}, ensure_ascii=False) + "\n")
    (item,) = load_questions(path)
    assert item.question == f"a{char}b?"


def test_limit_stops_reading_after_n_records(tmp_path):
    # line 3 is broken: with limit=2 it is never read (main read and parsed the whole file first)
    path = write(tmp_path, GOOD + "\n" + GOOD + "\n{broken\n")
    assert [line for line, _ in iter_records(path, "x", limit=2)] == [1, 2]
    assert len(load_metamathqa(write(tmp_path, '{"question": "q", "answer": "1"}\n{broken\n', "m.jsonl"), limit=1)) == 1
    with pytest.raises(RecordError, match=r"line 3: invalid JSON"):
        read_records(path, "x")


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = write(tmp_path, (GOOD + "\n" + GOOD + "\n").encode() + b'{"target": "\xff"}\n')
    with pytest.raises(RecordError, match=rf"{path}, line 3: invalid UTF-8 \(byte 0xff at column 13\)"):
        read_records(path, "x")
    path = write(tmp_path, b'[\n{"a": 1},\n{"b": "\xc3"}]', "arr.json")
    with pytest.raises(RecordError, match=r"arr.json, line 3: invalid UTF-8"):
        read_records(path, "x")


def test_size_limits_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "MAX_LINE_BYTES", 40)
    path = write(tmp_path, GOOD + "\n" + '{"target": 1, "nums": [' + "1, " * 20 + "1]}\n")
    with pytest.raises(RecordError, match=rf"{path}, line 2: longer than 40 bytes"):
        read_records(path, "x")
    monkeypatch.setattr(records, "MAX_RECORDS", 2)
    path = write(tmp_path, (GOOD + "\n") * 3)
    with pytest.raises(RecordError, match=r"line 3: more than 2 records"):
        read_records(path, "x")
    assert len(read_records(path, "x", limit=2)) == 2
    monkeypatch.setattr(records, "MAX_DOCUMENT_BYTES", 10)
    path = write(tmp_path, "[" + GOOD + "]", "arr.json")
    with pytest.raises(RecordError, match=r"arr.json: \d+ bytes, over the limit of 10"):
        read_records(path, "x")


def test_parquet_nan_is_missing_and_inf_is_refused(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "d.parquet"
    pd.DataFrame({"question": ["q1", "q2"], "answer": [1.0, float("nan")]}).to_parquet(path)
    assert [r["answer"] for _, r in read_records(path, "x")] == [1.0, None]
    pd.DataFrame({"question": ["q1"], "answer": [float("inf")]}).to_parquet(path)
    with pytest.raises(RecordError, match=r"d.parquet, line 1: field 'answer': inf is not a number here"):
        read_records(path, "x")


# --------------------------------------------------------------------------- through the CLI
def test_ragen_train_on_a_bad_data_file_exits_2_with_one_line(tmp_path):
    path = write(tmp_path, GOOD + "\n" + '{"target": NaN, "nums": [3]}\n')
    code = "from ragen_torchrl.trainer.cli import train_main; train_main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "env=countdown", f"env.data_path={path}", "model.device=cpu"]
        + [f"model.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("config error: ")]
    assert len(errors) == 1, proc.stderr[-2000:]
    assert errors[0].startswith(f"config error: env=countdown: {path}, line 2: field 'target': NaN is not a number")
    assert "Traceback" not in proc.stderr


def test_movie_catalog_reads_through_the_strict_reader(tmp_path):
    from ragen_torchrl.envs.games.movie_recommendation import load_catalog

    # main: NaN became a float attribute... then refused only as "malformed"; a deeply nested
    # attributes string raised RecursionError
    path = write(tmp_path, '{"title": "A", "attributes": [1, NaN]}\n', "c.jsonl")
    with pytest.raises(RecordError, match=r"c.jsonl, line 1: field 'attributes\[1\]': NaN is not a number here"):
        load_catalog(path)
    deep = "[" * 100_000 + "]" * 100_000
    path = write(tmp_path, json.dumps({"title": "A", "attributes": deep}) + "\n", "d.jsonl")
    with pytest.raises(ValueError, match=r"d.jsonl.*entry 1 is malformed"):
        load_catalog(path)
