"""A tiny random-weight chat model written as GGUF, and an independent numpy forward for it.

`write_tiny_gguf` builds a 2-layer model (hidden 64, 4 heads, 2 KV heads) with a small
byte-level BPE vocabulary (ChatML special tokens included) and a ChatML chat template, so
tests exercise the real GGUF loading path in well under a second.

`reference_logits` runs the model in float64 numpy straight from the GGUF tensors, the way
llama.cpp reads them: llama-arch Q/K rows are stored permuted for llama.cpp's rotary
embedding on adjacent pairs, qwen2 rotates the two halves of each head. It shares no code
with decide's converter, so it is the oracle for the Q/K permutation and the name mapping.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128
HEAD_DIM = HIDDEN // HEADS
CONTEXT, ROPE_BASE, EPS = 2048, 10000.0, 1e-5
VOCAB_SIZE = 360
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "is this message a refund request? answer with true or false",
    "choose one of the options: billing, support, sales, other",
    "the answer is true. the answer is false. the answer is 3.",
    "hello world, hello there, hello again",
    "user assistant system message content",
    '{"answer": true} {"answer": false} ["a", "b"] 0 1 2 3 4 5 6 7 8 9 10',
]
PRE_TOKENIZER = {"llama": "smollm", "qwen2": "qwen2"}


@cache
def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, GGUF token types, merges) of a byte-level BPE trained on a small corpus."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 4, trainer=trainer)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    types = [3 if t in SPECIAL_TOKENS else 1 for t in tokens]
    return tokens, types, merges


def tiny_weights(arch: str, seed: int) -> dict[str, np.ndarray]:
    """Random float32 tensors by GGUF name, in GGUF layout (llama Q/K rows permuted)."""
    rng = np.random.default_rng(seed)
    vocab = len(tiny_vocab()[0])

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": rng.standard_normal((vocab, HIDDEN)).astype(np.float32)}
    for i in range(LAYERS):
        b = f"blk.{i}"
        w[f"{b}.attn_norm.weight"] = norm(HIDDEN)
        w[f"{b}.attn_q.weight"] = matrix(HEADS * HEAD_DIM, HIDDEN)
        w[f"{b}.attn_k.weight"] = matrix(KV_HEADS * HEAD_DIM, HIDDEN)
        w[f"{b}.attn_v.weight"] = matrix(KV_HEADS * HEAD_DIM, HIDDEN)
        if arch == "qwen2":
            for proj, rows in (("q", HEADS * HEAD_DIM), ("k", KV_HEADS * HEAD_DIM), ("v", KV_HEADS * HEAD_DIM)):
                w[f"{b}.attn_{proj}.bias"] = (0.5 * rng.standard_normal(rows)).astype(np.float32)
        w[f"{b}.attn_output.weight"] = matrix(HIDDEN, HEADS * HEAD_DIM)
        w[f"{b}.ffn_norm.weight"] = norm(HIDDEN)
        w[f"{b}.ffn_gate.weight"] = matrix(FFN, HIDDEN)
        w[f"{b}.ffn_up.weight"] = matrix(FFN, HIDDEN)
        w[f"{b}.ffn_down.weight"] = matrix(HIDDEN, FFN)
    w["output_norm.weight"] = norm(HIDDEN)
    if arch == "qwen2":  # llama ties the output to the embedding; qwen2 has its own
        w["output.weight"] = matrix(vocab, HIDDEN)
    return w


def write_tiny_gguf(path: str | Path, arch: str = "llama", seed: int = 0) -> Path:
    """Write the tiny model as GGUF: F32 tensors, a Q8_0 embedding and one F16 matrix."""
    if arch not in PRE_TOKENIZER:
        raise ValueError(f"arch must be one of {sorted(PRE_TOKENIZER)}")
    path = Path(path)
    tokens, types, merges = tiny_vocab()
    writer = GGUFWriter(str(path), arch)
    _write_metadata(writer, arch, tokens, types, merges)
    for name, w in tiny_weights(arch, seed).items():
        if name == "token_embd.weight":
            writer.add_tensor(name, quantize(w, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        elif name == "blk.1.ffn_down.weight":
            writer.add_tensor(name, w.astype(np.float16))
        else:
            writer.add_tensor(name, w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _write_metadata(writer: GGUFWriter, arch: str, tokens: list[str], types: list[int], merges: list[str]) -> None:
    writer.add_name(f"tiny-{arch}")
    writer.add_block_count(LAYERS)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(ROPE_BASE)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZER[arch])
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|im_start|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)


# ---------------------------------------------------------------- numpy reference forward


def read_tensors(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """(architecture, float64 tensors by GGUF name in numpy shape) read with gguf alone."""
    reader = GGUFReader(path)
    arch = reader.fields["general.architecture"].contents()
    tensors = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        tensors[t.name] = dequantize(t.data, gguf.GGMLQuantizationType(t.tensor_type)).reshape(shape).astype(np.float64)
    return arch, tensors


def _rms_norm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * weight


def _rope(x: np.ndarray, adjacent_pairs: bool) -> np.ndarray:
    """Rotate x[L, H, D]: pairs (2i, 2i+1) as llama.cpp's NORM mode, or (i, i+D/2) as NEOX."""
    L, _, D = x.shape
    angles = np.arange(L)[:, None] * ROPE_BASE ** (-np.arange(0, D, 2) / D)[None, :]  # (L, D/2)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    if adjacent_pairs:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out
    a, b = x[..., : D // 2], x[..., D // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def _attention(x: np.ndarray, t: dict[str, np.ndarray], b: str, adjacent_pairs: bool) -> np.ndarray:
    L = x.shape[0]

    def proj(name: str, heads: int) -> np.ndarray:
        y = x @ t[f"{b}.attn_{name}.weight"].T + t.get(f"{b}.attn_{name}.bias", 0.0)
        return y.reshape(L, heads, HEAD_DIM)

    q = _rope(proj("q", HEADS), adjacent_pairs)
    k = _rope(proj("k", KV_HEADS), adjacent_pairs)
    v = proj("v", KV_HEADS)
    group = HEADS // KV_HEADS
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HEAD_DIM)
    scores = np.where(np.tril(np.ones((L, L), dtype=bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", p, v).reshape(L, HEADS * HEAD_DIM)
    return out @ t[f"{b}.attn_output.weight"].T


def _mlp(x: np.ndarray, t: dict[str, np.ndarray], b: str) -> np.ndarray:
    gate = x @ t[f"{b}.ffn_gate.weight"].T
    up = x @ t[f"{b}.ffn_up.weight"].T
    return (gate / (1.0 + np.exp(-gate)) * up) @ t[f"{b}.ffn_down.weight"].T


def reference_logits(path: str | Path, tokens: list[int], *, adjacent_pairs: bool | None = None) -> np.ndarray:
    """Logits[L, V] of the GGUF model at `path` for one sequence, in float64.

    `adjacent_pairs` overrides the rotary layout (tests use it to show a wrong one is caught).
    """
    arch, t = read_tensors(path)
    if adjacent_pairs is None:
        adjacent_pairs = arch == "llama"
    h = t["token_embd.weight"][np.asarray(tokens)]
    for i in range(LAYERS):
        b = f"blk.{i}"
        h = h + _attention(_rms_norm(h, t[f"{b}.attn_norm.weight"]), t, b, adjacent_pairs)
        h = h + _mlp(_rms_norm(h, t[f"{b}.ffn_norm.weight"]), t, b)
    h = _rms_norm(h, t["output_norm.weight"])
    return h @ t.get("output.weight", t["token_embd.weight"]).T
