"""Behaviour tests of the reply parser ``<think>…</think><answer>a1 || a2</answer>``."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragen_torchrl.envs.parsing import (
    MAX_REPLY_CHARS,
    REPLY_FORMATS,
    ParsedResponse,
    parse_response,
    select_actions,
)

NAMES = ("Left", "Down", "Right", "Up")


def reply(answer: str, think: str = "plan") -> str:
    return f"<think>{think}</think><answer>{answer}</answer>"


# --------------------------------------------------------------------------- valid replies
def test_valid_reply_two_actions():
    r = parse_response(reply("Right || Up", think="go right"), NAMES, max_actions=2)
    assert r.actions == ["Right", "Up"]
    assert r.format_ok and r.is_valid
    assert r.think == "go right" and r.answer == "Right || Up"
    assert r.num_invalid == 0


def test_single_action_and_whitespace_around_tags_content():
    r = parse_response("<think>\n  reason \n</think>\n<answer>\n Down \n</answer>\n", NAMES)
    # think and answer are stripped; the action name is stripped before lookup
    assert r.think == "reason" and r.answer == "Down"
    assert r.actions == ["Down"] and r.is_valid


@pytest.mark.parametrize("answer", ["right || UP", "RIGHT||up", "rIgHt ||  uP", "  Right||Up  "])
def test_names_are_case_insensitive_and_spaces_ignored(answer):
    # canonical spelling is returned whatever the case / spacing around ||
    assert parse_response(reply(answer), NAMES).actions == ["Right", "Up"]


def test_more_actions_than_max_are_truncated():
    r = parse_response(reply("Left || Down || Right || Up"), NAMES, max_actions=2)
    # keep the first two valid actions; the dropped ones are valid, not counted invalid
    assert r.actions == ["Left", "Down"] and r.num_invalid == 0 and r.is_valid
    assert parse_response(reply("Left || Down || Right"), NAMES, max_actions=1).actions == ["Left"]
    assert parse_response(reply("Left || Down || Right"), NAMES, max_actions=5).actions == ["Left", "Down", "Right"]


def test_repeated_actions_are_kept():
    assert parse_response(reply("Up || Up"), NAMES).actions == ["Up", "Up"]


def test_unknown_names_counted_invalid_but_valid_ones_kept():
    # reference code: truncate to max_actions_per_turn tokens, then keep the valid ones;
    # tokens [Fly, Up] are read -> Up kept, 1 invalid; Jump (third) is never read
    r = parse_response(reply("Fly || Up || Jump"), NAMES, max_actions=2)
    assert r.actions == ["Up"] and r.num_invalid == 1 and r.is_valid and r.penalised


def test_invalid_token_takes_a_slot_and_later_ones_are_not_pulled_in():
    # REFERENCE §4: "takes the first max_actions_per_turn action tokens, executes the valid
    # ones in order, and adds the -0.1 format penalty when any of them is invalid"
    r = parse_response(reply("Fly || Up || Left"), NAMES, max_actions=2)
    assert r.actions == ["Up"] and r.num_invalid == 1 and r.penalised
    r = parse_response(reply("Fly || Left || Down || Up"), NAMES, max_actions=2)
    assert r.actions == ["Left"] and r.num_invalid == 1 and r.penalised
    # an invalid token after the read window is not looked at: no penalty
    r = parse_response(reply("Left || Down || Fly"), NAMES, max_actions=2)
    assert r.actions == ["Left", "Down"] and r.num_invalid == 0 and not r.penalised
    # empty pieces are dropped before the window is taken (reference: `if action.strip()`)
    r = parse_response(reply("Up ||  || Left ||"), NAMES, max_actions=2)
    assert r.actions == ["Up", "Left"] and r.num_invalid == 0 and not r.penalised


@pytest.mark.parametrize(
    "answer, max_actions, actions, invalid",
    [
        ("Up", 2, ["Up"], 0),
        ("Fly", 2, [], 1),
        ("Up || Fly", 1, ["Up"], 0),
        ("Fly || Up", 1, [], 1),
        ("Fly || Up || Down || Jump", 3, ["Up", "Down"], 1),
        ("Jump || Fly || Up", 2, [], 2),
    ],
)
def test_select_actions_window(answer, max_actions, actions, invalid):
    # reference code: actions[:max_actions_per_turn], then the valid ones in order
    assert select_actions(answer, NAMES, max_actions) == (actions, invalid)
    r = parse_response(reply(answer), NAMES, max_actions=max_actions)
    assert r.penalised == (invalid > 0 or not actions)


@pytest.mark.parametrize("answer", ["Fly", "Fly || Jump", "Left Right", "go left", "Left,Down", "0", ""])
def test_reply_with_only_unknown_names_is_invalid(answer):
    r = parse_response(reply(answer), NAMES)
    # the format is fine (tags present) but no action parsed -> not a valid turn
    assert r.format_ok and not r.is_valid and r.actions == [] and r.penalised
    # at most max_actions (2) non-empty tokens are read; "" has none
    assert r.num_invalid == min(2, len([p for p in answer.split("||") if p.strip()]))


def test_custom_separator():
    r = parse_response(reply("Left, Down"), NAMES, separator=",")
    assert r.actions == ["Left", "Down"]


# --------------------------------------------------------------------------- format errors
def test_missing_answer_tag_is_format_error():
    r = parse_response("<think>I go right</think>Right", NAMES)
    assert not r.format_ok and not r.is_valid and r.actions == []
    assert r.think == "I go right"  # the reasoning is still reported


def test_unclosed_answer_is_format_error():
    assert not parse_response("<think>x</think><answer>Right", NAMES).is_valid


def test_missing_think_is_format_error_unless_not_required():
    r = parse_response("<answer>Right</answer>", NAMES)
    assert not r.format_ok and not r.is_valid and r.think == ""
    r = parse_response("<answer>Right</answer>", NAMES, require_think=False)
    assert r.format_ok and r.actions == ["Right"]


def test_missing_opening_think_is_accepted_when_primed():
    # generation primed with "<think>": the reply starts inside the think block
    r = parse_response(" I should go down </think><answer>Down</answer>", NAMES)
    assert r.is_valid and r.actions == ["Down"] and r.think == "I should go down"


def test_answer_before_think_is_not_accepted():
    # the answer must follow the think block
    r = parse_response("<answer>Up</answer><think>x</think>", NAMES)
    assert not r.format_ok and r.actions == []


@pytest.mark.parametrize("text", ["", " ", "\n\n", "Right", "Right || Up", "</answer>", "<think></think>"])
def test_untagged_or_empty_replies_are_invalid(text):
    r = parse_response(text, NAMES)
    assert not r.format_ok and not r.is_valid and r.actions == [] and r.num_invalid == 0


def test_empty_string_gives_defaults():
    assert parse_response("", NAMES) == ParsedResponse()


# --------------------------------------------------------------------------- nested / duplicated tags
def test_nested_think_tags():
    # the first </think> closes the (outer) think; the answer after it is used; the strict
    # (reference) format removes the tags from the think text, the lenient one keeps them
    text = "<think>a<think>b</think><answer>Up</answer>"
    r = parse_response(text, NAMES)
    assert r.think == "ab" and r.actions == ["Up"]
    r = parse_response(text, NAMES, reply_format="lenient")
    assert r.think == "a<think>b" and r.actions == ["Up"]


def test_duplicated_answer_uses_the_first():
    for fmt in REPLY_FORMATS:
        r = parse_response("<think>x</think><answer>Up</answer><answer>Down</answer>", NAMES, reply_format=fmt)
        assert r.actions == ["Up"] and r.answer == "Up"


def test_answer_inside_think_is_ignored():
    # an <answer> inside the reasoning is not the answer: only one after </think> counts
    for fmt in REPLY_FORMATS:
        text = "<think>maybe <answer>Left</answer></think><answer>Right</answer>"
        assert parse_response(text, NAMES, reply_format=fmt).actions == ["Right"]
        r = parse_response("<think>maybe <answer>Left</answer></think>no answer", NAMES, reply_format=fmt)
        assert not r.is_valid


def test_nested_answer_tags():
    # the lazy match stops at the first </answer>: the answer text is "<answer>Up"; the reference
    # removes its special tokens from it (-> "Up", valid); the lenient format keeps the tag
    text = "<think>x</think><answer><answer>Up</answer></answer>"
    r = parse_response(text, NAMES)
    assert r.answer == "Up" and r.actions == ["Up"] and not r.penalised
    r = parse_response(text, NAMES, reply_format="lenient")
    assert r.answer == "<answer>Up" and r.actions == [] and r.num_invalid == 1


def test_duplicated_think_blocks():
    # reference: the lazy think group runs on to the </think> that is followed by <answer>
    text = "<think>a</think><think>b</think><answer>Left</answer>"
    r = parse_response(text, NAMES)
    assert r.think == "ab" and r.actions == ["Left"]
    r = parse_response(text, NAMES, reply_format="lenient")
    assert r.think == "a" and r.actions == ["Left"]


# --------------------------------------------------------------------------- strict (reference) vs lenient
def reference_parse(text: str) -> tuple[str, str] | None:
    """The RAGEN reference's parse (``ctx_manager._parse_response``, think enabled) of ``text``, the
    primed generation ``"<think>" + generated``: ``(think, answer)`` after its special-token removal,
    or ``None`` (no actions, the format penalty)."""
    m = re.search(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", text, re.DOTALL)
    if m is None:
        return None
    think, answer = m.group(1), m.group(2)
    for token in ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>"):
        answer = answer.replace(token, "").strip()
        think = think.replace(token, "").strip()
    return think, answer


# (reply, strict actions, lenient actions); [] = invalid (no action, the format penalty). The strict
# column is the reference's verdict on the primed text ("<think>" + reply unless it starts with it).
BOUNDARY_CASES = [
    ("<think>go</think> I will go left. <answer>Left</answer>", [], ["Left"]),  # text between the blocks
    ("<think>go</think>I<answer>Left</answer>", [], ["Left"]),
    ("<think>go</think><answer>Left</answer>", ["Left"], ["Left"]),
    ("<think>go</think>  \n\t <answer>Left</answer>", ["Left"], ["Left"]),  # whitespace only: valid
    ("<think>go</think>\u00a0\u2003<answer>Left</answer>", ["Left"], ["Left"]),  # Unicode spaces are \s
    ("Sure. <think>go</think><answer>Left</answer>", ["Left"], ["Left"]),  # text before <think>
    ("<think>go</think><answer>Left</answer> Done, I moved left.", ["Left"], ["Left"]),  # after </answer>
    ("<answer>Left</answer>", [], []),  # missing think
    ("I will go left. <answer>Left</answer>", [], []),
    ("go</think><answer>Left</answer>", ["Left"], ["Left"]),  # primed: the opening tag is implied
    ("<think>go</think><answer>Left", [], []),  # unclosed answer
    ("<think>go<answer>Left</answer>", [], []),  # unclosed think
    ("<think>a</think> b <think>c</think><answer>Left</answer>", ["Left"], ["Left"]),
    # the reference's lazy think group runs on to the first </think> directly followed by <answer>
    ("<think>go</think> so: <answer>Left</answer><think>no</think><answer>Up</answer>", ["Up"], ["Left"]),
    ("<think>x</think><answer><answer>Up</answer></answer>", ["Up"], []),  # tags removed from the answer
    ("<think>x</think><answer>Up<|im_end|></answer>", ["Up"], []),
]


@pytest.mark.parametrize("text, strict, lenient", BOUNDARY_CASES)
def test_reply_format_boundaries(text, strict, lenient):
    r = parse_response(text, NAMES)
    assert r.actions == strict and r.is_valid == bool(strict) and r.penalised == (not strict)
    r = parse_response(text, NAMES, reply_format="lenient")
    assert r.actions == lenient and r.is_valid == bool(lenient)
    # the strict verdict is the reference's, on the primed generation as on the unprimed reply
    primed = text if text.startswith("<think>") else "<think>" + text
    ref = reference_parse(primed)
    assert (ref is not None and ref[1] in NAMES) == bool(strict)
    assert parse_response(primed, NAMES).actions == strict


def test_text_between_think_and_answer_is_a_format_error_by_default():
    # the example: the reference gives no action and the format penalty
    r = parse_response("<think>go</think> I will go left. <answer>Left</answer>", NAMES)
    assert not r.format_ok and r.actions == [] and r.penalised and r.think == "go"


def test_unknown_reply_format_raises():
    with pytest.raises(ValueError, match="reply_format"):
        parse_response(reply("Up"), NAMES, reply_format="loose")


_tag_pieces = st.sampled_from(
    ["<think>", "</think>", "<answer>", "</answer>", "<|im_end|>", " ", "\n", "x", "Up", "||", "<", ">"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_tag_pieces | st.text(max_size=3), max_size=25))
def test_strict_matches_the_reference_regex(parts):
    # the strict parse equals the reference's regex on the primed generation, think and answer included
    generated = "".join(parts)
    ref = reference_parse("<think>" + generated)
    for text in ("<think>" + generated, generated):
        r = parse_response(text, None)
        if ref is None:
            assert not r.format_ok and r.actions == []
        else:
            assert r.format_ok and (r.think, r.answer) == ref and r.actions == ([ref[1]] if ref[1] else [])


@pytest.mark.parametrize(
    "unit", ["<think></think><answer>", "</think> <answer>", "<think></think>\n", "</think>" + " " * 50]
)
def test_strict_parse_is_fast_on_tag_floods(unit):
    # the reference regex backtracks cubically on such replies; the strict parse is linear
    text = unit * (MAX_REPLY_CHARS // len(unit) + 1)
    t0 = time.perf_counter()
    assert not parse_response(text, NAMES).is_valid
    assert time.perf_counter() - t0 < 1.0


# --------------------------------------------------------------------------- odd input
def test_non_ascii_and_emoji():
    r = parse_response(reply("Right", think="向右走 🚀 ñ"), NAMES)
    assert r.is_valid and r.think == "向右走 🚀 ñ"
    # non-ASCII look-alikes of action names are not actions
    r = parse_response(reply("Ríght || 右 || 🚀"), NAMES)
    assert r.actions == [] and r.num_invalid == 2 and not r.is_valid  # 2 tokens read
    # fullwidth letters are not folded to ASCII
    assert parse_response(reply("Ｕｐ"), NAMES).actions == []
    assert not parse_response("🚀" * 1000, NAMES).is_valid


@pytest.mark.parametrize("text", [None, 123, 1.5, b"<think>x</think><answer>Up</answer>", ["Up"], {"a": 1}])
def test_non_string_input_is_invalid_not_an_error(text):
    r = parse_response(text, NAMES)  # type: ignore[arg-type]
    assert r == ParsedResponse() and not r.is_valid


@pytest.mark.parametrize(
    "text",
    [
        "x" * 100_000,
        "<think>" * 15_000,  # many openings, never closed
        "</think>" * 15_000,
        "<think>x</think>" + "<answer>" * 15_000,
        "<think>" + "<answer>" * 15_000,
        "|" * 100_000,
    ],
    ids=["plain", "open-think", "close-think", "open-answers", "think-then-answers", "pipes"],
)
def test_100k_character_reply_finishes_quickly(text):
    assert len(text) >= 100_000
    t0 = time.perf_counter()
    r = parse_response(text, NAMES)
    # replies are cut to MAX_REPLY_CHARS, so the worst case is bounded (~0.2 s measured on
    # a loaded CPU for the quadratic tag patterns); 5 s means "did not hang"
    assert time.perf_counter() - t0 < 5.0
    assert not r.is_valid


def test_long_reply_cut_at_cap():
    # a valid reply followed by 100k junk: parsed from the first MAX_REPLY_CHARS characters
    r = parse_response(reply("Up") + "z" * 100_000, NAMES)
    assert r.actions == ["Up"]
    # an answer that only appears after the cap is not seen
    late = "<think>" + "x" * (MAX_REPLY_CHARS + 10) + "</think><answer>Up</answer>"
    assert not parse_response(late, NAMES).is_valid


# --------------------------------------------------------------------------- free-form mode
def test_free_form_answer_kept_whole():
    r = parse_response(reply(" (3 + 4) * 2 "), None)
    assert r.actions == ["(3 + 4) * 2"] and r.is_valid and r.num_invalid == 0
    # the separator is not applied in free-form mode
    assert parse_response(reply("a || b"), None).actions == ["a || b"]


def test_free_form_empty_answer_is_invalid():
    r = parse_response(reply("   "), None)
    assert r.format_ok and r.actions == [] and not r.is_valid


def test_free_form_still_needs_tags():
    assert not parse_response("42", None).is_valid
    assert parse_response("reason</think><answer>42</answer>", None).actions == ["42"]


# --------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("max_actions", [0, -1])
def test_max_actions_below_one_raises(max_actions):
    with pytest.raises(ValueError):
        parse_response(reply("Up"), NAMES, max_actions=max_actions)


# --------------------------------------------------------------------------- properties
_pieces = st.sampled_from(
    ["<think>", "</think>", "<answer>", "</answer>", "||", " ", "Left", "down", "UP", "Right", "Fly", "é", "🚀", "\n"]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_pieces | st.text(max_size=5), max_size=30), st.integers(1, 4))
def test_never_raises_and_respects_invariants(parts, max_actions):
    text = "".join(parts)
    r = parse_response(text, NAMES, max_actions=max_actions)
    assert len(r.actions) <= max_actions
    assert all(a in NAMES for a in r.actions)
    assert r.num_invalid >= 0 and len(r.actions) + r.num_invalid <= max_actions
    assert r.is_valid == (r.format_ok and bool(r.actions))
    assert r.penalised == (not r.is_valid or r.num_invalid > 0)
    if not r.format_ok:
        assert r.actions == [] and r.num_invalid == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6), st.integers(1, 4), st.text(max_size=40))
def test_well_formed_replies_round_trip(actions, max_actions, think):
    think = think.replace("<", "").replace(">", "")  # keep the tags unambiguous
    answer = " || ".join(a.swapcase() if i % 2 else a for i, a in enumerate(actions))
    r = parse_response(reply(answer, think=think), NAMES, max_actions=max_actions)
    assert r.actions == actions[:max_actions]
    assert r.num_invalid == 0 and r.think == think.strip() and r.is_valid
