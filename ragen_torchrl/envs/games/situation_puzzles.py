"""SituationPuzzles (T3 active reasoning): lateral-thinking puzzles solved by yes/no questions.

**Task.** A puzzle tells a strange story; the hidden explanation makes sense of it. The agent asks
yes/no questions (``<interact>Was the man thirsty?</interact>``) and a *judge* who knows the
explanation answers only ``"Yes"``, ``"No"`` or ``"Unknown"``. The final answer is the agent's
explanation; reward = word-level F1 against the hidden explanation (:func:`word_f1`: lower-case,
punctuation stripped, bag of words). ``success`` = F1 ≥ ``success_threshold`` (0.5).
``max_turns`` = 15.

**Judges** (pluggable, :class:`Judge` protocol: ``judge(puzzle, question) -> "Yes"|"No"|"Unknown"``;
a plain callable with that signature works too):

* :class:`RuleBasedJudge` — for puzzles that carry their own fact list (all the shipped ones). A
  fact has keyword *groups* and a truth value; a group is one or more alternatives separated by
  ``|``. A question matches a fact when every group has an alternative that matches a word of the
  question (lower-cased, split on non-alphanumerics); a keyword ``k`` matches a word ``w`` when
  ``w == k``, ``w`` is ``k + "s"`` or ``k + "es"``, or ``k`` has at least 4 letters and ``w`` starts
  with ``k`` (``poison`` matches ``poisoned``). The matching fact with the most groups wins (ties:
  the first in the list) and its truth gives Yes/No; no match gives Unknown.
* :class:`HFJudge` — any Hugging Face causal LM (greedy decoding of ``max_new_tokens`` tokens after a
  prompt with the story, the explanation and the question); :func:`map_judge_output` maps the text
  to Yes/No/Unknown (first word ``yes`` / ``no`` / anything else -> Unknown).

**Progress.** ``progress()`` = the number of consecutive ``"Unknown"`` judge answers ending at the
latest turn (an invalid, empty question counts as Unknown; a Yes/No resets it to 0). T3 truncates
when it reaches k = 5. *Higher is worse.*

The shipped set :data:`PUZZLES` (25 puzzles, written here as Python data) runs offline; puzzles with
index % 5 == 4 form the ``"val"`` split (5), the others ``"train"`` (20).

Example:
    >>> game = SituationPuzzlesGame(PUZZLES[0])
    >>> game.interact("Did the man have hiccups?")[0]
    'Yes'
    >>> game.interact("Is the moon made of cheese?")[1]["consecutive_unknown"]
    1
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from ragen_torchrl.envs.games.interactive import InteractiveGame

__all__ = [
    "Fact",
    "HFJudge",
    "Judge",
    "PUZZLES",
    "Puzzle",
    "RuleBasedJudge",
    "SituationPuzzlesGame",
    "map_judge_output",
    "match_fact",
    "word_f1",
]

JUDGE_ANSWERS = ("Yes", "No", "Unknown")


@dataclass(frozen=True)
class Fact:
    """A checkable fact: keyword groups (``"a|b"`` = alternatives), truth value, and the
    demonstrator's question about it."""

    keywords: tuple[str, ...]
    truth: bool
    question: str


@dataclass(frozen=True)
class Puzzle:
    id: str
    story: str
    explanation: str
    facts: tuple[Fact, ...] = ()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", (text or "").lower())


def word_f1(prediction: str, reference: str) -> float:
    """Bag-of-words F1 after lower-casing and stripping punctuation (1.0 if both are empty)."""
    p, r = Counter(_words(prediction)), Counter(_words(reference))
    if not p and not r:
        return 1.0
    if not p or not r:
        return 0.0
    overlap = sum((p & r).values())
    if overlap == 0:
        return 0.0
    precision = overlap / sum(p.values())
    recall = overlap / sum(r.values())
    return 2 * precision * recall / (precision + recall)


def _keyword_matches(keyword: str, word: str) -> bool:
    return (
        word == keyword
        or word == keyword + "s"
        or word == keyword + "es"
        or (len(keyword) >= 4 and word.startswith(keyword))
    )


def _fact_matches(fact: Fact, words: Sequence[str]) -> bool:
    for group in fact.keywords:
        alts = [a.strip().lower() for a in group.split("|") if a.strip()]
        if not any(_keyword_matches(a, w) for a in alts for w in words):
            return False
    return bool(fact.keywords)


