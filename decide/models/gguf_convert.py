"""GGUF -> mlx-lm folder: config.json, float32 safetensors, tokenizer.json, tokenizer_config.json.

Dequantization uses the `gguf` package (numpy), never `mx.load`, which returns wrong values
for Q4_K without an error. Supported architectures: llama (whose Q/K rows llama.cpp
permuted for its interleaved RoPE; undone here) and qwen2 (not permuted, q/k/v biases).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf.quants import dequantize as gguf_dequantize
from safetensors.numpy import save_file
from tqdm import tqdm

from decide.errors import ModelLoadError
from decide.limits import CONTEXT_CAP
from decide.models.tokenizer import tokenizer_from_gguf

log = logging.getLogger(__name__)

SUPPORTED_ARCHS = ("llama", "qwen2")
SHARD_BYTES = 2 << 30

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def open_gguf(path: Path) -> GGUFReader:
    try:
        return GGUFReader(path)
    except (ValueError, OSError, IndexError) as exc:
        raise ModelLoadError(f"{path} is not a readable GGUF file: {exc}") from exc


def gguf_metadata(reader: GGUFReader) -> dict[str, Any]:
    """All key/value metadata as Python values (strings, numbers, lists)."""
    return {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}


def mlx_name(gguf_name: str) -> str:
    """Map a llama.cpp tensor name to its mlx-lm (Hugging Face) name."""
    stem, _, kind = gguf_name.rpartition(".")
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{kind}"
    match = _BLOCK_RE.fullmatch(gguf_name)
    if match and match[2] in _BLOCK_NAMES:
        return f"model.layers.{match[1]}.{_BLOCK_NAMES[match[2]]}.{match[3]}"
    raise ModelLoadError(f"GGUF tensor {gguf_name!r} has no mlx-lm counterpart decide knows")


def dequantize(tensor: ReaderTensor) -> np.ndarray:
    """The tensor as float32, in numpy (row-major) shape."""
    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    try:
        values = gguf_dequantize(tensor.data, GGMLQuantizationType(tensor.tensor_type))
    except NotImplementedError as exc:
        raise ModelLoadError(f"tensor {tensor.name}: {exc}") from exc
    return np.ascontiguousarray(values, dtype=np.float32).reshape(shape)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation (rotary pairs interleaved per head -> halves)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def mlx_config(md: dict[str, Any], tensor_names: set[str]) -> dict[str, Any]:
    """config.json for mlx-lm from the `{arch}.*` metadata keys."""
    arch = md.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ModelLoadError(
            f"GGUF architecture {arch!r} is not supported (decide reads: {', '.join(SUPPORTED_ARCHS)})"
        )

    def key(name: str, default: Any = None) -> Any:
        value = md.get(f"{arch}.{name}", default)
        if isinstance(value, list):
            raise ModelLoadError(f"per-layer {arch}.{name} is not supported")
        return value

    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    config: dict[str, Any] = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(key("block_count")),
        "intermediate_size": int(key("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(key("rope.freq_base", 10000.0 if arch == "llama" else 1000000.0)),
        "max_position_embeddings": int(key("context_length", 4096)),
        "vocab_size": len(md["tokenizer.ggml.tokens"]),
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }
    _set_head_dim(config, key("attention.key_length"), arch)
    if (scaling := _rope_scaling(key)) is not None:
        config["rope_scaling"] = scaling
    if arch == "llama":
        config["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
        config["mlp_bias"] = "blk.0.ffn_gate.bias" in tensor_names
    for special in ("bos", "eos"):
        if (token_id := md.get(f"tokenizer.ggml.{special}_token_id")) is not None:
            config[f"{special}_token_id"] = int(token_id)
    return config


def _set_head_dim(config: dict[str, Any], head_dim: int | None, arch: str) -> None:
    default = config["hidden_size"] // config["num_attention_heads"]
    if head_dim is None or int(head_dim) == default:
        return
    if arch != "llama":
        raise ModelLoadError(f"{arch} with head_dim {head_dim} != hidden/heads is not supported")
    config["head_dim"] = int(head_dim)


def _rope_scaling(key: Callable[..., Any]) -> dict[str, Any] | None:
    kind = key("rope.scaling.type")
    if kind in (None, "none"):
        return None
    factor = float(key("rope.scaling.factor", 1.0))
    if kind == "linear":
        return {"type": "linear", "factor": factor}
    if kind == "yarn":
        original = int(key("rope.scaling.original_context_length", 0)) or None
        return {"type": "yarn", "factor": factor, "original_max_position_embeddings": original}
    raise ModelLoadError(f"RoPE scaling {kind!r} is not supported")


def converted_tensor(tensor: ReaderTensor, config: dict[str, Any]) -> tuple[str, np.ndarray]:
    """(mlx name, float32 array) of one GGUF tensor, llama's Q/K permutation undone."""
    w = dequantize(tensor)
    match = _BLOCK_RE.fullmatch(tensor.name)
    if config["model_type"] == "llama" and match and match[2] in ("attn_q", "attn_k"):
        n_head = config["num_attention_heads" if match[2] == "attn_q" else "num_key_value_heads"]
        w = unpermute_qk(w, n_head)
    return mlx_name(tensor.name), w


