"""MovieRecommendation (T3 active reasoning): learn a user's taste, then recommend an unseen movie.

**Catalog.** Items with a ``title`` and an ``attributes`` vector. :func:`generate_catalog` makes a
deterministic catalog with made-up titles from a small word list (attributes in ``[0, 1]``, 2
decimals); :func:`load_catalog` reads a user file (JSON lines / JSON array / CSV, fields ``title``
and ``attributes``) and raises ``ValueError`` naming the file and the fields when it is malformed.

**Episode.** A hidden unit preference vector ``v*``; ``num_seen`` movies (default 8) the user has
seen, listed with 1-based ids, and ``num_candidates`` unseen movies (default 8) listed by title;
the agent sees every attribute vector. Queries are pairwise questions about *seen* movies only, as
in the reference (no query reveals a numeric score): ``"Would you prefer 3 over 5?"`` (also
``"compare 3 5"``) -> ``"Yes: the user prefers 'A' over 'B'."`` (``Yes`` / ``Equal`` / ``No``).
A question may carry the agent's running estimate, ``"Would you prefer 3 over 5? estimate: 0.1,
0.5, -0.2, 0.3"`` (an estimate-only query is valid too), as in PreferenceEstimation. A malformed
query never raises.

**Answer.** The title of one unseen candidate (case-insensitive, quotes and a final period ignored).
Reward 1.0 iff it is the candidate with the highest ``v*·x`` (exact match), else 0.0; a title that
is not a candidate scores 0 with ``info["valid"] = False``. ``generate`` draws ``v*`` so that the best
candidate leads the runner-up by at least ``min_margin`` (0.05). ``max_turns`` = 5.

**Progress.** As PreferenceEstimation: ``progress()`` = ``cos(v̂_t, v*)`` (higher is closer).
``estimate_source="agent"`` (default): ``v̂_t`` = the latest estimate the agent reported (0.0 before
any). ``estimate_source="observations"``: the closed-form comparison estimate of
PreferenceEstimation over the seen movies. The demonstrator asks the question that splits a
particle belief most evenly (:class:`~ragen_torchrl.envs.games.preference_belief.PreferencePosterior`)
and recommends the candidate with the highest utility under the belief's mean.

Example:
    >>> catalog = generate_catalog(0, num_items=12, dim=3)
    >>> game = MovieRecommendationGame.generate(0, catalog=catalog, num_seen=4, num_candidates=4)
    >>> text, info = game.interact("Would you prefer 1 over 2?")
    >>> text.split(":")[0] in ("Yes", "Equal", "No"), info["reply"] == text.split(":")[0]
    (True, True)
"""

from __future__ import annotations

import csv
import io
import os
import random
import re
from typing import Any, Sequence

from ragen_torchrl.envs.games.preference_belief import dot, norm, random_unit
from ragen_torchrl.envs.games.preference_game import PreferenceQuestionGame
from ragen_torchrl.envs.games.preference_questions import ask_pair, format_vector, parse_pair, split_estimate
from ragen_torchrl.envs.games.records import RecordError, iter_records, parse_json
from ragen_torchrl.envs.parsing import safe_int

__all__ = [
    "MovieRecommendationGame",
    "generate_catalog",
    "load_catalog",
]

Catalog = list[dict[str, Any]]

_ADJECTIVES = (
    "Silent",
    "Crimson",
    "Hidden",
    "Broken",
    "Golden",
    "Last",
    "Midnight",
    "Frozen",
    "Wild",
    "Lost",
    "Electric",
    "Distant",
    "Secret",
    "Burning",
    "Quiet",
    "Velvet",
    "Iron",
    "Paper",
)
_NOUNS = (
    "River",
    "Empire",
    "Garden",
    "Signal",
    "Horizon",
    "Mirror",
    "Harbor",
    "Machine",
    "Forest",
    "Letter",
    "Voyage",
    "Kingdom",
    "Shadow",
    "Orchard",
    "Comet",
    "Lantern",
    "Island",
    "Echo",
)


def generate_catalog(seed: int = 0, num_items: int = 50, dim: int = 4) -> Catalog:
    """A deterministic catalog of ``num_items`` movies with unique made-up titles
    (``"The <Adjective> <Noun>"``, numbered sequels beyond the word list) and attribute vectors
    in ``[0, 1]^dim`` rounded to 2 decimals."""
    if num_items < 1 or dim < 1:
        raise ValueError("num_items and dim must be positive")
    rng = random.Random(f"MovieCatalog/{int(seed)}")
    names = [f"The {a} {n}" for a in _ADJECTIVES for n in _NOUNS]
    rng.shuffle(names)
    titles = []
    for i in range(num_items):
        base = names[i % len(names)]
        rnd = i // len(names)
        titles.append(base if rnd == 0 else f"{base} {rnd + 1}")
    return [{"title": t, "attributes": [round(rng.random(), 2) for _ in range(dim)]} for t in titles]


