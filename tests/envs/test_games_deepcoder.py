"""DeepCoder game core: code extraction, output comparison, rewards, feedback turns, grading
cache, the data loaders and the shipped hand-written set (the oracle passes every problem)."""

from __future__ import annotations

import concurrent.futures
import json

import pytest

from ragen_torchrl.envs.games.deepcoder import DeepCoderGame, extract_code, render_problem
from ragen_torchrl.envs.games.deepcoder_data import (
    CodingProblem,
    TestCase,
    load_coding_problems,
    problem_from_record,
    shipped_problems,
)
from ragen_torchrl.envs.games.deepcoder_grading import (
    Grader,
    dedupe_hidden_tests,
    drop_shown_tests,
    stdout_matches,
    value_matches,
)
from ragen_torchrl.envs.games.sandbox import Sandbox, SandboxLimits


@pytest.fixture(scope="module")
def grader():
    return Grader(Sandbox(SandboxLimits(timeout_s=1.0)), workers=2)


def shipped(pid: str) -> CodingProblem:
    return next(p for p in shipped_problems() if p.problem_id == pid)


# ----------------------------------------------------------------------------- parsing and comparing
@pytest.mark.parametrize(
    "answer,code",
    [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("text\n```py\nx = 1\n```\nmore ```python\ny = 2\n```", "x = 1\n"),
        ("```\nprint(3)\n```", "print(3)\n"),
        ("```text\nnot code\n```\n```python\nprint(4)\n```", "print(4)\n"),
        ("```python\nprint(5)", "print(5)"),  # unclosed fence: to the end
        ("  print(6)  ", "print(6)"),
        ("", ""),
        (None, ""),
        ("a || b", "a || b"),
    ],
)
def test_extract_code(answer, code):
    assert extract_code(answer) == code


def test_stdout_comparison_hand_cases():
    assert stdout_matches("3\n", "3")
    assert stdout_matches("1 2 \r\n3\n\n", "1 2\n3\n")
    assert not stdout_matches("1  2\n", "1 2\n")  # inner spacing counts
    assert not stdout_matches("", "0\n")
    assert not stdout_matches("3\n4\n", "3\n")


def test_value_comparison_hand_cases():
    assert value_matches([1, 2], [1, 2]) and value_matches((1, 2), [1, 2])
    assert value_matches({"b": 1, "a": 2}, {"a": 2, "b": 1})
    assert value_matches(7, [7])  # TACO wraps call results in a one-element list
    assert not value_matches(1, True) and not value_matches(1.5, 1)
    assert not value_matches([1], 1) and not value_matches(None, [])


# ----------------------------------------------------------------------------- rewards
def test_reward_is_the_fraction_by_default_as_the_reference_and_binary_on_request(grader):
    # sum_of_list's hidden sums are -5, 150, 0, 2000000000: printing 0 passes exactly one of 4
    game = DeepCoderGame(shipped("sum_of_list"), grader)
    reward, done, info = game.step("print(0)")
    assert (reward, done, info["success"], info["passed"], info["total"]) == (0.25, True, False, 1, 4)
    assert DeepCoderGame(shipped("sum_of_list"), grader, reward="binary").step("print(0)")[0] == 0.0
    game = DeepCoderGame(shipped("sum_of_list"), grader)
    assert game.step(game.oracle_action())[0] == 1.0
    with pytest.raises(ValueError, match="reward"):
        DeepCoderGame(shipped("sum_of_list"), grader, reward="partial")
    game = DeepCoderGame(shipped("sum_of_list"), grader, reward="fraction")
    game.step("print(0)")
    assert game.render_text() == "Passed 1 of 4 hidden tests."
    assert game.step("print(0)") == (0.0, True, {"success": False, "action_is_effective": False})


def test_public_tests_do_not_count(grader):
    # hard-codes the public example's output (6): no hidden test has it
    game = DeepCoderGame(shipped("sum_of_list"), grader)
    assert game.step("print(6)")[0] == 0.0


