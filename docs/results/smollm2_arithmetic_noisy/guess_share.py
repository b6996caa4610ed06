"""How often a policy guesses on env=arithmetic, and how often it is right, by question kind.

A re-measurement outside the trainer: the synthetic questions of level seeds 2**30 .. 2**30 + N - 1 with
the one-attempt env's system prompt, rendered by the checkpoint's chat template and primed with
``<think>`` as the rollouts are, sampled by transformers' ``generate`` (one torch thread, seeded per
batch of 32). A reply guesses when it says "I think the answer is" (the noisy demonstrations' sentence).
Prints per kind (0: a + b, 1: a x c, 2: the subtraction word problem, 3: the two-step pens problem) the
questions and the success rate, then the overall success and guess share, then up to 3 failures per kind.

    python guess_share.py MODEL_DIR TEMPERATURE N
"""

import collections
import random
import re
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ragen_torchrl.envs.games.metamathqa import MetaMathQAGame, answers_match
from ragen_torchrl.envs.metamathqa import MetaMathQAEnv

torch.set_num_threads(1)
model_dir, temperature, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(model_dir)
tok.padding_side = "left"
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
system = MetaMathQAEnv(num_envs=1, max_turn=1, max_actions_per_traj=1).system_prompt
right, failures, guesses = collections.defaultdict(list), collections.defaultdict(list), []
seeds = list(range(2**30, 2**30 + n))
for i in range(0, n, 32):
    batch = seeds[i : i + 32]
    games = [MetaMathQAGame.generate(s) for s in batch]
    kinds = []
    for s in batch:  # the generator's draws, in its order: a, b, c, then the kind
        rng = random.Random(f"metamathqa-synthetic:{int(s)}")
        rng.randint(2, 50), rng.randint(2, 50), rng.randint(2, 9)
        kinds.append(rng.randrange(4))
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": g.render_text()}] for g in games]
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) + "<think>" for c in chats]
    enc = tok(texts, return_tensors="pt", padding=True)
    torch.manual_seed(i)
    with torch.no_grad():
        out = model.generate(
            **enc,
            max_new_tokens=48,
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_p=1.0,
            top_k=0,
            pad_token_id=tok.pad_token_id or tok.eos_token_id,
        )
    for game, kind, ids in zip(games, kinds, out):
        reply = tok.decode(ids[enc.input_ids.shape[1] :], skip_special_tokens=True)
        answer = re.search(r"<answer>(.*?)</answer>", reply, re.S)
        ok = bool(answer) and answers_match(answer.group(1), game.answer)
        right[kind].append(ok)
        guesses.append("I think the answer is" in reply)
        if len(failures[kind]) < 3 and not ok:
            failures[kind].append((game.question, game.answer, reply))
for kind in sorted(right):
    print(kind, len(right[kind]), sum(right[kind]) / len(right[kind]))
print("all", sum(map(sum, right.values())) / n, "guess share", sum(guesses) / n)
for kind in failures:
    for failure in failures[kind]:
        print(kind, repr(failure))
