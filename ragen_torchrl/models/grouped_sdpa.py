"""SDPA attention that reads grouped key/value heads in place under a padding mask, on the CPU.

A grouped-query model (SmolLM2-135M: 9 query heads on 3 key/value heads; Llama-3, Qwen2.5) handed an
attention mask gets ``transformers``' ``sdpa`` attention to copy every key/value head once per query head
that reads it (``repeat_kv``) before calling ``torch.nn.functional.scaled_dot_product_attention``, because
the fused CUDA kernels take grouped heads only without a mask. The training forward, the shared-prefix
scoring passes and the MI diagnostics all run with a padding mask, so on a CPU each layer copied its
keys and values three times over, forward and backward. PyTorch's CPU flash-attention kernel takes
grouped heads and a mask together (``enable_gqa=True``): :func:`grouped_sdpa_forward` calls it that way
on the CPU and is ``transformers``' ``sdpa`` attention everywhere else (an accelerator, a decoding step,
no mask, a position bias, ``output_attentions``). The results are the same up to float round-off
(``tests/models/test_grouped_sdpa.py``).

:data:`GROUPED_SDPA` is its name in ``transformers``' ``AttentionInterface`` (with the ``sdpa`` mask);
:func:`use_grouped_sdpa` switches a loaded ``sdpa`` model to it (``config._attn_implementation``, which
``save_pretrained`` does not write: the checkpoint is unchanged).

Example:
    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> _ = torch.manual_seed(0)
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=16,
    ...     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)).eval()
    >>> ids, mask = torch.tensor([[0, 5, 6, 7], [4, 5, 6, 7]]), torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    >>> ref = model(input_ids=ids, attention_mask=mask).logits
    >>> use_grouped_sdpa(model), model.config._attn_implementation
    (True, 'ragen_grouped_sdpa')
    >>> torch.allclose(model(input_ids=ids, attention_mask=mask).logits, ref, atol=1e-6)
    True
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

__all__ = ["GROUPED_SDPA", "SDPA_IMPLEMENTATIONS", "grouped_sdpa_forward", "use_grouped_sdpa"]

#: the attention implementation name (``config._attn_implementation``) of :func:`grouped_sdpa_forward`
GROUPED_SDPA = "ragen_grouped_sdpa"

#: the implementation names that are ``transformers``' SDPA attention (the same masks and results)
SDPA_IMPLEMENTATIONS = ("sdpa", GROUPED_SDPA)


def grouped_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """``transformers`` attention function: on the CPU, a masked multi-token attention of grouped heads in one
    SDPA call with ``enable_gqa=True`` (no key/value copy per query head); otherwise ``sdpa_attention_forward``."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        query.device.type != "cpu"
        or groups <= 1
        or attention_mask is None
        or query.shape[2] == 1  # a decoding step: transformers folds the query heads onto the key heads
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        or kwargs.get("output_attentions", False)
    ):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: torch.nn.Module) -> bool:
    """Switch ``model`` from ``sdpa`` attention to :data:`GROUPED_SDPA`; ``False`` (nothing changed) for any other
    implementation or a model with sub-configs (a vision-language model's towers keep theirs)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa" or config.sub_configs:
        return False
    model.set_attn_implementation(GROUPED_SDPA)
    return True


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