def test_function_problem_rewards(grader):
    game = DeepCoderGame(shipped("add"), grader, reward="binary")
    # hidden: add(0,0)=0, add(-5,5)=0, add(100,23)=123, add(7,-9)=-2; returning 0 passes two
    assert game.step("```python\ndef add(a, b):\n    return 0\n```")[0] == 0.0
    game = DeepCoderGame(shipped("add"), grader)
    assert game.step("```python\ndef add(a, b):\n    return 0\n```")[0] == 0.5
    game = DeepCoderGame(shipped("max_profit"), grader)
    reward, done, info = game.step(game.oracle_action())
    assert (reward, info["success"]) == (1.0, True)


@pytest.mark.parametrize("answer", ["", "   ", "```python\n```"])
def test_empty_program_scores_zero_without_running(grader, answer):
    runs = grader.runs
    reward, done, info = DeepCoderGame(shipped("gcd"), grader).step(answer)
    assert (reward, done, info["action_is_effective"]) == (0.0, True, False)
    assert grader.runs == runs


def test_feedback_turns_use_public_tests(grader):
    game = DeepCoderGame(shipped("sum_of_list"), grader, max_attempts=3)
    reward, done, info = game.step("print(0)")  # fails the public example (6)
    assert (reward, done, info["submitted"], info["passed"], info["total"]) == (0.0, False, False, 0, 1)
    text = game.render_text()
    assert "passed 0 of 1 example tests" in text and "1 2 3" in text and "'0\\n'" in text
    reward, done, info = game.step("print(6)")  # passes the example: submitted, graded on hidden
    assert (reward, done, info["submitted"]) == (0.0, True, True)
    # a last attempt is graded on the hidden tests even when it fails the examples
    game = DeepCoderGame(shipped("sum_of_list"), grader, max_attempts=2, reward="fraction")
    game.step("print(1)")
    reward, done, info = game.step("print(0)")
    assert (reward, done, info["submitted"]) == (0.25, True, True)


def test_render_shows_public_never_hidden_tests():
    p = shipped("reverse_words")
    text = render_problem(p)
    assert p.question in text and "hello world" in text and "standard input" in text
    assert all(t.input.strip() not in text for t in p.hidden_tests if len(t.input.strip()) > 5)
    fp = shipped("max_profit")
    text = render_problem(fp)
    assert "maxProfit([7, 1, 5, 3, 6, 4]) returns 5" in text and "class Solution" in text


# ----------------------------------------------------------------------------- grader
def test_cache_and_early_stops():
    grader = Grader(Sandbox(SandboxLimits(timeout_s=0.5)), workers=2)
    p = shipped("digit_sum")
    grader.grade("print(sum(map(int, input())))", p)
    runs = grader.runs
    assert grader.grade("print(sum(map(int, input())))", p).all_passed
    assert grader.runs == runs  # cached
    timeout = grader.grade("while True:\n    pass", p)
    assert [o.status for o in timeout.outcomes] == ["timeout"] + ["skipped"] * 3
    broken = grader.grade("def f(:", p)
    assert [o.status for o in broken.outcomes] == ["compile_error"] + ["skipped"] * 3
    runs = grader.runs
    jobs = [("print(1)", p, p.hidden_tests)] * 8 + [("x = (", p, p.hidden_tests)] * 8
    concurrent.futures.wait(grader.prefetch(jobs))
    assert grader.runs == runs + 1 + 4  # one compile check, one program x 4 tests
    assert grader.grade("x = (", p).outcomes[0].status == "compile_error"


def test_grader_rejects_bad_options():
    with pytest.raises(ValueError, match="workers"):
        Grader(workers=0)
    with pytest.raises(ValueError, match="skip_after_timeout"):
        Grader(skip_after_timeout="yes")


# ----------------------------------------------------------------------------- shipped set and oracle
def test_shipped_set_is_hand_written_and_well_formed():
    problems = shipped_problems()
    assert 20 <= len(problems) <= 40
    assert len({p.problem_id for p in problems}) == len({p.key for p in problems}) == len(problems)
    assert sum(p.fn_name is None for p in problems) >= 10 and sum(p.fn_name is not None for p in problems) >= 5
    for p in problems:
        assert p.solution and p.public_tests and len(p.hidden_tests) >= 3