def match_fact(puzzle: Puzzle, question: str) -> Fact | None:
    """The fact a question is about (most keyword groups wins, ties: first), or ``None``."""
    words = _words(question)
    best, best_n = None, 0
    for fact in puzzle.facts:
        if len(fact.keywords) > best_n and _fact_matches(fact, words):
            best, best_n = fact, len(fact.keywords)
    return best


@runtime_checkable
class Judge(Protocol):
    """Answers a yes/no question about a puzzle with ``"Yes"``, ``"No"`` or ``"Unknown"``."""

    def judge(self, puzzle: Puzzle, question: str) -> str: ...


class RuleBasedJudge:
    """Keyword matching over the puzzle's own fact list (see the module docstring)."""

    def judge(self, puzzle: Puzzle, question: str) -> str:
        fact = match_fact(puzzle, question)
        if fact is None:
            return "Unknown"
        return "Yes" if fact.truth else "No"

    __call__ = judge


def map_judge_output(text: str) -> str:
    """Map generated text to ``"Yes"``/``"No"``/``"Unknown"``: the first word decides
    (``yes`` -> Yes, ``no`` -> No); anything else (including empty text) -> Unknown."""
    words = _words(text if isinstance(text, str) else "")
    if not words:
        return "Unknown"
    if words[0] == "yes":
        return "Yes"
    if words[0] == "no":
        return "No"
    return "Unknown"


JUDGE_PROMPT = (
    "You are the judge of a situation puzzle (a lateral-thinking puzzle).\n"
    "Puzzle: {story}\n"
    "Hidden explanation: {explanation}\n"
    "The player asks: {question}\n"
    "Reply with exactly one word: Yes, No, or Unknown (Unknown when the explanation does not "
    "decide the question).\n"
    "Answer:"
)


