"""Gradient-SNR diagnostics: RV quantile buckets and per-bucket gradient norms."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ragen_torchrl.diagnostics.grad_snr import bucket_grad_norms, rv_buckets


@pytest.mark.parametrize(
    "values, buckets, expected",
    [
        # 6 distinct values, ranks 0..5, bucket = rank * 3 // 6
        ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], 3, [0, 0, 1, 1, 2, 2]),
        ([0.0, 0.1, 0.2, 0.3, 0.4, 0.5], 6, [0, 1, 2, 3, 4, 5]),
        # ties share the rank of the first: ranks 0, 0, 0, 3 -> 3 * 2 // 4 = 1
        ([0.0, 0.0, 0.0, 1.0], 2, [0, 0, 0, 1]),
        # unsorted with ties: sorted 0, .1, .3, .3 -> ranks 2, 0, 2, 1; bucket = rank * 4 // 4
        ([0.3, 0.0, 0.3, 0.1], 4, [2, 0, 2, 1]),
        # fewer groups than buckets: ranks 2, 0, 1 -> 2 * 6 // 3 = 4, 0, 1 * 6 // 3 = 2
        ([3.0, 1.0, 2.0], 6, [4, 0, 2]),
        ([5.0, 5.0, 5.0], 6, [0, 0, 0]),
        ([0.7], 6, [0]),
        ([], 6, []),
        ([2.0, 1.0], 1, [0, 0]),
    ],
)
def test_rv_buckets(values, buckets, expected):
    out = rv_buckets(torch.tensor(values), num_buckets=buckets)
    assert out.dtype == torch.long and out.tolist() == expected


def test_rv_buckets_errors():
    with pytest.raises(ValueError, match="finite"):
        rv_buckets(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="num_buckets"):
        rv_buckets(torch.tensor([1.0]), num_buckets=0)
    with pytest.raises(ValueError, match="1-D"):
        rv_buckets(torch.ones(2, 2))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 5, allow_nan=False), max_size=40), st.integers(1, 8))
def test_rv_buckets_monotone_and_in_range(values, k):
    b = rv_buckets(torch.tensor(values, dtype=torch.float64), num_buckets=k).tolist()
    assert all(0 <= x < k for x in b)
    for i in range(len(values)):
        for j in range(len(values)):
            if values[i] < values[j]:
                assert b[i] <= b[j]
            if values[i] == values[j]:
                assert b[i] == b[j]


def test_bucket_grad_norms_against_hand_computation():
    lin = nn.Linear(2, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -1.0]]))
        lin.bias.copy_(torch.tensor([0.25]))
    x = torch.tensor([[1.0, 2.0]])
    y = lin(x).sum()
    losses = {
        0: {
            "task": y,  # d/dw = x = [1, 2], d/db = 1 -> sqrt(1 + 4 + 1) = sqrt(6)
            "entropy": (lin.weight**2).sum(),  # d/dw = 2w = [1, -2], bias unused -> sqrt(5)
            "kl": 3 * lin.bias.sum(),  # d/db = 3, weight unused -> 3
        },
        5: {
            "task": 2 * y,  # twice the gradient -> sqrt(24)
            "kl": torch.tensor(0.0),  # no dependence on the parameters -> 0
        },
    }
    out = bucket_grad_norms(lin.parameters(), losses)
    assert out == pytest.approx(
        {
            "grad_snr/bucket0/task_grad_norm": math.sqrt(6),
            "grad_snr/bucket0/entropy_grad_norm": math.sqrt(5),
            "grad_snr/bucket0/kl_grad_norm": 3.0,
            "grad_snr/bucket5/task_grad_norm": math.sqrt(24),
            "grad_snr/bucket5/kl_grad_norm": 0.0,
        }
    )
    assert lin.weight.grad is None  # .grad untouched
    y.backward()  # graph retained for the caller
    assert lin.weight.grad.tolist() == [[1.0, 2.0]]


def test_bucket_grad_norms_errors_and_frozen_params():
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    frozen = torch.ones(2)
    assert bucket_grad_norms([w, frozen], {1: {"task": (w * frozen).sum()}}) == pytest.approx(
        {"grad_snr/bucket1/task_grad_norm": math.sqrt(2)}  # grad = frozen = [1, 1]
    )
    with pytest.raises(ValueError, match="scalar"):
        bucket_grad_norms([w], {0: {"task": w * 2}})
    with pytest.raises(ValueError, match="requires grad"):
        bucket_grad_norms([frozen], {0: {"task": frozen.sum()}})