_FIELDS_HINT = "expected fields 'title' (text) and 'attributes' (a list of numbers)"


def _coerce_attributes(value: Any) -> list[float] | None:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = parse_json(text, "attributes")
            except RecordError:  # also nesting past MAX_DEPTH (RecursionError in json.loads)
                return None
        else:
            parts = [p for p in re.split(r"[;|\s,]+", text) if p]
            try:
                value = [float(p) for p in parts]
            except ValueError:
                return None
    if not isinstance(value, (list, tuple)) or not value:
        return None
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float, str)):
            return None
        try:
            f = float(x)
        except ValueError:
            return None
        if f != f or f in (float("inf"), float("-inf")):
            return None
        out.append(f)
    return out


def load_catalog(path: str | os.PathLike) -> Catalog:
    """Read a catalog from JSON lines (one object per line), a JSON array, or CSV (header with
    ``title`` and ``attributes``; attributes as a JSON list or numbers separated by ``;``, ``|`` or
    spaces). Raises ``ValueError`` naming the file and the expected fields when malformed."""
    path = os.fspath(path)
    where = f"catalog file {path!r}"
    rows: list[tuple[int, Any]] = []
    if path.lower().endswith(".csv"):
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not {"title", "attributes"} <= set(reader.fieldnames):
            raise ValueError(f"{where}: header {reader.fieldnames}; {_FIELDS_HINT}")
        rows = [(i + 2, row) for i, row in enumerate(reader)]
    else:  # the shared strict reader (NaN, depth, UTF-8 and size limits; see records.py)
        rows = list(iter_records(path, _FIELDS_HINT))
    catalog: Catalog = []
    seen_titles: set[str] = set()
    for line, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{where}: entry {line} is not an object; {_FIELDS_HINT}")
        title = row.get("title")
        attrs = _coerce_attributes(row.get("attributes"))
        if not isinstance(title, str) or not title.strip() or attrs is None:
            raise ValueError(f"{where}: entry {line} is malformed; {_FIELDS_HINT}")
        title = title.strip()
        if title.lower() in seen_titles:
            raise ValueError(f"{where}: entry {line} repeats the title {title!r}; titles must be unique")
        seen_titles.add(title.lower())
        catalog.append({"title": title, "attributes": attrs})
    if not catalog:
        raise ValueError(f"{where}: no entries; {_FIELDS_HINT}")
    dims = {len(c["attributes"]) for c in catalog}
    if len(dims) != 1:
        raise ValueError(f"{where}: 'attributes' lengths differ ({sorted(dims)}); {_FIELDS_HINT}")
    return catalog


def _norm_title(text: str) -> str:
    t = text.strip().strip("\"'`“”‘’").strip().rstrip(".").strip().strip("\"'`“”‘’")
    return re.sub(r"\s+", " ", t).lower()


