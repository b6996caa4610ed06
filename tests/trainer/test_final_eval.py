"""The final evaluation (``trainer.final_eval``): a tiny run writes ``final_eval.json`` and
``final_eval_levels.csv``, ``ragen-eval --final-eval`` reproduces them, and bad values are config errors."""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from tensordict import lazy_stack
from torchrl.data.llm import History

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.splits import VAL_SEED_OFFSET, level_split, train_level_seeds, val_level_seeds
from ragen_torchrl.reporting.run_metrics import FINAL_EVAL_MEASURES, final_eval_note
from ragen_torchrl.reporting.runs import load_run
from ragen_torchrl.trainer.config import validate_config
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.eval_cli import main as eval_main
from ragen_torchrl.trainer.final_eval import (
    FINAL_EVAL_FILE,
    FINAL_EVAL_LEVELS_FILE,
    LEVEL_COLUMNS,
    evaluate_levels,
    final_eval_level_seeds,
    level_stats,
)
from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.summary import read_summary

LEVELS = 8
# a seconds-long trainer=smoke run (as tests/trainer/test_eval_cli.py's) that keeps its best policy; the final
# evaluation plays its 8 levels 5 at a time (two batches: 5 + 3)
SMALL = [
    "trainer=smoke",
    "trainer.total_iterations=1",
    "trainer.val_levels=4",
    "trainer.log_text_samples=0",
    *TINY_RUN,
    "rollout.max_new_tokens=40",  # the warm start refuses replies most of which would be cut
    "diagnostics.mi.enabled=false",
    "++trainer.keep_best=true",
    f"++trainer.final_eval.levels={LEVELS}",
    "++trainer.final_eval.batch_levels=5",
]


