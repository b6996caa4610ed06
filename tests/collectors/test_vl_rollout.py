"""Vision-language rollouts through the real collector, the behaviour scoring and the losses.

* :class:`VLRolloutPolicy` in :func:`collect_rollouts` on visual FrozenLake: each record holds the
  token trajectory (replies as sampled), the sampled-position mask, the rollout's log-probs and one
  image per user message (the env's own renders); the batched, left-padded teacher-forced scoring
  of :func:`behaviour_batch` gives the rollout's log-probs within 1e-4, and the images change them;
* the GRPO loss module on the resulting training batch: its gradient along a random direction of a
  vision-tower weight and of an LM weight equals central finite differences (float64);
* the dense batch carries the images (padded) and mini-batch selection keeps them with their rows;
* bad input raises clear errors;
* at a temperature the behaviour scoring gives the rollout's tempered log-probs;
* replies stop at every end id of the checkpoint's generation config and a reply that did not sample
  ``<|im_end|>`` is closed with it, as the text path's template closes it.
"""

from __future__ import annotations

import pytest
import tensordict
import torch

from ragen_torchrl import keys as K
from ragen_torchrl.collectors import VLRolloutPolicy, build_rollout_policy, collect_rollouts
from ragen_torchrl.data.dense import dense_images, trim_padding
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.visual import IMAGE_TEXT
from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
from ragen_torchrl.objectives import build_algorithm
from ragen_torchrl.objectives.logprobs import behaviour_batch, make_logprob_policy
from ragen_torchrl.trainer.update import training_batch

SIZES = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
VISION = dict(vision_depth=1, vision_embed_dim=16, vision_num_heads=2, max_image_tokens=64)
CORPUS = [IMAGE_TEXT, "<think>Goal is down right. Right is ice.</think><answer>Right || Down</answer>"] * 20
PRIME = "<think>"


@pytest.fixture(scope="module", autouse=True)
def _lists_stack():
    with tensordict.set_list_to_stack(True):
        yield


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    path = build_tiny_vl_model(CORPUS, TinyVLConfig(**SIZES, **VISION), tmp_path_factory.mktemp("vl"))
    return load_tiny_vl(path)


def _collect(model, processor, seed=0, levels=(1, 2), group=2, max_turn=3):
    policy = VLRolloutPolicy(model, processor, max_new_tokens=6, reply_prime=PRIME, seed=seed)
    env = make_env("frozenlake_visual", num_envs=len(levels) * group, max_turn=max_turn, size=3)
    records = collect_rollouts(env, policy, level_seeds=list(levels), group_size=group)
    # one vision-tower call per turn for all rows' new images, none for images already seen
    assert policy._rollout.image_encodings == int(records[K.NUM_TURNS].max())
    return records, env


@pytest.fixture(scope="module")
def records(vl):
    model, processor = vl
    return _collect(model, processor, seed=4)  # a seed where one reply ends early: rows of different lengths


def test_records_hold_the_trajectory_as_sampled_and_one_image_per_user_message(vl, records):
    model, processor = vl
    recs, env = records
    tok = processor.tokenizer
    for i in range(recs.batch_size[0]):
        row = recs[i]
        ids, sampled, images = row[K.TOKENS_TRAJECTORY], row[K.MASKS_TRAJECTORY], row[K.IMAGES_TRAJECTORY]
        turns = int(row[K.NUM_TURNS])
        assert images.shape[0] == turns and images.dtype == torch.uint8
        assert int(sampled.sum()) == int(row[K.NUM_TOKENS])
        # one vision block per user message, each holding its image's tokens (84 px board: 3 x 3)
        assert int((ids == processor.image_token_id).sum()) == 9 * turns
        assert tok.decode(ids[:10]).startswith("<|im_start|>system")
        # the first image is the level's start board, rendered by the env
        game = env.game_factory(int(row[K.LEVEL_SEED]), 0)
        assert torch.equal(images[0], env.render(game))
        # the log-probs are there exactly where tokens were sampled
        lp = row[K.LOG_PROBS_TRAJECTORY]
        assert bool((lp[sampled] < 0).all()) and bool((lp[~sampled] == 0).all())
        # every reply in the history is the prime + its sampled text
        replies = [m for m in row[K.HISTORY_FULL].tolist() if m["role"] == "assistant"]
        assert len(replies) == turns and all(m["content"].startswith(PRIME) for m in replies)


