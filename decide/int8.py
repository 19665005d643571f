"""Precision int8: the bfloat16 backend (decide.bf16) with W8A8 linear layers, about 2x its GEMMs on
AVX512-VNNI or AMX-INT8 (csrc/bf16_linear.cpp, Int8Linear).

A model loads as in bfloat16; then `quantize` runs a calibration pass over a few rendered requests,
recording the range of each linear layer's input per channel, and rebuilds the linear layers but two
(KEPT_BF16) in int8: its weight with a scale per output row, its input quantized per row on each call. A few
input channels of these models carry values far above the rest; quantized per row as they are, they
would leave the others a handful of int8 steps. So each channel is first divided by a factor that the
weight's matching column is multiplied by (SmoothQuant, Xiao et al. 2023: s = range(x)^α / range(W)^(1−α)),
which leaves x Wᵀ unchanged and splits the range between the two. Everything else stays as in bfloat16.
"""

from __future__ import annotations

import mlx.nn as nn
import numpy as np

from .bf16 import Bf16FusedMember, Bf16Linear, _native
from .prompts import ChatTokenizer, json_value, render_prompt
from .request import Option, Question, Text
from .runtime import mx

ALPHA = 0.5  # SmoothQuant's migration strength: the range split evenly between input and weight
# Layers kept in bf16: the head, whose logits are the answers' log-probabilities, and the MLP's output
# projection, whose input (SwiGLU's products) has outliers that vary by token, which smoothing cannot move:
# in int8 it caused 85% of the int8 model's error (qwen2.5-coder-1.5b, KL to bf16 0.0125 → 0.0020 without it).
KEPT_BF16 = ("lm_head", "down_proj")

# Requests of the kinds decide serves, on everyday inputs: what the calibration pass reads.
CALIBRATION = (
    (
        "Hi, I was charged twice for my subscription this month and the app now says my account is locked. "
        "I tried resetting my password but the email never arrives. Please fix this today, I need access for work.",
        Question(
            "choice",
            "Which team should handle this ticket?",
            (
                Option("billing", "payments, refunds, invoices"),
                Option("technical", "errors, crashes, log-in problems"),
                Option("sales", "plans, quotes, upgrades"),
            ),
        ),
    ),
    (
        "The film starts slowly, but the last hour is gripping, and the lead gives the best performance of her career.",
        Question("predicate", "Is this review positive?", (Option(False), Option(True))),
    ),
    (
        "What is the name of the river that flows through Vienna, and when was the city's first bridge built?",
        Question(
            "score",
            "How hard is this question to answer, from 0 (trivial) to 4 (very hard)?",
            tuple(Option(str(level)) for level in range(5)),
        ),
    ),
)


def calibration_prompts(tokenizer: ChatTokenizer) -> list[list[int]]:
    """CALIBRATION rendered as the engine renders requests, each followed by its first answer."""
    return [
        tokenizer.encode(render_prompt(tokenizer, (Text(text),), q) + json_value(q.options[0].value))
        for text, q in CALIBRATION
    ]


class _Recorder:
    """A GEMM that records the largest |x| of each input channel it is called with."""

    def __init__(self, gemm) -> None:
        self.gemm = gemm
        self.peak = np.zeros(gemm.in_features, np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = x.reshape(-1, x.shape[-1])
        if len(rows):
            np.maximum(self.peak, np.abs(rows).max(axis=0), out=self.peak)
        return self.gemm(x)


def _holders(model: nn.Module) -> list[tuple[object, str]]:
    """(owner, attribute) of each bf16 GEMM of a linear layer but KEPT_BF16's: one per fused group."""
    holders: list[tuple[object, str]] = []
    for name, module in model.named_modules():
        if isinstance(module, Bf16Linear) and name.rpartition(".")[2] not in KEPT_BF16:
            holders.append((module, "gemm"))
        elif isinstance(module, Bf16FusedMember) and module.nbytes:  # the group's first member
            holders.append((module._fused, "gemm"))
    return holders


def smoothing(input_peak: np.ndarray, weight_peak: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """SmoothQuant's per-channel factors; 1 where either range is zero."""
    factors = np.ones_like(input_peak, dtype=np.float32)
    live = (input_peak > 0) & (weight_peak > 0)
    factors[live] = input_peak[live] ** alpha / weight_peak[live] ** (1 - alpha)
    return np.clip(factors, 1e-5, 1e5).astype(np.float32)


def quantize(model: nn.Module, prompts: list[list[int]]) -> int:
    """Rebuild the bf16 linear layers of `model` (decide.bf16.convert'ed) but KEPT_BF16 in int8, smoothed
    by the input ranges of one pass over `prompts` (token ids); returns the bytes they now hold."""
    holders = _holders(model)
    for owner, attribute in holders:
        setattr(owner, attribute, _Recorder(getattr(owner, attribute)))
    for tokens in prompts:
        mx.eval(model(mx.array(tokens)[None]))
    held = 0
    for owner, attribute in holders:
        recorder = getattr(owner, attribute)
        weight = recorder.gemm.weight()
        factors = smoothing(recorder.peak, np.abs(weight).max(axis=0), ALPHA)
        gemm = _native().Int8Linear(weight, owner.host_bias, factors)
        setattr(owner, attribute, gemm)
        held += gemm.weight_bytes
    return held
