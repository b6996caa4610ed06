"""MI diagnostics with image contexts: cross-scoring with a vision-language policy.

* every entry ``(i, j)`` of :func:`cross_score_vl`'s matrix is the teacher-forced log-likelihood
  of reasoning ``i`` after context ``j`` with its images (``score_conversation`` of the
  concatenation, an independent single pass without cache), also for a context with two images,
  reasonings of different lengths and chunked passes; the own-context entropy is the entropy of
  that pass's logits;
* each distinct context's images go through the vision tower once, and two contexts with the same
  text but different images are different columns;
* ``CollapseMonitor`` with a ``VLProcessor``: a tiny VL model trained for a few steps to name the
  colour of a solid image in its reasoning has MI proxies far above chance, the same model trained
  on reasonings shuffled across images has them at chance;
* bad input gets a clear error.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.diagnostics.collapse import CollapseMonitor
from ragen_torchrl.diagnostics.entropy import token_entropy
from ragen_torchrl.diagnostics.vl_scoring import VLContext, cross_score_vl, vl_context
from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
from ragen_torchrl.models.vision import score_conversation, suppress_vision_tokens

SIZES = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
VISION = dict(vision_depth=1, vision_embed_dim=16, vision_num_heads=2, max_image_tokens=64)
TEXT = "The board is in the image."
WORDS = ["dark", "light", "red", "blue"]
COLOURS = [(0, 0, 0), (255, 255, 255), (255, 0, 0), (0, 0, 255)]
CORPUS = [f"{TEXT} <think>{w}</think><answer>Up</answer>" for w in WORDS] * 10


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    return build_tiny_vl_model(CORPUS, TinyVLConfig(**SIZES, **VISION), tmp_path_factory.mktemp("vl"))


def solid(colour, size=56) -> torch.Tensor:
    return torch.tensor(colour, dtype=torch.uint8).view(3, 1, 1).expand(3, size, size).contiguous()


def noise(seed: int, h: int, w: int) -> torch.Tensor:
    return torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def ids_of(processor, text: str) -> torch.Tensor:
    return torch.tensor(processor.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def test_matrix_entries_equal_the_teacher_forced_pass_over_each_concatenation(vl_dir):
    model, processor = load_tiny_vl(vl_dir)
    first = [("system", "rules"), ("user", TEXT)]
    contexts = [
        vl_context(processor, first, [noise(0, 56, 84)]),
        vl_context(processor, first, [noise(1, 84, 56)]),
        # a second turn: two user messages, two images
        vl_context(
            processor,
            [*first, ("assistant", "<think>dark</think>"), ("user", TEXT)],
            [noise(0, 56, 84), solid((9, 9, 9))],
        ),
    ]
    assert contexts[2].image_grid_thw.shape == (2, 3)
    reasonings = [ids_of(processor, z) for z in ("dark", "light red blue", "the board is red")]
    own = [0, 2, 1]
    mean_lp, sum_lp, ent = cross_score_vl(model, contexts, reasonings, batch_size=2, entropy_cols=own)
    assert mean_lp.shape == sum_lp.shape == (3, 3)
    for j, ctx in enumerate(contexts):
        for i, z in enumerate(reasonings):
            with torch.no_grad():
                lp = score_conversation(model, torch.cat([ctx.input_ids, z]), ctx.pixel_values, ctx.image_grid_thw)
            assert float(sum_lp[i, j]) == pytest.approx(float(lp[-z.numel() :].sum()), abs=1e-4)
            assert float(mean_lp[i, j]) == pytest.approx(float(lp[-z.numel() :].mean()), abs=1e-4)
    # own-context entropy: the mean entropy of the logits that predict z under context own[i]
    for i, z in enumerate(reasonings):
        ctx = contexts[own[i]]
        ids = torch.cat([ctx.input_ids, z]).view(1, -1)
        with torch.no_grad():
            model.model.rope_deltas = None
            logits = model(
                input_ids=ids,
                pixel_values=ctx.pixel_values,
                image_grid_thw=ctx.image_grid_thw,
                mm_token_type_ids=(ids == model.config.image_token_id).int(),
            ).logits
        picked = suppress_vision_tokens(logits[:, ctx.input_ids.numel() - 1 : -1], model)  # the policy's softmax
        expected = token_entropy(picked, torch.ones(picked.shape[:2], dtype=torch.bool))
        assert float(ent[i]) == pytest.approx(float(expected.reshape(-1)[0]), abs=1e-4)


def test_each_distinct_context_is_encoded_once_and_images_tell_columns_apart(vl_dir, monkeypatch):
    model, processor = load_tiny_vl(vl_dir)
    calls = []
    encode = model.model.get_image_features

    def counting(pixel_values, grid, **kw):
        calls.append(grid.tolist())
        return encode(pixel_values, grid, **kw)

    monkeypatch.setattr(model.model, "get_image_features", counting)
    dark, light = (vl_context(processor, [("user", TEXT)], [solid(c)]) for c in COLOURS[:2])
    assert torch.equal(dark.input_ids, light.input_ids)  # same text, different images
    reasonings = [ids_of(processor, w) for w in WORDS]
    mean_lp, _ = cross_score_vl(model, [dark, light, dark, dark], reasonings)
    assert len(calls) == 2  # two distinct contexts, one vision-tower call each
    assert torch.equal(mean_lp[:, 0], mean_lp[:, 2]) and torch.equal(mean_lp[:, 0], mean_lp[:, 3])
    assert not torch.allclose(mean_lp[:, 0], mean_lp[:, 1])  # the image changes the scores


def test_dtype_scores_with_a_copy_in_that_dtype(vl_dir):
    model, processor = load_tiny_vl(vl_dir)
    contexts = [vl_context(processor, [("user", TEXT)], [noise(k, 56, 56)]) for k in range(2)]
    reasonings = [ids_of(processor, w) for w in WORDS[:3]]
    mean32, _ = cross_score_vl(model, contexts, reasonings)
    mean64, sum64 = cross_score_vl(model, contexts, reasonings, dtype="float64")
    assert mean64.dtype == sum64.dtype == torch.float64 and mean32.dtype == torch.float32
    assert torch.allclose(mean64, mean32.double(), atol=1e-4)
    assert next(model.parameters()).dtype == torch.float32  # the policy itself is untouched


# --------------------------------------------------------------------------- MI proxies with images
def train_colour_naming(vl_dir, *, shuffled: bool, steps: int = 60, seed: int = 0):
    """A fresh tiny VL model trained to answer each solid image with a reasoning naming a colour word:
    its own colour (grounded) or, when ``shuffled``, a word drawn afresh each step (reasoning
    independent of the image). One batched teacher-forced forward per step."""
    model, processor = load_tiny_vl(vl_dir)
    contexts = [vl_context(processor, [("user", TEXT)], [solid(c)]) for c in COLOURS]
    words = [ids_of(processor, w) for w in WORDS]
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    pixels = torch.cat([c.pixel_values for c in contexts])
    grids = torch.cat([c.image_grid_thw for c in contexts])
    model.train()
    for _ in range(steps):
        order = torch.randperm(len(WORDS), generator=generator) if shuffled else torch.arange(len(WORDS))
        rows = [torch.cat([c.input_ids, words[int(k)]]) for c, k in zip(contexts, order)]
        width = max(r.numel() for r in rows)
        ids = torch.stack([torch.nn.functional.pad(r, (0, width - r.numel())) for r in rows])
        attn = torch.stack([torch.arange(width) < r.numel() for r in rows]).long()
        model.model.rope_deltas = None
        logits = model(
            input_ids=ids,
            attention_mask=attn,
            pixel_values=pixels,
            image_grid_thw=grids,
            mm_token_type_ids=(ids == model.config.image_token_id).int(),
        ).logits
        loss = 0.0
        for r, (c, k) in enumerate(zip(contexts, order)):
            z = words[int(k)]
            start = c.input_ids.numel()
            loss = (
                loss - torch.log_softmax(logits[r, start - 1 : start - 1 + z.numel()], -1).gather(-1, z[:, None]).sum()
            )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model, processor


def colour_records(samples: int = 2):
    """``samples`` one-turn episodes per colour (one prompt group each), reasoning = the colour's word."""
    chats, groups, images = [], [], []
    for g, (word, colour) in enumerate(zip(WORDS, COLOURS)):
        for _ in range(samples):
            chats.append(
                [
                    {"role": "user", "content": TEXT},
                    {"role": "assistant", "content": f"<think>{word}</think><answer>Up</answer>"},
                ]
            )
            groups.append(g)
            images.append([solid(colour)])
    td = TensorDict(group_id=torch.tensor(groups), batch_size=[len(chats)]).to_lazystack(0)
    td.set(("history", "full"), History.from_chats(chats))
    return td, images