def compose_cfg(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def final_run(ragen_cache_dir, tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("final_eval") / "run"
    torch.manual_seed(0)
    summary = Trainer(compose_cfg(f"model.cache_dir={ragen_cache_dir}", *SMALL), run_dir=run_dir).fit()
    return run_dir, summary


# --------------------------------------------------------------------------- the run's files
@pytest.mark.slow
def test_a_run_writes_both_files_with_one_row_per_policy_mode_and_level(final_run):
    run_dir, returned = final_run
    result = json.loads((run_dir / FINAL_EVAL_FILE).read_text())
    assert result["levels"] == LEVELS and result["batch_levels"] == 5 and result["seed"] == 0
    assert result["temperatures"] == {"greedy": 0.0, "sampled": 0.5}  # sampled: trainer.val_temperature
    assert result["policies"] == {"final": str(run_dir / "policy"), "best": str(run_dir / "policy_best")}
    assert result["levels_file"] == FINAL_EVAL_LEVELS_FILE
    for policy in ("final", "best"):
        for mode in ("greedy", "sampled"):
            stats = result["results"][policy][mode]
            assert stats["n"] == LEVELS
            assert {"success", "success_stderr", "format_valid", "tokens", "turns", "reward_mean"} <= set(stats)

    rows = read_rows(run_dir / FINAL_EVAL_LEVELS_FILE)
    assert list(rows[0]) == list(LEVEL_COLUMNS)
    counts = Counter((r["policy"], r["mode"]) for r in rows)
    assert counts == {(p, m): LEVELS for p in ("final", "best") for m in ("greedy", "sampled")}
    for (policy, mode), _ in counts.items():
        mine = [r for r in rows if (r["policy"], r["mode"]) == (policy, mode)]
        assert [int(r["level"]) for r in mine] == list(range(LEVELS))
        assert [int(r["level_seed"]) for r in mine] == final_eval_level_seeds(LEVELS)

    # summary.json holds the same result, and fit() returned it
    assert read_summary(run_dir)["final_eval"] == result
    assert returned["final_eval"]["results"] == result["results"]
    assert "final_eval" in read_summary(run_dir)["phases"]


@pytest.mark.slow
def test_a_report_reads_the_runs_final_evaluation(final_run):
    run_dir, _ = final_run
    result = json.loads((run_dir / FINAL_EVAL_FILE).read_text())
    run = load_run(run_dir)
    for name, (_, measure, _) in FINAL_EVAL_MEASURES.items():
        policy, mode = name.split("_")
        assert measure(run) == result["results"][policy][mode]["success"]
    assert final_eval_note([run], "final_greedy") == f"final_greedy: {LEVELS} levels per run"


@pytest.mark.slow
def test_the_standard_error_is_the_hand_computed_one(final_run):
    run_dir, _ = final_run
    result = json.loads((run_dir / FINAL_EVAL_FILE).read_text())
    rows = [r for r in read_rows(run_dir / FINAL_EVAL_LEVELS_FILE) if (r["policy"], r["mode"]) == ("final", "sampled")]
    wins = sum(float(r["success"]) for r in rows)
    p = wins / LEVELS
    stats = result["results"]["final"]["sampled"]
    print(f"final, sampled: {wins:.0f}/{LEVELS} successes, p = {p}, SE = sqrt(p (1 - p) / {LEVELS})")
    assert stats["success"] == pytest.approx(p)
    assert stats["success_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / LEVELS))
    assert stats["tokens"] == pytest.approx(sum(int(r["tokens"]) for r in rows) / LEVELS)
    assert stats["turns"] == pytest.approx(sum(int(r["turns"]) for r in rows) / LEVELS)


@pytest.mark.slow
def test_the_levels_are_disjoint_from_training_and_validation(final_run):
    run_dir, returned = final_run
    seeds = {int(r["level_seed"]) for r in read_rows(run_dir / FINAL_EVAL_LEVELS_FILE)}
    cfg = returned["config"]
    trained = {s for it in range(cfg["trainer"]["total_iterations"]) for s in train_level_seeds(cfg["seed"], it, 16)}
    assert seeds.isdisjoint(trained) and all(s < VAL_SEED_OFFSET for s in trained)
    # validation-split seeds (the envs hold validation content out of training by level_split) ...
    assert {level_split(s) for s in seeds} == {"val"}
    # ... and none of the validation levels that chose the best policy (whatever trainer.val_levels)
    assert seeds.isdisjoint(val_level_seeds(65536))


@pytest.mark.slow
def test_the_best_policy_of_the_last_validation_plays_as_the_final_one(final_run):
    """One iteration: the final validation set the peak, so policy_best/ holds the final weights; the two play
    the same levels with the same sampling seeds, so every per-level outcome agrees (a paired comparison)."""
    run_dir, _ = final_run
    rows = read_rows(run_dir / FINAL_EVAL_LEVELS_FILE)

    def outcomes(policy: str, mode: str):
        return [{k: r[k] for k in LEVEL_COLUMNS[2:]} for r in rows if (r["policy"], r["mode"]) == (policy, mode)]

    for mode in ("greedy", "sampled"):
        assert outcomes("final", mode) == outcomes("best", mode)


@pytest.mark.slow
def test_ragen_eval_final_eval_reproduces_the_run_and_greedy_is_deterministic(final_run, tmp_path, capsys):
    run_dir, _ = final_run
    trained = json.loads((run_dir / FINAL_EVAL_FILE).read_text())
    out_json, out_csv = tmp_path / "again.json", tmp_path / "again.csv"
    argv = [str(run_dir), "--final-eval", "--json", str(out_json), "--per-level", str(out_csv), "--no-progress"]
    assert eval_main(argv) == 0
    printed = capsys.readouterr().out
    assert "[final eval] final, greedy: success" in printed and "[final eval] best, sampled" in printed
    again = json.loads(out_json.read_text())
    for policy in ("final", "best"):
        for mode in ("greedy", "sampled"):
            got = {k: v for k, v in again["results"][policy][mode].items() if k != "seconds"}
            assert got == {k: v for k, v in trained["results"][policy][mode].items() if k != "seconds"}
    assert read_rows(out_csv) == read_rows(run_dir / FINAL_EVAL_LEVELS_FILE)

    # greedy only, the final policy only, on 3 of the levels: the first rows of the run's, exactly
    assert eval_main([*argv, "--greedy", "--which", "last", "--levels", "3"]) == 0
    rows = read_rows(out_csv)
    first = [r for r in read_rows(run_dir / FINAL_EVAL_LEVELS_FILE) if (r["policy"], r["mode"]) == ("final", "greedy")]
    assert rows == first[:3]
    assert json.loads(out_json.read_text())["temperatures"] == {"greedy": 0.0}


@pytest.mark.slow
def test_ragen_eval_final_eval_refuses_bad_options(final_run, tmp_path, capsys):
    run_dir, _ = final_run
    base = [str(run_dir), "--json", str(tmp_path / "x.json"), "--no-progress"]
    cases = [
        ([*base, "--greedy"], "--greedy, --sampled and --per-level go with --final-eval"),
        (
            [*base, "--final-eval", "--levels", "0"],
            "trainer.final_eval.levels=0: the final evaluation needs at least one",
        ),
        ([*base, "--final-eval", "--levels", "-2"], "trainer.final_eval.levels must be a non-negative integer, got -2"),
        ([*base, "--final-eval", "--levels", "4", "trainer.final_eval.modes=[beam]"], "unknown mode 'beam'"),
        ([*base, "--final-eval", "--levels", "4", "--dump", "x.gif"], "--dump and --export evaluate one policy"),
    ]
    for argv, message in cases:
        assert eval_main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv


# --------------------------------------------------------------------------- per-level evaluation (no model)
ACTIONS = ("Left", "Down", "Right", "Up")


def random_walk(td):
    """A scripted policy: one uniformly random action per turn, drawn from torch's seeded stream."""
    n = td.shape[0]
    picks = torch.randint(len(ACTIONS), (n,)).tolist()
    replies = [History(role="assistant", content=f"<think>go</think><answer>{ACTIONS[i]}</answer>") for i in picks]
    full = td["history", "prompt"].extend(lazy_stack([r.unsqueeze(0) for r in replies]), inplace=False, dim=-1)
    return td.set(("history", "full"), full).set(("tokens", "response"), [torch.tensor([1])] * n)


def test_levels_in_batches_give_one_row_each_and_the_hand_computed_standard_error():
    def env_for(n: int):
        return make_env("frozenlake", num_envs=n)

    rows = evaluate_levels(env_for, random_walk, 12, seed=0, batch_levels=5, progress=False)  # 5 + 5 + 2
    assert [r["level"] for r in rows] == list(range(12))
    assert [r["level_seed"] for r in rows] == final_eval_level_seeds(12)
    k = sum(r["success"] for r in rows)
    assert 0 < k < 12, k  # some walks reach the goal, some do not: the SE is not trivially 0
    stats = level_stats(rows)
    p = k / 12
    print(f"{k:.0f} of 12 levels solved: SE = sqrt({p:.4f} * {1 - p:.4f} / 12) = {math.sqrt(p * (1 - p) / 12):.6f}")
    assert stats["n"] == 12 and stats["success"] == pytest.approx(p)
    assert stats["success_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / 12), rel=1e-12)
    # seeded per batch: the same rows again, other rows under another run seed
    assert evaluate_levels(env_for, random_walk, 12, seed=0, batch_levels=5, progress=False) == rows
    assert evaluate_levels(env_for, random_walk, 12, seed=1, batch_levels=5, progress=False) != rows


# --------------------------------------------------------------------------- config errors (no run)
@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.final_eval.levels=-1", "trainer.final_eval.levels must be a non-negative integer, got -1"),
        ("trainer.final_eval.levels=2000000", "trainer.final_eval.levels=2000000 exceeds the limit"),
        ("trainer.final_eval.modes=[greedy,beam]", "trainer.final_eval.modes=['greedy', 'beam']: unknown mode 'beam'"),
        ("trainer.final_eval.modes=[]", "trainer.final_eval.modes=[]: a list of greedy and/or sampled"),
        ("trainer.final_eval.modes=greedy", "trainer.final_eval.modes='greedy': a list of"),
        ("trainer.final_eval.modes=[sampled,sampled]", "trainer.final_eval.modes=['sampled', 'sampled']: a mode is"),
        ("trainer.final_eval.batch_levels=0", "trainer.final_eval.batch_levels must be a positive integer, got 0"),
        ("trainer.final_eval.temperature=-1", "trainer.final_eval.temperature must be"),
    ],
)
def test_bad_final_eval_values_are_config_errors(override, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        validate_config(compose_cfg(f"++{override}"))


def test_the_default_is_off_and_the_presets_compose_as_before():
    cfg = validate_config(compose_cfg())
    assert cfg.trainer.final_eval.levels == 0  # off: no file, no summary entry, no time
    assert list(cfg.trainer.final_eval.modes) == ["greedy", "sampled"] and cfg.trainer.final_eval.temperature is None
    assert validate_config(compose_cfg("++trainer.final_eval.levels=2048")).trainer.final_eval.levels == 2048