class MovieRecommendationGame(PreferenceQuestionGame):
    """Recommend the best unseen movie after asking about seen ones (see module docstring).

    Info keys of an interaction: ``query_type`` (``"compare"``, ``"estimate"`` or ``None``),
    ``compared`` (1-based pair or ``None``), ``reply`` (``"Yes"``/``"Equal"``/``"No"`` or
    ``None``), ``preferred`` (1-based id, ``None`` for Equal), ``estimate``, ``estimate_reported``,
    ``estimate_updated`` (as PreferenceEstimation), ``similarity`` (= ``progress()``),
    ``repeated_query``.
    Answer info: ``valid``, ``recommended`` (title or ``None``), ``best`` (the right title),
    ``success``, ``reward``.
    """

    max_turns = 5
    task_name = "MovieRecommendation"

    def __init__(
        self,
        catalog: Catalog,
        preference: Sequence[float],
        seen: Sequence[int],
        candidates: Sequence[int],
        estimate_source: str = "agent",
        max_turns: int | None = None,
        oracle_particles: int = 500,
        oracle_seed: int | str = 0,
    ) -> None:
        super().__init__(max_turns)
        self._init_questions(estimate_source, oracle_particles, oracle_seed)
        self.catalog = [{"title": c["title"], "attributes": [float(a) for a in c["attributes"]]} for c in catalog]
        self.dim = len(self.catalog[0]["attributes"])
        if len(preference) != self.dim or norm(preference) == 0:
            raise ValueError("preference must be a non-zero vector of the catalog's dimension")
        self.seen = [int(i) for i in seen]
        self.candidates = [int(i) for i in candidates]
        if not self.seen or not self.candidates:
            raise ValueError("need at least one seen movie and one candidate")
        if set(self.seen) & set(self.candidates):
            raise ValueError("seen movies and candidates must not overlap")
        if any(not 0 <= i < len(self.catalog) for i in self.seen + self.candidates):
            raise ValueError("seen/candidate indices out of range")
        self.preference = [float(a) for a in preference]
        utils = {i: dot(self.preference, self.catalog[i]["attributes"]) for i in self.candidates}
        self.best = max(self.candidates, key=lambda i: utils[i])

    @classmethod
    def generate(
        cls,
        seed: int,
        split: str = "train",
        catalog: Catalog | None = None,
        num_seen: int = 8,
        num_candidates: int = 8,
        min_margin: float = 0.05,
        **kwargs: Any,
    ) -> "MovieRecommendationGame":
        """Draw ``v*``, the seen movies and the candidates from ``catalog`` (default
        ``generate_catalog(0)``) with a split-specific random stream (train/val instances differ
        with probability 1). ``v*`` is redrawn (up to 200 times) until the best candidate leads by
        ``min_margin``."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        catalog = generate_catalog(0) if catalog is None else catalog
        if num_seen + num_candidates > len(catalog):
            raise ValueError(f"catalog has {len(catalog)} movies, fewer than num_seen + num_candidates")
        dim = len(catalog[0]["attributes"])
        rng = random.Random(f"MovieRecommendation/{split}/{int(seed)}")
        picks = rng.sample(range(len(catalog)), num_seen + num_candidates)
        seen, cands = picks[:num_seen], picks[num_seen:]
        for _ in range(200):
            pref = [round(x, 4) for x in random_unit(rng, dim)]
            utils = sorted((dot(pref, catalog[i]["attributes"]) for i in cands), reverse=True)
            if len(utils) < 2 or utils[0] - utils[1] >= min_margin:
                break
        kwargs.setdefault("oracle_seed", f"{split}/{int(seed)}")
        return cls(catalog, pref, seen, cands, **kwargs)

    # ---- helpers -----------------------------------------------------------------------------
    def _attrs(self, idx: int) -> list[float]:
        return self.catalog[idx]["attributes"]

    def _title(self, idx: int) -> str:
        return self.catalog[idx]["title"]

    def _seen_position(self, ref: str) -> int | None:
        ref = ref.strip()
        if re.fullmatch(r"#?\d+", ref):
            # safe_int clamps a number of more than 18 digits (out of range) where int()
            # raises ValueError beyond 4300 digits
            pos = safe_int(ref[1:] if ref.startswith("#") else ref) - 1
            return pos if 0 <= pos < len(self.seen) else None
        key = _norm_title(ref)
        for pos, idx in enumerate(self.seen):
            if _norm_title(self._title(idx)) == key:
                return pos
        return None

    def _compared_items(self) -> list[list[float]]:
        # questions are about the seen movies; comparisons hold positions in ``seen``
        return [self._attrs(i) for i in self.seen]

    # ---- text --------------------------------------------------------------------------------
    def _describe(self) -> str:
        lines = [
            f"Recommend a movie. Each movie has {self.dim} attributes; the user scores a movie by "
            "a hidden weighted sum of its attributes. Ask about movies the user has seen with "
            "<interact>Would you prefer ID over ID? estimate: w1, ..., wd</interact>; the user "
            "answers Yes, Equal or No. State your current estimate of the weights in each question. "
            "Finish with <answer>TITLE</answer>: the unseen movie the user will like most.",
            "Seen movies:",
        ]
        for pos, idx in enumerate(self.seen, 1):
            lines.append(f"{pos}. {self._title(idx)} ({format_vector(self._attrs(idx))})")
        lines.append("Unseen movies:")
        for idx in self.candidates:
            lines.append(f"- {self._title(idx)} ({format_vector(self._attrs(idx))})")
        return "\n".join(lines)

    # ---- hooks -------------------------------------------------------------------------------
    def _info(self, valid: bool, **kw: Any) -> dict[str, Any]:
        # the shared keys plus ``query_type``, second as before
        return {"valid": valid, "query_type": None, **super()._info(valid, **kw)}

    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        body, est, error = self._split_query(query)
        if error is not None:
            return f"Invalid query {query!r}: {error}", self._info(False)
        usage = "expected a question 'Would you prefer ID over ID?' about two seen movies"
        pair = None
        if body:
            ids = parse_pair(body)
            if ids is None:
                return f"Invalid query {query!r}: {usage}.", self._info(False)
            a, b = ids[0] - 1, ids[1] - 1
            if not (0 <= a < len(self.seen) and 0 <= b < len(self.seen)) or a == b:
                return (
                    f"Invalid query {query!r}: compare two different seen movies (ids 1 to {len(self.seen)}).",
                    self._info(False),
                )
            pair = (a, b)
        elif est is None:
            return f"Invalid query {query!r}: {usage}.", self._info(False)
        if est is not None:
            self.estimate = est
        agent = self.estimate_source == "agent"
        if pair is None:
            return "Estimate recorded.", self._info(
                True,
                query_type="estimate",
                estimate_reported=True,
                estimate_updated=agent,
                action_is_effective=True,
            )
        a, b = pair
        ua = dot(self.preference, self._attrs(self.seen[a]))
        ub = dot(self.preference, self._attrs(self.seen[b]))
        reply, order, repeated, observed = ask_pair(self.asked, self.comparisons, a, b, ua, ub)
        preferred = None
        if order is None:
            text = f"Equal: the user likes '{self._title(self.seen[a])}' and '{self._title(self.seen[b])}' the same."
        else:
            w, l = order
            preferred = w + 1
            text = f"{reply}: the user prefers '{self._title(self.seen[w])}' over '{self._title(self.seen[l])}'."
        return text, self._info(
            True,
            query_type="compare",
            compared=(a + 1, b + 1),
            reply=reply,
            preferred=preferred,
            estimate_reported=est is not None,
            estimate_updated=(est is not None) if agent else observed,
            repeated_query=repeated,
            action_is_effective=not repeated or est is not None,
        )

    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        key = _norm_title(text)
        best_title = self._title(self.best)
        match = next((i for i in self.candidates if _norm_title(self._title(i)) == key), None)
        if match is None:
            seen = any(_norm_title(self._title(i)) == key for i in self.seen)
            why = "the user has already seen it" if seen else "it is not one of the unseen movies"
            return 0.0, {
                "valid": False,
                "recommended": None,
                "best": best_title,
                "success": False,
                "feedback": f"Invalid recommendation {text!r}: {why}. Reward 0.",
            }
        ok = match == self.best
        fb = "Correct: the user loves it." if ok else f"Wrong: the best choice was '{best_title}'."
        return float(ok), {
            "valid": True,
            "recommended": self._title(match),
            "best": best_title,
            "success": ok,
            "feedback": fb,
        }

    # ---- demonstrator ------------------------------------------------------------------------
    def _oracle_estimate(self) -> list[float] | None:
        return self.posterior().mean() if self.comparisons else None

    def _oracle_pick(self) -> int:
        est = self._oracle_estimate()
        if est is None:
            return self.candidates[0]
        return max(self.candidates, key=lambda i: dot(est, self._attrs(i)))

    def oracle_action(self) -> str:
        pair = self._oracle_pair()
        if self.turns_left <= 1 or pair is None:
            return self.ANSWER_PREFIX + self._title(self._oracle_pick())
        query = f"Would you prefer {pair[0] + 1} over {pair[1] + 1}?"
        est = self._oracle_estimate()
        if est is not None:
            query += f" estimate: {format_vector(est)}"
        return self.INTERACT_PREFIX + query

    def explain(self, action: str) -> str:
        kind, payload = self.split_action(action)
        r = len(self.comparisons)
        if kind == "answer":
            est = self._oracle_estimate()
            if est is None:
                return f"I have no answers yet, so I guess {payload}."
            return (
                f"{r} answers fit the weights ({format_vector(est)}); under them {payload} has the "
                "highest score among the unseen movies."
            )
        if kind == "interact":
            body, _ = split_estimate(payload)
            ids = parse_pair(body)
            if ids is None or not (1 <= ids[0] <= len(self.seen) and 1 <= ids[1] <= len(self.seen)):
                return f"I ask {payload}."
            a, b = ids[0] - 1, ids[1] - 1
            post = self.posterior()
            wins, total = post.split(a, b), len(post.particles)
            ta, tb = self._title(self.seen[a]), self._title(self.seen[b])
            return (
                f"After {r} answer{'s' if r != 1 else ''}, the weights that fit split {wins} to "
                f"{total - wins} on '{ta}' versus '{tb}', so this question is the most informative."
            )
        return super().explain(action)