@pytest.mark.parametrize("shuffled", [False, True], ids=["grounded", "shuffled"])
def test_mi_proxies_see_whether_the_reasoning_reads_the_image(vl_dir, shuffled):
    model, processor = train_colour_naming(vl_dir, shuffled=shuffled)
    records, images = colour_records()
    metrics = CollapseMonitor(model, processor, num_pairs=8, every=1, seed=0)(records, images=images)
    first = {k.split("/")[-1]: v for k, v in metrics.items() if k.startswith("collapse/first_turn/")}
    assert first["num_columns"] == 4 and first["distinct_columns"] == 4  # same text, 4 images: 4 columns
    assert first["mi_upper_bound"] == pytest.approx(math.log(4))
    assert first["retrieval_chance"] == pytest.approx(0.25)
    traj = {k.split("/")[-1]: v for k, v in metrics.items() if k.startswith("collapse/trajectory/")}
    if shuffled:
        # the reasoning does not depend on the image: every column explains it equally well
        assert abs(first["mi_estimate"]) < 0.05 * math.log(4)
        assert abs(traj["mi_estimate"]) < 0.05 * math.log(8)
    else:
        assert first["retrieval_accuracy"] == 1.0
        assert first["mi_estimate"] > 0.5 * math.log(4)
        assert traj["mi_estimate"] > 0.3 * math.log(8)  # 8 columns, pairs of equivalent ones
        assert traj["retrieval_accuracy"] == 1.0


