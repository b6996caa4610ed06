"""Active-reasoning chat environments (the T3 tasks) over the interactive game cores.

Each turn the model replies ``<think>reasoning</think>`` followed by either
``<interact>query</interact>`` (ask the environment) or ``<answer>final answer</answer>``
(end the episode). :class:`ActiveReasoningEnv` maps the reply to the game core's
``step("interact:" + query)`` / ``step("answer:" + answer)`` and shows the game's feedback
(``info["feedback"]``) at the top of the next user message. The first user message is the
full task description (``game.render_text()``); later ones are only
``"Feedback: ...\\nTurns left: N."`` because the conversation already holds the history.

Rules (on top of :class:`~ragen_torchrl.envs.text_env.TextGameEnv`'s TensorDict contract):

* rewards are terminal only: a query returns reward 0; the answer ends the episode
  (``terminated``) with the game's terminal reward (exact match, fraction of circuits, binary
  similarity, word F1 ...);
* a reply without a non-empty ``<interact>`` or ``<answer>`` block (after the ``<think>`` block
  when there is one; ``require_think=True`` also requires it) is *malformed*. With
  ``malformed="auto"`` (default, the T3 reference code) it ends the episode (``terminated``,
  reward 0, no success) while T3 truncation is active (T3 on, in training), and otherwise (no T3,
  and always in validation) the next user message is :data:`INVALID_REPLY` ("The previous action
  is invalid. ... Try again.") and the episode goes on with reward 0 for the turn;
  ``malformed="end"`` / ``"retry"`` force one of the two, ``malformed="penalty"`` gives
  ``format_penalty`` (−0.1) and goes on. A malformed reply that does not end the episode leaves
  the game state unchanged except that the turn is used (so a model cannot stall forever);
* ``max_turn`` (queries, answers and malformed replies together; paper defaults: GuessNumbers 10,
  CircuitDecoding 10, SituationPuzzles 15, PreferenceEstimation 10, MovieRecommendation 5) ends the
  episode as ``truncated`` with reward 0 for that turn when no answer was given. The user message
  before the last turn asks for the answer (:data:`LAST_TURN_PROMPT`), as the reference does when
  the budget runs out.

Besides the base keys (``progress`` = the game's ``progress()`` after the turn), every step
writes the per-turn information the T3 truncation transform
(:class:`~ragen_torchrl.transforms.t3.T3Truncation`) needs, as tensors of shape ``(B,)``:

=================================  ======  ===============================================
key                                dtype   meaning
=================================  ======  ===============================================
``progress_before``                float   ``progress()`` before this turn
``hypothesis_size``                float   ``|H_t|`` (GuessNumbers, CircuitDecoding), −1 elsewhere
``guess_in_previous_hypotheses``   bool    GuessNumbers: the guess was in ``H_{t-1}``; True elsewhere
``is_query``                       bool    this turn was a well-formed ``<interact>``
``is_answer``                      bool    this turn was a well-formed ``<answer>``
=================================  ======  ===============================================

and keeps the game's whole info dict of the last step of row ``i`` in ``env.last_infos[i]``
(e.g. ``judge_answer``, ``estimate``). ``action_is_valid`` is True when the tags parsed *and* the
game accepted the query/answer; ``action_is_effective`` is the game's (e.g. ``|H|`` shrank).

Levels: ``level_seed`` picks the instance; seeds in ``[2**30, 2**31)`` (the trainer's
validation seeds) draw from the game's ``"val"`` split, all others from ``"train"``, so
validation instances are never trained on (:func:`ragen_torchrl.envs.splits.level_split`).

The code is split by concept: the reply format in :mod:`.reply`, the environment over an
interactive game core in :mod:`.env` and the five tasks in :mod:`.tasks`.

Example:
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> env = GuessNumbersEnv(num_envs=1)
    >>> td = env.reset(TensorDict(level_seed=torch.tensor([0]), group_id=torch.tensor([0]), batch_size=[1]))
    >>> secret = env.games[0].secret
    >>> reply = History(role="assistant", content=f"<think>lucky</think><answer>{secret}</answer>", batch_size=(1,))
    >>> _ = td.set(("history", "full"), td["history", "prompt"].extend(reply.unsqueeze(0), inplace=False, dim=-1))
    >>> out = env.step(td)["next"]
    >>> out["reward"].item(), out["success"].item(), out["terminated"].item()
    (1.0, True, True)
"""

from .env import MALFORMED_MODES, ActiveReasoningEnv
from .reply import (
    ACTIVE_FORMAT_INSTRUCTIONS,
    INVALID_REPLY,
    INVALID_REPLY_END,
    LAST_TURN_PROMPT,
    ActiveReply,
    parse_active_reply,
)
from .tasks import (
    CircuitDecodingEnv,
    GuessNumbersEnv,
    MovieRecommendationEnv,
    PreferenceEstimationEnv,
    SituationPuzzlesEnv,
)

__all__ = [
    "ActiveReasoningEnv",
    "ActiveReply",
    "CircuitDecodingEnv",
    "GuessNumbersEnv",
    "MovieRecommendationEnv",
    "PreferenceEstimationEnv",
    "SituationPuzzlesEnv",
    "ACTIVE_FORMAT_INSTRUCTIONS",
    "INVALID_REPLY",
    "INVALID_REPLY_END",
    "LAST_TURN_PROMPT",
    "MALFORMED_MODES",
    "parse_active_reply",
]
