"""The schema of the ``env`` group: one dataclass per environment (``env.name``), each field with its
default, help and check (:func:`.config_fields.setting`).

:data:`ENV_SCHEMAS` maps an env name to its dataclass; an env registered at run time with
``register_env`` has none (its node takes any keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Optional  # noqa: UP035 - OmegaConf resolves typing's generics by name

from omegaconf import MISSING, DictConfig

from .config_checks import (
    ConfigError,
    _get,
    check_bool,
    check_float_range,
    check_positive_int,
    check_probability,
)
from .config_fields import (
    _lazy_choice,
    _opt_pos_int,
    setting,
)

__all__ = ["ENV_SCHEMAS", "EnvConfig"]

# ------------------------------------------------------------------------------------------- env
_env_int = check_positive_int
_opt_env_int = _opt_pos_int


def _penalty(cfg: DictConfig, key: str) -> None:
    # a penalty: a positive value would reward malformed replies
    check_float_range(cfg, key, -100.0, 0.0, why=" (a penalty: <= 0)")


def _val_fraction(cfg: DictConfig, key: str) -> None:
    value = _get(cfg, key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0):
        raise ConfigError(f"{key} must be in [0, 1), got {value!r}")


@dataclass
class EnvConfig:
    """Settings every env has."""

    name: str = setting(MISSING, "the env (a name of ragen_torchrl.envs.available_envs())")
    max_turn: int = setting(5, "turns per episode", _env_int)
    format_penalty: float = setting(-0.1, "reward of a malformed reply", _penalty)


@dataclass
class TurnEnvConfig(EnvConfig):
    """The RAGEN envs: actions in <answer>, a reply format."""

    max_actions_per_turn: int = setting(1, "actions one reply may hold", _env_int)
    max_actions_per_traj: int = setting(1, "actions per episode", _env_int)
    reply_format: str = setting(
        "strict",
        "strict (RAGEN reference: only whitespace between </think> and <answer>) | lenient",
        _lazy_choice("..envs.parsing", "REPLY_FORMATS"),
    )


@dataclass
class DataEnvConfig(TurnEnvConfig):
    """A RAGEN env over a data file (null paths: the package's offline stand-in)."""

    data_path: Optional[str] = setting(None, "records file (.jsonl/.json/.parquet); null = the offline stand-in")
    val_data_path: Optional[str] = setting(None, "optional separate validation file (else held out from data_path)")
    val_fraction: float = setting(0.1, "share of records (by content hash) held out for validation", _val_fraction)


@dataclass
class FrozenLakeEnvConfig(TurnEnvConfig):
    name: str = setting("frozenlake", "FrozenLake: random maps with a guaranteed path")
    size: int = setting(4, "side of the square map", _env_int)
    p_frozen: float = setting(0.9, "probability a cell is frozen", check_probability)
    success_rate: float = setting(1.0, "probability of the intended move (1.0 = not slippery)", check_probability)
    observation: str = setting(
        "annotated", "annotated (grid + coordinates + what each move reaches) | paper (RAGEN-2's text)"
    )
    slip_seeding: str = setting(
        "level", "level: a group's samples share slips | sample: each sample slips on its own seed"
    )
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_turn: int = setting(2, "actions one reply may hold", _env_int)
    max_actions_per_traj: int = setting(10, "actions per episode", _env_int)


@dataclass
class SokobanEnvConfig(TurnEnvConfig):
    name: str = setting("sokoban", "Sokoban rooms from the reverse-play generator")
    dim: Any = setting(factory=lambda: [6, 6], help="(height, width) including the wall border")
    num_boxes: int = setting(1, "boxes per room", _env_int)
    num_steps: Optional[int] = setting(
        None, "random-walk steps of the room topology; null = 1.7 * (h + w)", _opt_env_int
    )
    search_depth: int = setting(100, "max pulls on one reverse-play path", _env_int)
    max_nodes: int = setting(3000, "reverse-play search budget per room", _env_int)
    level: Optional[str] = setting(None, "a fixed room as text (tests/demos); null = generate per seed")
    val_fraction: float = setting(
        0.1, "share of rooms (by content hash) held out for validation; 0 = split by seed only", _val_fraction
    )
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_turn: int = setting(2, "actions one reply may hold", _env_int)
    max_actions_per_traj: int = setting(10, "actions per episode", _env_int)


@dataclass
class _VisualBoardConfig:
    """The keys every board-image env adds to its text env (``ragen_torchrl.envs.visual``)."""

    observation: str = setting(
        "image",
        "image (the user text only says the board is in the image) | image+text (the text observation as well)",
        _lazy_choice("..envs.visual", "VISUAL_OBSERVATIONS"),
    )
    tile_px: int = setting(28, "pixels per cell: 28 = one Qwen2-VL image token per cell", _env_int)
    coord_frames: bool = setting(
        True, "frame each tile in a colour encoding its row (red) and column (blue)", check_bool
    )


@dataclass
class VisualFrozenLakeEnvConfig(_VisualBoardConfig, FrozenLakeEnvConfig):
    name: str = setting("frozenlake_visual", "FrozenLake observed as a rendered board image")
    text_observation: str = setting(
        "annotated", "the text part of image+text: annotated | paper", _lazy_choice("..envs.frozenlake", "OBSERVATIONS")
    )


@dataclass
class VisualSokobanEnvConfig(_VisualBoardConfig, SokobanEnvConfig):
    name: str = setting("sokoban_visual", "Sokoban observed as a rendered room image")


@dataclass
class BanditEnvConfig(TurnEnvConfig):
    name: str = setting("bandit", "two-armed bandit, one turn")
    payout_seeding: str = setting(
        "level", "level: a group's samples share the payout draw | sample: each draws its own"
    )
    max_turn: int = setting(1, "turns per episode", _env_int)


@dataclass
class CountdownEnvConfig(DataEnvConfig):
    name: str = setting("countdown", "Countdown: reach the target with + - * /")
    num_numbers: Optional[int] = setting(None, "generated problems: numbers per problem; null = 3 or 4", _opt_env_int)
    max_number: int = setting(99, "generated problems: largest number", _env_int)
    max_target: int = setting(1000, "generated problems: largest target", _env_int)
    max_turn: int = setting(1, "turns per episode", _env_int)


@dataclass
class MetaMathQAEnvConfig(DataEnvConfig):
    name: str = setting("metamathqa", "MetaMathQA: answer a math question, up to 5 attempts")
    limit: Optional[int] = setting(None, "keep at most this many records (null = all)", _opt_env_int)
    hub_split: str = setting("train", "split of a hub dataset (ignored for local files)")
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_traj: int = setting(5, "actions per episode", _env_int)


@dataclass
class SearchQAEnvConfig(DataEnvConfig):
    name: str = setting("searchqa", "SearchQA: search a passage corpus, then answer")
    limit: Optional[int] = setting(None, "keep at most this many records (null = all)", _opt_env_int)
    corpus_path: Optional[str] = setting(None, "passages file; required with data_path, and only with it")
    world_seed: int = setting(0, "generated world: its seed")
    max_hops: int = setting(2, "generated world: questions of at most this many hops (1 or 2)")
    top_k: int = setting(5, "passages per search (reference: 5)")
    passage_chars: int = setting(300, "each shown passage is cut to this many characters")
    f1_threshold: float = setting(0.3, "token F1 below this scores 0 (reference: 0.3)")
    cache_dir: Optional[str] = setting(None, "BM25 index cache; null = $RAGEN_CACHE or ~/.cache/ragen_torchrl")
    max_turn: int = setting(5, "turns per episode", _env_int)
    max_actions_per_traj: int = setting(5, "actions per episode", _env_int)


@dataclass
class WebShopEnvConfig(DataEnvConfig):
    name: str = setting("webshop", "WebShop: buy the product an instruction describes")
    catalog_path: Optional[str] = setting(None, "WebShop products (items_shuffle*.json); null = generated catalogue")
    attributes_path: Optional[str] = setting(None, "WebShop attributes (items_ins_v2*.json); needs catalog_path")
    num_products: Optional[int] = setting(
        None, "generated catalogue size (null = 3000) / first products of catalog_path"
    )
    catalog_seed: int = setting(0, "seed of the generated catalogue and goals")
    search_return_n: int = setting(50, "results per search (10 per page)")
    reward_mode: str = setting("binary", "binary (RAGEN: 1 iff score == 1) | score (WebShop's score in [0, 1])")
    observation: str = setting(
        "compact", "compact (each clickable once) | webshop ([SEP] page text + RAGEN's action list)"
    )
    max_turn: int = setting(9, "RAGEN's WebShop turn limit", _env_int)
    max_actions_per_traj: int = setting(9, "actions per episode", _env_int)


@dataclass
class DeepCoderEnvConfig(DataEnvConfig):
    name: str = setting("deepcoder", "DeepCoder: write a program, run sandboxed on hidden tests")
    limit: Optional[int] = setting(None, "keep at most this many records (null = all)", _opt_env_int)
    num_public: int = setting(1, "tests shown as examples when a record has no public/hidden split")
    timeout_s: float = setting(1.0, "wall-clock seconds per test run")
    memory_mb: int = setting(512, "memory of a run (address space + its files), in [64, 65536]", _env_int)
    max_output_bytes: int = setting(1048576, "stdout + stderr read before a run is killed", _env_int)
    isolation: str = setting("auto", "auto (bwrap if it works, else weak) | bwrap | weak (NOT a security boundary)")
    workers: int = setting(4, "threads grading a step's programs in parallel", _env_int)
    reward: str = setting("fraction", "fraction (of hidden tests passed, the reference) | binary (all pass)")
    skip_after_timeout: bool = setting(True, "a submission's remaining tests fail after its first timeout", check_bool)
    max_turn: int = setting(1, "turns per episode", _env_int)


@dataclass
class ActiveEnvConfig(EnvConfig):
    """The T3 active-reasoning envs: <interact> queries, then <answer>."""

    max_turn: int = setting(10, "queries + answer (paper default)", _env_int)
    malformed: str = setting(
        "auto",
        "what a reply without <interact>/<answer> does: auto (the reference: end while T3 truncates, i.e. T3 on "
        "in training, else retry) | end (the episode, reward 0) | retry (Try again, no penalty) | penalty "
        "(format_penalty, goes on); end, retry and penalty hold in training and validation alike",
        _lazy_choice("..envs.active.env", "MALFORMED_MODES"),
    )
    require_think: bool = setting(False, "true: a reply without </think> is malformed", check_bool)
    noise_repeat: float = setting(
        0.5, "demonstrations: share of noisy queries that repeat an earlier query", check_probability
    )


@dataclass
class GuessNumbersEnvConfig(ActiveEnvConfig):
    name: str = setting("guess_numbers", "GuessNumbers: distinct digits, (in place, misplaced) feedback")
    num_digits: int = setting(4, "code length", _env_int)
    num_symbols: int = setting(10, "digits 0 .. num_symbols-1", _env_int)
    terse: bool = setting(False, "short demonstrator reasoning")
    list_candidates: Optional[int] = setting(
        None, "terse reasoning lists the candidates once at most this many are left"
    )
    split_by: str = setting(
        "secret",
        "secret: validation secrets are never training secrets (every fifth code) | level: both splits draw "
        "from every code",
        _lazy_choice("..envs.games.guess_numbers", "GuessNumbersGame.SPLIT_BY"),
    )


@dataclass
class CircuitDecodingEnvConfig(ActiveEnvConfig):
    name: str = setting("circuit_decoding", "CircuitDecoding: identify hidden Boolean circuits")
    num_circuits: int = setting(2, "hidden circuits", _env_int)
    n_inputs: int = setting(3, "inputs per circuit", _env_int)
    family: str = setting("default", "default | basic")
    presentation: str = setting(
        "indexed",
        "indexed (candidates listed with indices) | formula (formula-text answers)",
        _lazy_choice("..envs.games.circuit_decoding", "CircuitDecodingGame.PRESENTATIONS"),
    )
    terse: bool = setting(False, "short demonstrator reasoning")
    split_by: str = setting(
        "circuits",
        "circuits: validation circuits are never training ones | level: both splits draw from every circuit",
        _lazy_choice("..envs.games.circuit_decoding", "CircuitDecodingGame.SPLIT_BY"),
    )


@dataclass
class PreferenceEstimationEnvConfig(ActiveEnvConfig):
    name: str = setting(
        "preference_estimation", "PreferenceEstimation: a hidden preference vector from pairwise questions"
    )
    num_items: int = setting(20, "items", _env_int)
    dim: Any = setting(8, "preference dimensions (reference: 8)")
    nonnegative: bool = setting(True, "v* has non-negative weights (reference)", check_bool)
    threshold: float = setting(
        0.88,
        "reward 1 iff cos(estimate, v*) > threshold",
        partial(check_float_range, low=-1.0, high=1.0, why=" (a cosine similarity)"),
    )
    estimate_source: str = setting("agent", "agent (the estimates the model reports) | observations")
    oracle_particles: int = setting(500, "demonstrator's belief particles", _env_int)


@dataclass
class MovieRecommendationEnvConfig(ActiveEnvConfig):
    name: str = setting("movie_recommendation", "MovieRecommendation: recommend the best unseen movie")
    max_turn: int = setting(5, "queries + answer (paper default)", _env_int)
    num_seen: int = setting(8, "movies the user has seen", _env_int)
    num_candidates: int = setting(8, "unseen candidates", _env_int)
    estimate_source: str = setting("agent", "agent | observations")
    catalog_path: Optional[str] = setting(None, "null = the built-in generated catalog")


@dataclass
class SituationPuzzlesEnvConfig(ActiveEnvConfig):
    name: str = setting("situation_puzzles", "SituationPuzzles: yes/no questions, then the explanation")
    max_turn: int = setting(15, "queries + answer (paper default)", _env_int)
    success_threshold: float = setting(0.5, "F1 counted as success", check_probability)


#: the env dataclass of each built-in env name
ENV_SCHEMAS: dict[str, type] = {
    "frozenlake": FrozenLakeEnvConfig,
    "sokoban": SokobanEnvConfig,
    "frozenlake_visual": VisualFrozenLakeEnvConfig,
    "sokoban_visual": VisualSokobanEnvConfig,
    "bandit": BanditEnvConfig,
    "countdown": CountdownEnvConfig,
    "metamathqa": MetaMathQAEnvConfig,
    "searchqa": SearchQAEnvConfig,
    "webshop": WebShopEnvConfig,
    "deepcoder": DeepCoderEnvConfig,
    "guess_numbers": GuessNumbersEnvConfig,
    "circuit_decoding": CircuitDecodingEnvConfig,
    "preference_estimation": PreferenceEstimationEnvConfig,
    "movie_recommendation": MovieRecommendationEnvConfig,
    "situation_puzzles": SituationPuzzlesEnvConfig,
}