def test_oracle_passes_every_hidden_and_public_test_of_every_shipped_problem(grader):
    problems = shipped_problems()
    jobs = [(extract_code(DeepCoderGame(p).oracle_action()), p, p.hidden_tests) for p in problems]
    grader.prefetch(jobs + [(code, p, p.public_tests) for code, p, _ in jobs])
    for p in problems:
        game = DeepCoderGame(p, grader)
        reward, done, info = game.step(game.oracle_action())
        assert (reward, done, info["success"]) == (1.0, True, True), (p.problem_id, game.render_text())
        assert grader.grade(extract_code(game.oracle_action()), p, p.public_tests).all_passed, p.problem_id


# ----------------------------------------------------------------------------- loaders
def _write(tmp_path, records, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_taco_records(tmp_path):
    stdin = {
        "question": "Echo.",
        "input_output": json.dumps({"inputs": ["a\n", "b\n", "c\n"], "outputs": ["a\n", "b\n", "c\n"]}),
        "solutions": json.dumps(["print(input())"]),
    }
    call = {
        "question": "Add.",
        "input_output": {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]},
        "starter_code": "def add(a, b):",
    }
    p, q = load_coding_problems(_write(tmp_path, [stdin, call]))
    assert (p.fn_name, p.public_tests, len(p.hidden_tests), p.solution) == (
        None,
        (TestCase("a\n", "a\n"),),
        2,
        "print(input())",
    )
    assert (q.fn_name, q.public_tests, q.hidden_tests) == ("add", (TestCase([1, 2], [3]),), (TestCase([3, 4], [7]),))
    assert q.starter_code == "def add(a, b):"


def test_livecodebench_records(tmp_path):
    rec = {
        "question_content": "Return twice x.",
        "public_test_cases": json.dumps([{"input": "2", "output": "4", "testtype": "functional"}]),
        "private_test_cases": json.dumps(
            [
                {"input": "5", "output": "10", "testtype": "functional"},
                {"input": "[1]", "output": "[1, 1]", "testtype": "functional"},
            ]
        ),
        "starter_code": "class Solution:\n    def twice(self, x):\n        ",
        "metadata": json.dumps({"func_name": "twice"}),
    }
    (p,) = load_coding_problems(_write(tmp_path, [rec]))
    assert p.fn_name == "twice" and p.public_tests == (TestCase([2], 4),)
    assert p.hidden_tests == (TestCase([5], 10), TestCase([[1]], [1, 1]))
    compressed = dict(rec, private_test_cases="eJzLSM3JyQcABiwCFQ==")
    with pytest.raises(ValueError, match=r"line 1: field 'private_test_cases' is not JSON.*pickle"):
        load_coding_problems(_write(tmp_path, [compressed], "c.jsonl"))


def test_primeintellect_and_plain_records(tmp_path):
    prime = {"problem": "Echo.", "tests": json.dumps([{"input": "x\n", "output": "x\n"}] * 3)}
    prime_io = {"prompt": "Echo2.", "tests": {"inputs": ["1\n", "2\n"], "outputs": ["1\n", "2\n"]}}
    one = {"prompt": "Echo3.", "tests": [{"input": "1\n", "output": "1\n"}]}
    a, b, c = load_coding_problems(_write(tmp_path, [prime, prime_io, one]))
    assert (len(a.public_tests), len(a.hidden_tests)) == (1, 2)
    assert (len(b.public_tests), len(b.hidden_tests)) == (1, 1)
    assert (len(c.public_tests), len(c.hidden_tests)) == (0, 1)  # a lone test stays hidden
    (d,) = load_coding_problems(_write(tmp_path, [prime], "p.jsonl"), num_public=0)
    assert (len(d.public_tests), len(d.hidden_tests)) == (0, 3)