def test_rollout_log_probs_equal_the_batched_teacher_forced_scoring(vl, records):
    model, processor = vl
    recs, _ = records
    actor = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME, processor=processor)
    batch = behaviour_batch(actor, recs, chunk_size=4)  # all rows in one left-padded forward
    assert batch[K.IMAGES_TRAJECTORY].shape[:2] == (4, int(recs[K.NUM_TURNS].max()))
    assert batch[K.IMAGES_COUNT].tolist() == recs[K.NUM_TURNS].tolist()
    scored, trained = batch[K.LOG_PROBS_FULL], batch[K.MASKS_ASSISTANT]
    lengths = []
    for i in range(4):
        rollout, sampled = recs[i][K.LOG_PROBS_TRAJECTORY], recs[i][K.MASKS_TRAJECTORY]
        t = rollout.numel()
        lengths.append(t)
        assert torch.equal(trained[i, -t:], sampled)
        torch.testing.assert_close(scored[i, -t:][sampled], rollout[sampled], atol=1e-4, rtol=0)
    assert len(set(lengths)) > 1, "rows of different lengths: the left padding is exercised"
    # the images are read: blank boards change the scores
    blank = batch.clone()
    blank.set(K.IMAGES_TRAJECTORY, torch.zeros_like(batch[K.IMAGES_TRAJECTORY]))
    again = behaviour_batch(actor, blank, chunk_size=4)[K.LOG_PROBS_FULL]
    assert (again[trained] - scored[trained]).abs().max() > 1e-3


def test_grpo_loss_gradient_on_image_inputs_matches_finite_differences(vl, records):
    model, processor = vl
    recs, _ = records
    model = load_tiny_vl(model.name_or_path, dtype="float64")[0] if hasattr(model, "name_or_path") else model.double()
    actor = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME, processor=processor)
    algorithm = build_algorithm({"name": "grpo", "entropy_coeff": 0.0}, actor, model)
    recs = recs.clone()
    recs.set(K.EPISODE_RETURN, torch.tensor([1.0, 0.0, 0.5, -0.5]))  # a learning signal in both groups
    batch, _ = training_batch(recs, algorithm, actor)
    loss_module = algorithm.loss_module

    def loss_value() -> torch.Tensor:
        out = loss_module(batch.clone())
        return sum(v for k, v in out.items() if k.startswith("loss_"))

    weights = {
        "vision": model.model.visual.patch_embed.proj.weight,
        "text": model.model.language_model.layers[0].mlp.down_proj.weight,
    }
    model.zero_grad()
    loss_value().backward()
    gen = torch.Generator().manual_seed(0)
    h = 1e-3  # Qwen2-VL keeps its rotary embedding and attention softmax in float32 even in a float64 model
    for name, w in weights.items():
        direction = torch.randn(w.shape, generator=gen, dtype=w.dtype)
        analytic = float((w.grad * direction).sum())
        assert analytic != 0.0, name
        with torch.no_grad():
            w += h * direction
            up = float(loss_value())
            w -= 2 * h * direction
            down = float(loss_value())
            w += h * direction
        numeric = (up - down) / (2 * h)
        assert numeric == pytest.approx(analytic, rel=2e-3, abs=1e-9), name


def test_mini_batch_selection_keeps_each_rows_images(vl, records):
    model, processor = vl
    recs, _ = records
    actor = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME, processor=processor)
    batch = behaviour_batch(actor, recs, chunk_size=4)
    part = trim_padding(batch[torch.tensor([2])])
    assert torch.equal(part[K.IMAGES_TRAJECTORY][0, : int(part[K.IMAGES_COUNT][0])], recs[2][K.IMAGES_TRAJECTORY])
    one = behaviour_batch(actor, recs[torch.tensor([2])], chunk_size=1)[K.LOG_PROBS_FULL]
    t = one.shape[1]
    torch.testing.assert_close(one[0], batch[K.LOG_PROBS_FULL][2, -t:], atol=1e-4, rtol=0)


def test_bad_input_is_refused(vl, records):
    model, processor = vl
    recs, _ = records
    with pytest.raises(ValueError, match="share one size"):
        dense_images([torch.zeros(1, 3, 4, 4, dtype=torch.uint8), torch.zeros(1, 3, 8, 8, dtype=torch.uint8)])
    text_actor = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME)
    with pytest.raises(ValueError, match="no vision-language processor"):
        behaviour_batch(text_actor, recs)
    actor = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME, processor=processor)
    with pytest.raises(ValueError, match="algo.train_on=generated"):
        behaviour_batch(actor, recs, train_on="retokenized")
    with pytest.raises(ValueError, match="image tokens"):
        processor.batch_inputs(recs[0][K.TOKENS_TRAJECTORY].unsqueeze(0), [recs[0][K.IMAGES_TRAJECTORY][:1]])
    with pytest.raises(ValueError, match="rollout.backend=hf"):
        build_rollout_policy("vllm", model, processor.tokenizer, max_new_tokens=4, temperature=1.0, processor=processor)
    with pytest.raises(ValueError, match="full distribution"):
        build_rollout_policy("hf", model, processor.tokenizer, max_new_tokens=4, temperature=1.0, top_k=5,
                             processor=processor)  # fmt: skip
    with pytest.raises(ValueError, match="max_new_tokens"):
        VLRolloutPolicy(model, processor, max_new_tokens=0)