def _shard_plan(reader: GGUFReader) -> list[list[str]]:
    """GGUF tensor names grouped into shards of at most SHARD_BYTES of float32."""
    shards: list[list[str]] = [[]]
    size = 0
    for tensor in reader.tensors:
        nbytes = 4 * int(tensor.n_elements)
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(tensor.name)
        size += nbytes
    return shards


def _shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def _write_weights(reader: GGUFReader, config: dict[str, Any], dest: Path, bar: tqdm) -> None:
    plan = _shard_plan(reader)
    files = _shard_names(len(plan))
    shard_of = {name: i for i, names in enumerate(plan) for name in names}
    weight_map: dict[str, str] = {}
    pending: dict[str, np.ndarray] = {}
    current = 0
    for tensor in reader.tensors:
        if shard_of[tensor.name] != current:
            save_file(pending, str(dest / files[current]), metadata={"format": "mlx"})
            pending, current = {}, shard_of[tensor.name]
        name, w = converted_tensor(tensor, config)
        pending[name] = w
        weight_map[name] = files[current]
        bar.update(int(tensor.n_bytes))
    save_file(pending, str(dest / files[current]), metadata={"format": "mlx"})
    if len(files) > 1:
        index = {
            "metadata": {"total_size": sum(4 * int(t.n_elements) for t in reader.tensors)},
            "weight_map": weight_map,
        }
        (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _write_tokenizer(md: dict[str, Any], config: dict[str, Any], dest: Path) -> None:
    tokenizer_from_gguf(md).save(str(dest / "tokenizer.json"))
    tokens = md["tokenizer.ggml.tokens"]

    def token(key: str) -> str | None:
        token_id = md.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(token_id)] if token_id is not None and 0 <= int(token_id) < len(tokens) else None

    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": md.get("tokenizer.chat_template"),
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "pad_token": token("padding"),
        "add_bos_token": bool(md.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": min(config["max_position_embeddings"], CONTEXT_CAP),
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, ensure_ascii=False))


def convert_gguf(source: Path, dest: Path, *, progress: bool = True, label: str | None = None) -> dict[str, Any]:
    """Write the mlx-lm folder for GGUF `source` into the existing, empty folder `dest`."""
    reader = open_gguf(source)
    md = gguf_metadata(reader)
    config = mlx_config(md, {t.name for t in reader.tensors})
    for tensor in reader.tensors:  # fail on an unknown tensor before the long part
        mlx_name(tensor.name)
    total = sum(int(t.n_bytes) for t in reader.tensors)
    desc = f"Converting {label or source.name}"
    with tqdm(total=total, unit="B", unit_scale=True, desc=desc, file=sys.stderr, disable=not progress) as bar:
        _write_weights(reader, config, dest, bar)
    _write_tokenizer(md, config, dest)
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return config
