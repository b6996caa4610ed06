"""The T3 experiment at CPU scale: RL with vs without T3 truncation, same warm start, same seeds.

T3 ("Reducing Belief Deviation in RL for Active Reasoning", arXiv:2510.12264) claims that
truncating belief-trapped training trajectories gives higher success with fewer rollout tokens.
This script trains the tiny offline model on the small active-reasoning presets
(``env=guess_numbers_small``, ``env=circuit_decoding_small``) twice per seed -- ``t3.enabled=false``
and ``t3.enabled=true``, everything else equal (config, warm start, training levels, seeds,
iterations) -- and reports, per task and arm, over the seeds:

* validation success (untruncated: validation never truncates) at the start and the end, mean and
  standard error over seeds;
* rollout tokens per iteration (generated tokens, summed over the batch), tokens per success
  (all training rollout tokens / all training successes), the T3 truncation rate, the share of
  episodes whose stall rule fired, and the turns saved per truncated episode;
* wall time per iteration.

Outputs under ``--out`` (default ``docs/results/t3_cpu``): ``runs/<task>/<arm>/seed<k>/`` (each run's
TensorBoard log, checkpoint and ``result.json``), ``results.json`` (every run's summary and
per-iteration scalars), ``results.md`` (the table) and PNG plots (``--no-plots`` skips them; they
need matplotlib, the ``plot`` extra). A finished run is not run again (delete its
``result.json`` to redo it), so an interrupted experiment continues where it stopped.

Usage::

    python experiments/t3_truncation.py                          # the committed experiment
    python experiments/t3_truncation.py --seeds 0 --iterations 4  # a quick look
    python experiments/t3_truncation.py -o algo.lr=5e-5           # any ragen-train override, both arms

Example (programmatic, a seconds-long run):
    >>> from experiments.t3_truncation import run_experiment   # doctest: +SKIP
    >>> results = run_experiment(["guess_numbers_small"], seeds=[0], iterations=1, out="/tmp/t3",
    ...                          overrides=["trainer=smoke"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

TASKS = ("guess_numbers_small", "circuit_decoding_small")
ARMS = ("no_t3", "t3")
#: what every run of the experiment pins (on top of the task's preset); both arms alike
BASE_OVERRIDES = [
    "trainer.total_iterations=20",
    "trainer.val_levels=128",
    "trainer.save_every=0",
    "trainer.log_text_samples=2",
    "diagnostics.mi.enabled=false",  # not part of this claim; saves time
    # GRPO's default lr (2e-4, tuned on FrozenLake) broke the tiny policy on GuessNumbers within 20
    # iterations in both arms (degenerate text; docs/results/t3_cpu_lr2e-4/); one lower lr for both arms
    "algo.lr=5e-5",
    # one thread: a 2-thread torch process slows down several-fold when anything else shares the 2 cores
    "model.threads=1",
]
#: per-iteration scalars kept in results.json
KEEP = (
    "rollout/success",
    "rollout/reward_mean",
    "rollout/turns",
    "rollout/tokens",
    "rollout/format_valid",
    "t3/rollout_tokens",
    "t3/tokens_per_success",
    "t3/truncation_rate",
    "t3/rule_fire_rate",
    "t3/mean_turns_saved",
    "timing/total",
    "timing/rollout",
    "timing/update",
)


# --------------------------------------------------------------------------------------- runs
def compose_config(task: str, arm: str, seed: int, overrides: list[str]):
    """The run's config, composed exactly as ``ragen-train env=TASK t3.enabled=... seed=...``."""
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    if arm not in ARMS:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[f"env={task}", f"seed={seed}", f"t3.enabled={arm == 't3'}", *BASE_OVERRIDES, *overrides],
        )


def run_one(task: str, arm: str, seed: int, out: Path, overrides: list[str]) -> dict[str, Any]:
    """Train one arm on one seed (or read the stored result of a finished run)."""
    import torch

    from ragen_torchrl.trainer.loop import Trainer

    run_dir = out / "runs" / task / arm / f"seed{seed}"
    done = run_dir / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    cfg = compose_config(task, arm, seed, overrides)
    torch.manual_seed(seed)
    t0 = time.time()
    trainer = Trainer(cfg, run_dir=run_dir)
    setup = time.time() - t0
    summary = trainer.fit()
    history = [{k: float(h[k]) for k in ("iteration", *KEEP) if k in h} for h in trainer.history]
    result = {
        "task": task,
        "arm": arm,
        "seed": seed,
        "val_start": summary["val_start"],
        "val_end": summary["val_end"],
        "seconds_train": summary["seconds"],
        "seconds_setup": setup,
        "iterations": len(history),
        "max_turn": int(trainer.env.max_turn),
        "overrides": list(overrides),
        "history": history,
    }
    done.write_text(json.dumps(result, indent=1))
    return result