def test_rollouts_at_a_temperature_are_scored_at_it(vl):
    # the rollout's log-probs are of softmax(logits / T): the behaviour pass scores the same distribution
    model, processor = vl
    policy = VLRolloutPolicy(model, processor, max_new_tokens=6, temperature=0.5, reply_prime=PRIME, seed=1)
    env = make_env("frozenlake_visual", num_envs=4, max_turn=2, size=3)
    recs = collect_rollouts(env, policy, level_seeds=[1, 2], group_size=2)
    tempered = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME, processor=processor, temperature=0.5)
    plain = make_logprob_policy(model, processor.tokenizer, reply_prime=PRIME, processor=processor)
    scored = behaviour_batch(tempered, recs, chunk_size=4)[K.LOG_PROBS_FULL]
    untempered = behaviour_batch(plain, recs, chunk_size=4)[K.LOG_PROBS_FULL]
    gap = 0.0
    for i in range(4):
        rollout, sampled = recs[i][K.LOG_PROBS_TRAJECTORY], recs[i][K.MASKS_TRAJECTORY]
        t = rollout.numel()
        torch.testing.assert_close(scored[i, -t:][sampled], rollout[sampled], atol=1e-4, rtol=0)
        gap = max(gap, float((untempered[i, -t:][sampled] - rollout[sampled]).abs().max()))
    assert gap > 1e-2  # scoring at temperature 1 would be off-policy


def _two_end_ids_checkpoint(vl, directory, second: int, tokenizer_eos: str) -> str:
    """The tiny VL checkpoint with ``generation_config.eos_token_id = [<|im_end|>, second]``; its tokenizer's
    eos is ``<|im_end|>`` or the second id (as a base checkpoint whose eos is ``<|endoftext|>``)."""
    model, processor = vl
    tok = processor.tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    saved = {"eos": tok.eos_token, "gen": model.generation_config.eos_token_id}
    try:
        model.generation_config.eos_token_id = [im_end, second]
        if tokenizer_eos == "second":
            tok.eos_token = tok.convert_ids_to_tokens(second)
        for part in (tok, processor.image_processor, model):
            part.save_pretrained(directory)
    finally:
        tok.eos_token, model.generation_config.eos_token_id = saved["eos"], saved["gen"]
    return str(directory)


def _replies(ids: torch.Tensor, sampled: torch.Tensor) -> list[tuple[list[int], int | None]]:
    """Each run of sampled ids, with the id right after it (``None`` at the end)."""
    out, run = [], []
    for k, (token, s) in enumerate(zip(ids.tolist(), sampled.tolist())):
        if s:
            run.append(token)
        elif run:
            out.append((run, token))
            run = []
    if run:
        out.append((run, None))
    return out


@pytest.mark.parametrize("tokenizer_eos", ["im_end", "second"])
def test_replies_stop_at_every_end_id_of_the_generation_config(vl, tmp_path, tokenizer_eos):
    from ragen_torchrl.collectors.token_trajectory import encode, env_turn_text
    from ragen_torchrl.models.vision import load_policy

    model, processor = vl
    im_end = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    first, _ = _collect(model, processor, seed=2, max_turn=2)
    # the second end id: a token some row samples first, so that row must stop right after it
    openings = [_replies(first[i][K.TOKENS_TRAJECTORY], first[i][K.MASKS_TRAJECTORY])[0][0] for i in range(4)]
    row = next(i for i, r in enumerate(openings) if r[0] != im_end and len(r) > 1)
    second = openings[row][0]
    path = _two_end_ids_checkpoint(vl, tmp_path / "ckpt", second, tokenizer_eos)
    model2, tok2, processor2 = load_policy(path, "cpu", "float32")
    assert sorted(model2.generation_config.eos_token_id) == sorted([im_end, second])
    assert (tok2.eos_token_id == second) == (tokenizer_eos == "second")
    # the text path's closing after a reply that did not sample <|im_end|>: the template's text after it
    chat = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "go"}]
    before = tok2.apply_chat_template(chat, tokenize=False)
    after = tok2.apply_chat_template(
        [*chat, {"role": "user", "content": "v"}], tokenize=False, add_generation_prompt=True
    )
    prompt = tok2.apply_chat_template(chat[:1], tokenize=False, add_generation_prompt=True)
    closing = encode(tok2, [env_turn_text(prompt, before, after, "go")[0]])[0]
    assert int(closing[0]) == im_end

    recs, _ = _collect(model2, processor2, seed=2, max_turn=2)
    ends = {im_end, second}
    stopped_at_second = 0
    for i in range(4):
        replies = _replies(recs[i][K.TOKENS_TRAJECTORY], recs[i][K.MASKS_TRAJECTORY])
        if i == row:
            assert replies[0][0] == [second]  # stopped at the second end id, as generate would
        for reply, following in replies:
            assert not ends & set(reply[:-1]), (i, reply)  # an end id only ever closes a reply
            stopped_at_second += reply[-1] == second
            if following is not None and reply[-1] != im_end:
                # stopped at the other end id or cut by the budget: closed with the text path's token
                assert following == int(closing[0]), (i, reply, following)
            if following is not None and reply[-1] == im_end:
                assert following != im_end
    assert stopped_at_second >= 1
    assert processor2.end_of_turn_id == im_end  # what the warm start's demonstrations end each reply with