class HFJudge:
    """A judge backed by any Hugging Face causal LM and its tokenizer (greedy decoding).

    The prompt (:data:`JUDGE_PROMPT`) goes through the tokenizer's chat template when it has one.
    The generated text is mapped by :func:`map_judge_output`. The player's question is cut to
    ``max_question_chars`` characters (default 500): a model can write thousands of tokens, which
    would overflow the judge's context (an index error, or a device-side assert on a GPU, which
    no ``except`` survives); a yes/no question never needs more.

    Example:
        >>> class Tok:
        ...     chat_template = None
        >>> judge = HFJudge(model=None, tokenizer=Tok(), max_question_chars=9)
        >>> prompt = judge.build_prompt(PUZZLES[0], "Was he thirsty?" * 1000)
        >>> "asks: Was he th" in prompt, "asks: Was he thi" in prompt
        (True, False)
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 4,
        prompt: str = JUDGE_PROMPT,
        max_question_chars: int = 500,
    ):
        if isinstance(max_question_chars, bool) or not isinstance(max_question_chars, int) or max_question_chars < 1:
            raise ValueError(f"max_question_chars must be a positive integer, got {max_question_chars!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = int(max_new_tokens)
        self.prompt = prompt
        self.max_question_chars = max_question_chars
        self.last_output = ""

    def build_prompt(self, puzzle: Puzzle, question: str) -> str:
        text = self.prompt.format(
            story=puzzle.story, explanation=puzzle.explanation, question=question[: self.max_question_chars]
        )
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return text

    def generate_text(self, prompt: str) -> str:
        enc = self.tokenizer(prompt, return_tensors="pt")
        device = getattr(self.model, "device", None)
        if device is not None and hasattr(enc, "to"):
            enc = enc.to(device)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None)
        out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=pad)
        new_tokens = out[0][enc["input_ids"].shape[1] :]
        return self.tokenizer.decode(new_tokens, skip_special_tokens=True)

    def judge(self, puzzle: Puzzle, question: str) -> str:
        self.last_output = self.generate_text(self.build_prompt(puzzle, question))
        return map_judge_output(self.last_output)

    __call__ = judge


def _F(keywords: str, truth: bool, question: str) -> Fact:
    return Fact(tuple(k.strip() for k in keywords.split(",")), truth, question)


#: the shipped puzzles (original wordings of classic lateral-thinking puzzles)
PUZZLES: tuple[Puzzle, ...] = (
    Puzzle(
        "hiccups",
        "A man walks into a bar and asks the bartender for a glass of water. The bartender pulls "
        "out a gun and points it at him. The man says thank you and walks out happy.",
        "The man had hiccups. The bartender scared him with the gun, which cured his hiccups, so "
        "he no longer needed the water.",
        (
            _F("hiccup", True, "Did the man have hiccups?"),
            _F("thirst", False, "Was the man thirsty?"),
            _F("scare|frighten|fright|shock", True, "Did the bartender try to scare him?"),
            _F("shoot|shot|fire", False, "Did the bartender shoot at him?"),
            _F("rob|robbery|threat", False, "Was the bartender threatening to rob him?"),
            _F("cure|fix|stop", True, "Did the gun cure his problem?"),
        ),
    ),
    Puzzle(
        "elevator",
        "A man lives on the tenth floor of a building. Every morning he takes the elevator down to "
        "the ground floor. Every evening he takes the elevator only to the seventh floor and walks "
        "up the stairs the rest of the way, except on rainy days.",
        "The man is very short and can only reach the button for the seventh floor. On rainy days "
        "he carries an umbrella and uses it to press the button for the tenth floor.",
        (
            _F("short|small|little", True, "Is the man very short?"),
            _F("tall", False, "Is the man tall?"),
            _F("reach, button", True, "Can he only reach the button for the seventh floor?"),
            _F("umbrella", True, "Does he use his umbrella on rainy days?"),
            _F("exercise|fitness|healthy|health", False, "Does he walk up for exercise?"),
            _F("broken|broke|fault", False, "Is the elevator broken?"),
        ),
    ),
    Puzzle(
        "monopoly",
        "A man pushes his car up to a hotel and immediately tells the owner that he is bankrupt.",
        "He is playing the board game Monopoly. His car token landed on a property with a hotel "
        "that he could not afford, so he went bankrupt.",
        (
            _F("game|monopoly", True, "Is he playing a game?"),
            _F("real", False, "Is it a real car?"),
            _F("token|piece", True, "Is the car a token?"),
            _F("breakdown|engine|petrol|fuel|gas", False, "Did his car run out of fuel?"),
            _F("afford|money|rent|pay", True, "Did he have to pay money he did not have?"),
        ),
    ),
    Puzzle(
        "goldfish",
        "Romeo and Juliet lie dead on the floor of a room. Around them are pieces of broken glass "
        "and a puddle of water. The window is open and nobody else is in the house.",
        "Romeo and Juliet are goldfish. The wind blew through the open window and knocked their "
        "bowl off the table. The bowl broke and they died without water.",
        (
            _F("fish|goldfish", True, "Are Romeo and Juliet fish?"),
            _F("human|people|person", False, "Are Romeo and Juliet people?"),
            _F("murder|kill", False, "Were they murdered?"),
            _F("wind|breeze|gust", True, "Did the wind knock something over?"),
            _F("bowl|tank|aquarium", True, "Did they live in a bowl?"),
            _F("poison", False, "Were they poisoned?"),
        ),
    ),
    Puzzle(
        "parachute",
        "A man lies dead in the middle of an open field. Next to him is an unopened package. "
        "There are no footprints around him and nobody else is nearby.",
        "The man jumped out of a plane, but his parachute did not open. The unopened package is the parachute.",
        (
            _F("parachute", True, "Is the package a parachute?"),
            _F("plane|aircraft|airplane|helicopter", True, "Did he come from a plane?"),
            _F("murder|kill", False, "Was he murdered?"),
            _F("fall|fell|jump", True, "Did he fall from the sky?"),
            _F("walk", False, "Did he walk into the field?"),
            _F("parcel|mail|deliver|post", False, "Was the package delivered by mail?"),
        ),
    ),
    Puzzle(
        "photographer",
        "A woman shoots her husband. Then she holds him under water for five minutes. Finally, she "
        "hangs him. Later that evening they go out together and enjoy a lovely dinner.",
        "The woman is a photographer. She took a photo of her husband, developed the picture in "
        "water and hung it up to dry.",
        (
            _F("photo|picture|camera", True, "Did she take a photo of him?"),
            _F("gun|weapon|pistol|rifle", False, "Did she use a gun?"),
            _F("hurt|harm|injur|die|died|dead", False, "Was the husband hurt?"),
            _F("develop", True, "Did she develop something in the water?"),
            _F("dry|drying", True, "Did she hang something up to dry?"),
        ),
    ),
    Puzzle(
        "surgeon",
        "A father and his son are in a car accident. The father dies at the scene and the son is "
        "rushed to hospital. The surgeon looks at the boy and says: I cannot operate on him, he is "
        "my son.",
        "The surgeon is the boy's mother.",
        (
            _F("mother|mom|mum", True, "Is the surgeon the boy's mother?"),
            _F("woman|female|lady", True, "Is the surgeon a woman?"),
            _F("step|adopt|adopted", False, "Is the surgeon his stepfather?"),
            _F("father|dad, alive|survive|live", False, "Did the father survive?"),
            _F("ghost|spirit", False, "Is the surgeon a ghost?"),
        ),
    ),
    Puzzle(
        "blind_reader",
        "A man sits in a pitch-dark room with no lamp, no candle and no window, and reads a thick "
        "book from cover to cover.",
        "The man is blind and reads the book in Braille with his fingers.",
        (
            _F("blind", True, "Is the man blind?"),
            _F("braille|finger|touch", True, "Does he read with his fingers?"),
            _F("light|lamp|candle|torch|flashlight|glow", False, "Does he use any light?"),
            _F("memor", False, "Did he memorize the book?"),
            _F("night|vision", False, "Does he have night vision?"),
        ),
    ),
    Puzzle(
        "triplets",
        "Two boys are born to the same mother on the same day, at the same hour, in the same year, "
        "yet they are not twins.",
        "They are two of a set of triplets; a third baby was born at the same time.",
        (
            _F("triplet|quadruplet", True, "Are they triplets?"),
            _F("twin", False, "Are they twins?"),
            _F("adopt", False, "Was one of them adopted?"),
            _F("brother|sibling", True, "Are they brothers?"),
            _F("third|another|more, baby|child|children|sibling", True, "Was a third baby born at the same time?"),
        ),
    ),
    Puzzle(
        "balloon",
        "A man is found dead in the desert holding half of a matchstick. There are no tracks around him.",
        "He was travelling in a hot air balloon that was losing height. The passengers drew "
        "matchsticks to choose who would jump out to lighten it, and he drew the short half.",
        (
            _F("balloon", True, "Was he in a hot air balloon?"),
            _F("thirst|dehydrat|heat", False, "Did he die of thirst?"),
            _F("draw|drew|lots|chose|choose|lottery", True, "Did people draw lots?"),
            _F("jump|fell|fall", True, "Did he fall from above?"),
            _F("alone", False, "Was he alone before he died?"),
            _F("fire|smoke|cigar", False, "Did he light a fire?"),
        ),
    ),
    Puzzle(
        "iced_tea",
        "Two women drink the same poisoned iced tea at a party. One drinks five glasses very "
        "quickly and is fine. The other slowly sips one glass and dies.",
        "The poison was in the ice cubes. The woman who drank quickly finished before the ice "
        "melted, so the poison never got into her drink.",
        (
            _F("ice|cube", True, "Was the poison in the ice?"),
            _F("antidote|immune|immunity", False, "Was she immune to the poison?"),
            _F("melt", True, "Did something melt?"),
            _F("fast|quick|speed", True, "Does it matter how quickly she drank?"),
            _F("tea, poison", False, "Was the tea itself poisoned?"),
        ),
    ),
    Puzzle(
        "ball",
        "A man throws a ball as hard as he can. It stops, changes direction and comes straight "
        "back to his hand. Nothing touches it and it is not tied to anything.",
        "He threw the ball straight up into the air, and gravity brought it back down to him.",
        (
            _F("upward|upwards|vertical|straight", True, "Did he throw it straight upward?"),
            _F("wall", False, "Did it hit a wall?"),
            _F("string|rope|elastic", False, "Was it on a string?"),
            _F("bounce", False, "Did the ball bounce?"),
            _F("gravity", True, "Did gravity bring it back?"),
            _F("boomerang", False, "Was it a boomerang?"),
        ),
    ),
    Puzzle(
        "friday",
        "A cowboy rides into town on Friday. He stays for three days and then rides out of town on Friday.",
        "The cowboy's horse is named Friday.",
        (
            _F("horse", True, "Is Friday the name of his horse?"),
            _F("name|named|called", True, "Is Friday a name?"),
            _F("week|weeks", False, "Did he stay for a whole week?"),
            _F("zone|timezone|calendar", False, "Did he cross a time zone?"),
            _F("lie|lying|lied", False, "Is the cowboy lying?"),
        ),
    ),
    Puzzle(
        "snowman",
        "In the middle of a garden lawn lie five pieces of coal, a carrot and a scarf. Nobody put "
        "them there that morning.",
        "Children built a snowman on the lawn. When the snow melted, only the coal, the carrot and "
        "the scarf were left.",
        (
            _F("snowman|snow", True, "Was there a snowman?"),
            _F("melt", True, "Did something melt?"),
            _F("child|children|kid", True, "Did children put them there?"),
            _F("murder|kill|crime|theft|steal", False, "Was there a crime?"),
            _F("food|eat|eating|lunch|picnic", False, "Was someone eating there?"),
        ),
    ),
    Puzzle(
        "baseball",
        "A man leaves home, turns left three times and returns home, where a man in a mask is waiting for him.",
        "He is a baseball player running around the bases back to home plate, and the man in the mask is the catcher.",
        (
            _F("baseball|game|sport", True, "Is it a game of baseball?"),
            _F("catcher", True, "Is the masked man the catcher?"),
            _F("criminal|robber|thief|burglar", False, "Is the masked man a thief?"),
            _F("house", False, "Is home his house?"),
            _F("run|running|ran", True, "Is he running?"),
        ),
    ),
    Puzzle(
        "truck",
        "A truck gets stuck under a low bridge. Engineers argue for hours about cutting the bridge "
        "or the truck. A little boy walks by and solves the problem in one minute without any "
        "tools.",
        "The boy told them to let some air out of the truck's tires, which lowered the truck "
        "enough to drive it out from under the bridge.",
        (
            _F("tire|tyre|wheel", True, "Did it involve the tires?"),
            _F("air", True, "Did they let air out?"),
            _F("cut|damage|break", False, "Did they cut anything?"),
            _F("crane|tow|push", False, "Did they tow the truck?"),
            _F("lower", True, "Was the truck made lower?"),
        ),
    ),
    Puzzle(
        "window_cleaner",
        "A man jumps out of a window of a twenty-storey building. He lands on the ground without any injury.",
        "He was cleaning the windows from the inside and jumped out of a ground floor window.",
        (
            _F("ground|first|bottom", True, "Did he jump from the ground floor?"),
            _F("net|mattress|cushion|parachute", False, "Did he land on a net?"),
            _F("top|height|high", False, "Did he jump from a great height?"),
            _F("clean", True, "Was he cleaning the windows?"),
            _F("luck", False, "Was it just luck?"),
        ),
    ),
    Puzzle(
        "bald",
        "A man walks home in heavy rain for an hour without an umbrella or a hat. His clothes get "
        "soaked but not a single hair on his head gets wet.",
        "The man is bald, so he has no hair to get wet.",
        (
            _F("bald", True, "Is the man bald?"),
            _F("hair", False, "Does he have any hair?"),
            _F("cover|hood|umbrella", False, "Was his head covered?"),
            _F("wig", False, "Does he wear a wig?"),
            _F("rain", True, "Was it really raining?"),
        ),
    ),
    Puzzle(
        "survivors",
        "A plane crashes exactly on the border between two countries. The officials of both "
        "countries argue about where the survivors should be buried.",
        "Survivors are alive, so they are not buried at all.",
        (
            _F("alive|living", True, "Are the survivors alive?"),
            _F("bury|buried|burial", False, "Should the survivors be buried?"),
            _F("border", True, "Did the plane crash on the border?"),
            _F("dead|die|died", False, "Did the survivors die?"),
            _F("law|rule", False, "Does a special law decide it?"),
        ),
    ),
    Puzzle(
        "coffee",
        "A man finds a fly in his coffee and sends it back. The waiter returns with a cup of "
        "coffee. The man takes one sip and angrily says that it is the same coffee.",
        "He had already put sugar in the coffee before he found the fly. The new cup was sweet, so "
        "he knew the waiter had only removed the fly.",
        (
            _F("sugar|sweet", True, "Had he already put sugar in it?"),
            _F("same", True, "Was it really the same coffee?"),
            _F("temperature|hot|cold|warm", False, "Could he tell by the temperature?"),
            _F("taste", True, "Could he tell by the taste?"),
            _F("cup|mug, mark|lipstick|chip", False, "Was there a mark on the cup?"),
        ),
    ),
    Puzzle(
        "portrait",
        "A man stands in front of a portrait and says: brothers and sisters I have none, but that "
        "man's father is my father's son.",
        "The man in the portrait is the speaker's son.",
        (
            _F("son", True, "Is the man in the portrait his son?"),
            _F("himself|self|own", False, "Is it a portrait of himself?"),
            _F("father|dad", False, "Is the portrait of his father?"),
            _F("brother|sister|sibling", False, "Does he have a brother?"),
            _F("uncle|nephew|cousin", False, "Is it his nephew?"),
        ),
    ),
    Puzzle(
        "daytime",
        "A man is driving a black car with no lights on along a black road in a village with no "
        "street lamps. A woman dressed all in black crosses the road in front of him. He stops in "
        "time to let her pass.",
        "It was daytime, so he could see her clearly.",
        (
            _F("day|daytime|daylight|sun", True, "Was it during the day?"),
            _F("night|dark", False, "Was it night?"),
            _F("moon", False, "Was there moonlight?"),
            _F("reflect", False, "Was she wearing something reflective?"),
            _F("slow", False, "Was he driving very slowly?"),
        ),
    ),
    Puzzle(
        "barber",
        "A man shaves many times a day, yet he still has a long beard.",
        "He is a barber who shaves other people all day, not himself.",
        (
            _F("barber", True, "Is he a barber?"),
            _F("other|customer|client|people", True, "Does he shave other people?"),
            _F("himself|own", False, "Does he shave himself?"),
            _F("razor|blade", False, "Is his razor broken?"),
            _F("fake|false", False, "Is the beard fake?"),
        ),
    ),
    Puzzle(
        "fishing",
        "Two mothers and two daughters go fishing. Each of them catches exactly one fish, yet they "
        "bring home only three fish and none were lost.",
        "There were only three people: a grandmother, her daughter and her granddaughter.",
        (
            _F("three|3, people|person|women", True, "Were there only three people?"),
            _F("grandmother|grandma|granny", True, "Was a grandmother there?"),
            _F("release|escape|lost|eat|ate", False, "Did they release a fish?"),
            _F("four|4", False, "Were there four people?"),
            _F("granddaughter", True, "Was there a granddaughter?"),
        ),
    ),
    Puzzle(
        "polar_bear",
        "A woman builds a house in which every window faces south. A bear walks past the house. "
        "What colour is the bear?",
        "The house is at the North Pole, so every window faces south and the bear is a white polar bear.",
        (
            _F("north|pole|arctic", True, "Is the house at the North Pole?"),
            _F("south, pole|antarctic", False, "Is the house at the South Pole?"),
            _F("polar|white", True, "Is it a polar bear?"),
            _F("brown|black|grizzly", False, "Is the bear brown?"),
            _F("zoo|circus", False, "Is the bear in a zoo?"),
        ),
    ),
)


def _as_judge(judge: Any) -> Callable[[Puzzle, str], str]:
    if judge is None:
        return RuleBasedJudge().judge
    if hasattr(judge, "judge"):
        return judge.judge
    if callable(judge):
        return judge
    raise TypeError("judge must have a judge(puzzle, question) method or be callable")


class SituationPuzzlesGame(InteractiveGame):
    """Ask yes/no questions, then explain the story (see the module docstring).

    Info keys of an interaction: ``judge_answer`` (``"Yes"``/``"No"``/``"Unknown"``, ``None`` for an
    invalid query), ``consecutive_unknown`` (= ``progress()``), ``unknown_count`` (total),
    ``repeated_query``. ``action_is_effective``: a new question answered Yes or No.
    Answer info: ``valid`` (non-empty), ``f1``, ``success`` (F1 ≥ ``success_threshold``), ``reward``.
    """

    max_turns = 15
    task_name = "SituationPuzzles"

    def __init__(
        self,
        puzzle: Puzzle,
        judge: Judge | Callable[[Puzzle, str], str] | None = None,
        success_threshold: float = 0.5,
        max_turns: int | None = None,
    ) -> None:
        super().__init__(max_turns)
        self.puzzle = puzzle
        self.judge = judge if judge is not None else RuleBasedJudge()
        self._judge_fn = _as_judge(self.judge)
        self.success_threshold = float(success_threshold)
        self.consecutive_unknown = 0
        self.unknown_count = 0
        self.questions: list[tuple[str, str]] = []  # (question, judge answer)

    @classmethod
    def generate(
        cls,
        seed: int,
        split: str = "train",
        puzzles: Sequence[Puzzle] = PUZZLES,
        **kwargs: Any,
    ) -> "SituationPuzzlesGame":
        """A puzzle of the split (index % 5 == 4 -> ``"val"``) chosen by ``seed``."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        pool = [p for i, p in enumerate(puzzles) if (i % 5 == 4) == (split == "val")]
        if not pool:
            raise ValueError(f"no puzzles in split {split!r}")
        rng = random.Random(f"SituationPuzzles/{split}/{int(seed)}")
        return cls(pool[rng.randrange(len(pool))], **kwargs)

    def progress(self) -> float:
        return float(self.consecutive_unknown)

    def _describe(self) -> str:
        return (
            "Solve the situation puzzle. Ask yes/no questions with <interact>QUESTION</interact>; "
            "the judge answers only Yes, No or Unknown. When you know what happened, give the full "
            "explanation in <answer>EXPLANATION</answer>.\n"
            f"Puzzle: {self.puzzle.story}"
        )

    def _interact(self, query: str) -> tuple[str, dict[str, Any]]:
        if not _words(query):
            self.consecutive_unknown += 1
            self.unknown_count += 1
            return "Invalid query: ask a yes/no question.", {
                "valid": False,
                "judge_answer": None,
                "consecutive_unknown": self.consecutive_unknown,
                "unknown_count": self.unknown_count,
                "repeated_query": False,
                "action_is_effective": False,
            }
        key = " ".join(_words(query))
        repeated = any(" ".join(_words(q)) == key for q, _ in self.questions)
        raw = self._judge_fn(self.puzzle, query)
        verdict = raw if raw in JUDGE_ANSWERS else map_judge_output(str(raw))
        self.questions.append((query, verdict))
        if verdict == "Unknown":
            self.consecutive_unknown += 1
            self.unknown_count += 1
        else:
            self.consecutive_unknown = 0
        return verdict, {
            "valid": True,
            "judge_answer": verdict,
            "consecutive_unknown": self.consecutive_unknown,
            "unknown_count": self.unknown_count,
            "repeated_query": repeated,
            "action_is_effective": verdict != "Unknown" and not repeated,
        }

    def _answer(self, text: str) -> tuple[float, dict[str, Any]]:
        valid = bool(_words(text))
        f1 = word_f1(text, self.puzzle.explanation) if valid else 0.0
        ok = f1 >= self.success_threshold
        fb = f"Word F1 {f1:.2f}. The explanation: {self.puzzle.explanation}"
        return f1, {"valid": valid, "f1": f1, "success": ok, "feedback": fb}

    # ---- demonstrator ------------------------------------------------------------------------
    def _next_fact(self) -> Fact | None:
        asked = {" ".join(_words(q)) for q, _ in self.questions}
        for fact in self.puzzle.facts:
            if " ".join(_words(fact.question)) not in asked:
                return fact
        return None

    def oracle_action(self) -> str:
        fact = self._next_fact()
        if fact is None or self.turns_left <= 1:
            return self.ANSWER_PREFIX + self.puzzle.explanation
        return self.INTERACT_PREFIX + fact.question

    def explain(self, action: str) -> str:
        kind, payload = self.split_action(action)
        yes = [q for q, a in self.questions if a == "Yes"]
        no = [q for q, a in self.questions if a == "No"]
        if kind == "answer":
            return (
                f"{len(yes)} questions got Yes and {len(no)} got No; together they explain the "
                "story, so I give the explanation."
            )
        if kind == "interact":
            if not self.questions:
                return "Nothing is known yet, so I test the most likely explanation first."
            return (
                f"So far {len(yes)} Yes and {len(no)} No answers. The story is not explained yet, "
                f"so I check another detail: {payload}"
            )
        return super().explain(action)