@pytest.mark.parametrize(
    "record,match",
    [
        ({"tests": []}, r"line 1: missing statement"),
        ({"prompt": "x"}, r"line 1: missing tests"),
        (
            {"prompt": "x", "tests": [{"input": "1"}]},
            r"line 1: test 0 of 'tests' must be an object with 'input' and 'output'",
        ),
        ({"prompt": "x", "tests": "not json"}, r"line 1: field 'tests' is not JSON"),
        ({"prompt": "x", "tests": [{"input": 1, "output": "1"}]}, r"test 0 of 'tests': stdin tests need text"),
        (
            {"prompt": "x", "fn_name": "a b", "tests": [{"input": [1], "output": 1}]},
            r"fn_name must be a Python identifier",
        ),
        ({"prompt": "x", "input_output": {"inputs": [1], "outputs": []}}, r"'inputs' and 'outputs' of equal length"),
        ({"prompt": "x", "public_tests": [{"input": "1", "output": "1"}], "hidden_tests": []}, r"no hidden tests"),
    ],
)
def test_malformed_records_name_file_line_and_field(tmp_path, record, match):
    path = _write(tmp_path, [record])
    with pytest.raises(ValueError, match=match) as err:
        load_coding_problems(path)
    assert str(path) in str(err.value)


def test_missing_file_and_bad_json_line(tmp_path):
    with pytest.raises(ValueError, match="file not found"):
        load_coding_problems(tmp_path / "nope.jsonl")
    path = tmp_path / "bad.jsonl"
    # records are read as a stream: line 1 must be a good record for line 2's error to be reached
    good = {"prompt": "x", "tests": [{"input": "1\n", "output": "1\n"}] * 2}
    path.write_text(json.dumps(good) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: invalid JSON"):
        load_coding_problems(path)


def test_problem_from_record_keeps_ids_and_solutions():
    rec = {"id": "p1", "prompt": "x", "tests": [{"input": "1\n", "output": "1\n"}] * 2, "solution": "print(1)"}
    p = problem_from_record(rec, "here")
    assert (p.problem_id, p.solution) == ("p1", "print(1)")


def test_printing_the_shown_example_scores_zero_when_hidden_tests_repeat_it(grader):
    # TACO/APPS records often repeat the example among the hidden tests: that copy is not hidden
    example = TestCase("1 2\n", "3\n")
    p = CodingProblem("Add two numbers.", (example,), (TestCase("1 2 \n", "3\n"), TestCase("5 5\n", "10\n")))
    copier = "print(3)"
    assert DeepCoderGame(p, grader, reward="fraction").step(copier)[0] == 0.5  # without the dedupe
    (deduped,) = dedupe_hidden_tests([p])
    assert [t.input for t in deduped.hidden_tests] == ["5 5\n"]
    assert DeepCoderGame(deduped, grader, reward="fraction").step(copier)[0] == 0.0
    assert DeepCoderGame(deduped, grader).step("print(sum(map(int, input().split())))")[0] == 1.0
    # a problem whose every hidden test is a shown one is dropped (nothing left to grade)
    assert dedupe_hidden_tests([CodingProblem("Echo.", (example,), (example,))]) == []
    fn = CodingProblem("Add.", (TestCase([1, 2], 3),), (TestCase([1, 2], 3), TestCase([2, 2], 4)), fn_name="add")
    assert drop_shown_tests(fn)[1] == 1


def test_env_drops_repeated_examples_on_load(tmp_path, caplog):
    from ragen_torchrl.envs.deepcoder import DeepCoderEnv

    rec = {"prompt": "Print 3.", "public_tests": [{"input": "x", "output": "3"}]}
    rec["hidden_tests"] = [{"input": "x", "output": "3"}, {"input": "y", "output": "4"}]
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "prompt": "Print 4."}) + "\n")
    with caplog.at_level("WARNING"):
        env = DeepCoderEnv(num_envs=1, data_path=str(path), val_fraction=0.0)
    assert all(len(p.hidden_tests) == 1 for p in env.problems["train"])
    assert "2 hidden tests repeat a shown example" in caplog.text