def test_monitor_takes_each_trajectorys_images_as_a_list_or_a_stacked_tensor(vl_dir):
    model, processor = load_tiny_vl(vl_dir)
    records, images = colour_records(1)
    as_lists = CollapseMonitor(model, processor, num_pairs=4, every=1, seed=0)(records, images=images)
    stacked = [torch.stack(i) for i in images]  # [T, 3, H, W] uint8 per trajectory
    as_tensors = CollapseMonitor(model, processor, num_pairs=4, every=1, seed=0)(records, images=stacked)
    drop = "timing/mi_seconds"
    assert {k: v for k, v in as_lists.items() if k != drop} == {k: v for k, v in as_tensors.items() if k != drop}


# --------------------------------------------------------------------------- errors
def test_bad_input_gets_a_clear_error(vl_dir):
    model, processor = load_tiny_vl(vl_dir)
    ctx = vl_context(processor, [("user", TEXT)], [solid(COLOURS[0])])
    z = [ids_of(processor, "dark")]
    with pytest.raises(ValueError, match="contexts is empty"):
        cross_score_vl(model, [], z)
    with pytest.raises(ValueError, match="must be a VLContext"):
        cross_score_vl(model, [ctx.input_ids], z)
    with pytest.raises(ValueError, match=r"contexts\[0\] has 4 image tokens but no images"):
        cross_score_vl(model, [VLContext(ctx.input_ids, None, torch.zeros(0, 3, dtype=torch.long))], z)
    with pytest.raises(ValueError, match=r"reasonings\[0\] is empty"):
        cross_score_vl(model, [ctx], [torch.tensor([], dtype=torch.long)])
    with pytest.raises(ValueError, match="entropy_cols"):
        cross_score_vl(model, [ctx], z, entropy_cols=[3])
    with pytest.raises(ValueError, match="batch_size"):
        cross_score_vl(model, [ctx], z, batch_size=0)
    with pytest.raises(ValueError, match="dtype must be a floating torch dtype"):
        cross_score_vl(model, [ctx], z, dtype="int8")
    records, images = colour_records(1)
    with pytest.raises(ValueError, match="images= is required"):
        CollapseMonitor(model, processor, every=1)(records)
    with pytest.raises(ValueError, match="images has 3 trajectories, records has 4"):
        CollapseMonitor(model, processor, every=1)(records, images=images[:3])
    with pytest.raises(ValueError, match="1 user messages but only 0 images"):
        CollapseMonitor(model, processor, every=1)(records, images=[[] for _ in images])
    with pytest.raises(ValueError, match="monitor scores a text policy"):
        CollapseMonitor(model, processor.tokenizer, every=1)(records, images=images)