# ----------------------------------------------------------------------------------- summary
def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value; NaNs dropped).

    Example:
        >>> mean_se([0.5, 0.7, 0.9])
        (0.7, 0.11547005383792514)
    """
    xs = [float(v) for v in values if v == v]
    if not xs:
        return math.nan, math.nan
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


def run_metrics(result: dict[str, Any]) -> dict[str, float]:
    """One run's numbers: end/start validation success and training token accounting.

    Tokens per success pools the whole run (all rollout tokens / all successful training
    episodes); turns saved is the mean over the iterations that truncated anything.
    """
    hist = result["history"]
    n = max(len(hist), 1)
    tokens = [h.get("t3/rollout_tokens", math.nan) for h in hist]
    # successes per iteration = success rate x trajectories (= rollout tokens / tokens per trajectory)
    per_traj = [h.get("rollout/tokens", math.nan) for h in hist]
    wins = [h["rollout/success"] * (t / p) if p else 0.0 for h, t, p in zip(hist, tokens, per_traj)]
    saved = [h["t3/mean_turns_saved"] for h in hist if h.get("t3/truncation_rate", 0) > 0]
    return {
        "val_success_start": result["val_start"]["success"],
        "val_success_end": result["val_end"]["success"],
        "val_gain": result["val_end"]["success"] - result["val_start"]["success"],
        "train_success": sum(h["rollout/success"] for h in hist) / n,
        "tokens_per_iteration": sum(tokens) / n,
        "tokens_per_success": sum(tokens) / sum(wins) if sum(wins) > 0 else math.nan,
        "truncation_rate": sum(h.get("t3/truncation_rate", 0.0) for h in hist) / n,
        "rule_fire_rate": sum(h.get("t3/rule_fire_rate", 0.0) for h in hist) / n,
        "turns_saved": sum(saved) / len(saved) if saved else 0.0,
        "turns_per_episode": sum(h["rollout/turns"] for h in hist) / n,
        "seconds_per_iteration": sum(h["timing/total"] for h in hist) / n,
    }


COLUMNS = (
    ("val_success_start", "val success (start)", "{:.3f}"),
    ("val_success_end", "val success (end)", "{:.3f}"),
    ("train_success", "train success", "{:.3f}"),
    ("tokens_per_iteration", "rollout tokens / iter", "{:.0f}"),
    ("tokens_per_success", "tokens / success", "{:.0f}"),
    ("turns_per_episode", "turns / episode", "{:.2f}"),
    ("truncation_rate", "truncation rate", "{:.3f}"),
    ("rule_fire_rate", "rule fired", "{:.3f}"),
    ("turns_saved", "turns saved / truncated ep.", "{:.2f}"),
    ("seconds_per_iteration", "s / iter", "{:.1f}"),
)


def summarize_results(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{task: {arm: {metric: (mean, se), "n": runs}}}`` over seeds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        out.setdefault(r["task"], {}).setdefault(r["arm"], {"runs": []})["runs"].append(run_metrics(r))
    for task in out.values():
        for arm in task.values():
            runs = arm.pop("runs")
            arm["n"] = len(runs)
            for key, _, _ in COLUMNS + (("val_gain", "", ""),):
                arm[key] = mean_se([m[key] for m in runs])
    return out


def markdown_table(summary: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The results table: one row per task and arm, mean ± SE over seeds, then T3's change in
    tokens per iteration and tokens per success relative to no T3."""
    head = "| task | arm | seeds | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (3 + len(COLUMNS))]
    for task, arms in summary.items():
        for arm in ARMS:
            if arm not in arms:
                continue
            a = arms[arm]
            cells = []
            for key, _, fmt in COLUMNS:
                m, se = a[key]
                cells.append("-" if m != m else f"{fmt.format(m)} ± {fmt.format(se)}")
            lines.append(f"| {task} | {arm} | {a['n']} | " + " | ".join(cells) + " |")
    lines.append("")
    for task, arms in summary.items():
        if not all(arm in arms for arm in ARMS):
            continue
        base, t3 = arms["no_t3"], arms["t3"]

        def change(key: str) -> str:
            b, t = base[key][0], t3[key][0]
            return "-" if not (b == b and t == t and b) else f"{100 * (t - b) / b:+.1f}%"

        dv = t3["val_success_end"][0] - base["val_success_end"][0]
        se = math.hypot(t3["val_success_end"][1], base["val_success_end"][1])
        lines.append(
            f"- **{task}**: T3 changes rollout tokens per iteration by {change('tokens_per_iteration')}, "
            f"tokens per success by {change('tokens_per_success')}; end validation success "
            f"{dv:+.3f} ± {se:.3f} (T3 minus no T3)."
        )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- plots
def plot_results(results: list[dict[str, Any]], out: Path) -> list[Path]:
    """PNG plots: training success, rollout tokens per iteration and truncation rate against
    iteration (mean over seeds, band = ±1 SE), and validation success start/end per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r["task"] for r in results}, key=lambda t: TASKS.index(t) if t in TASKS else 99)
    colors = {"no_t3": "tab:blue", "t3": "tab:orange"}
    labels = {"no_t3": "without T3", "t3": "with T3"}
    written = []
    curves = (
        ("rollout/success", "training success rate", "train_success.png"),
        ("t3/rollout_tokens", "rollout tokens per iteration", "rollout_tokens.png"),
        ("t3/truncation_rate", "T3 truncation rate (share of episodes)", "truncation_rate.png"),
    )
    for key, ylabel, name in curves:
        fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            for arm in ARMS:
                runs = [r for r in results if r["task"] == task and r["arm"] == arm]
                if not runs:
                    continue
                length = min(len(r["history"]) for r in runs)
                xs, ms, ses = [], [], []
                for i in range(length):
                    m, se = mean_se([r["history"][i].get(key, math.nan) for r in runs])
                    xs.append(i + 1)
                    ms.append(m)
                    ses.append(se)
                ax.plot(xs, ms, color=colors[arm], label=f"{labels[arm]} ({len(runs)} seeds)")
                ax.fill_between(
                    xs, [m - s for m, s in zip(ms, ses)], [m + s for m, s in zip(ms, ses)], color=colors[arm], alpha=0.2
                )
            ax.set_title(f"{task}: {ylabel}")
            ax.set_xlabel("training iteration")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    summary = summarize_results(results)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for j, arm in enumerate(ARMS):
            if arm not in summary.get(task, {}):
                continue
            a = summary[task][arm]
            vals = [a["val_success_start"], a["val_success_end"]]
            ax.bar(
                [j * 0.35 + k for k in (0, 1)],
                [v[0] for v in vals],
                width=0.35,
                yerr=[v[1] for v in vals],
                capsize=4,
                color=colors[arm],
                label=f"{labels[arm]} ({a['n']} seeds)",
            )
        ax.set_xticks([0.175, 1.175], ["start (after warm start)", "end of RL"])
        ax.set_title(f"{task}: validation success (untruncated)")
        ax.set_ylabel("success rate (mean ± SE over seeds)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = out / "val_success.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


# ---------------------------------------------------------------------------------------- main
def run_experiment(
    tasks: list[str],
    seeds: list[int],
    iterations: int | None = None,
    out: str | Path = "docs/results/t3_cpu",
    overrides: list[str] | None = None,
    plots: bool = True,
) -> list[dict[str, Any]]:
    """Run every (task, arm, seed), then write ``results.json``, ``results.md`` and the plots."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    overrides = list(overrides or [])
    if iterations is not None:
        overrides.append(f"trainer.total_iterations={int(iterations)}")
    results = []
    t0 = time.time()
    for task in tasks:
        for seed in seeds:
            for arm in ARMS:
                print(f"=== {task} {arm} seed {seed} ({time.time() - t0:.0f}s elapsed)", flush=True)
                results.append(run_one(task, arm, seed, out, overrides))
    summary = summarize_results(results)
    (out / "results.json").write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    table = markdown_table(summary)
    (out / "results.md").write_text(table)
    print(table)
    if plots:
        for path in plot_results(results, out):
            print("wrote", path)
    print(f"total {time.time() - t0:.0f}s")
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--iterations", type=int, default=None, help="RL iterations per run (default: 20)")
    ap.add_argument("--out", default="docs/results/t3_cpu")
    ap.add_argument("-o", "--override", action="append", default=[], help="ragen-train override, both arms")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    run_experiment(args.tasks, args.seeds, args.iterations, args.out, args.override, plots=not args.no_plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
