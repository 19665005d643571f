"""ChatTokenizer: a `tokenizers.Tokenizer` plus the model's chat template, without transformers.

Built from an mlx-lm/Hugging Face folder (tokenizer.json, tokenizer_config.json or
chat_template.jinja), or rebuilt from GGUF metadata as a gpt2-style byte-level BPE.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from decide.errors import ModelLoadError

log = logging.getLogger(__name__)

# GGUF token types (llama.cpp's llama_token_type).
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4

# Split patterns of the pre-tokenizers llama.cpp names in `tokenizer.ggml.pre`.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# Pre-tokenizers that split every digit on its own, then apply the GPT-2 regex.
_DIGIT_SPLITTING = {"smollm", "starcoder", "refact", "codeshell"}
_GPT2_LIKE = {"default", "gpt2", "gpt-2"}


class ChatTokenizer:
    """Text <-> token ids for one model, and its chat template.

    `encode` never adds BOS/EOS; special-token strings in the text (e.g. "<|im_start|>")
    become their ids, exactly as the chat template's output is meant to be read.
    """

    def __init__(
        self,
        backend: Tokenizer,
        *,
        chat_template: str | None,
        eos_token: str | None,
        bos_token: str | None = None,
    ) -> None:
        self.backend = backend
        self.chat_template = chat_template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.eos_token_id = backend.token_to_id(eos_token) if eos_token else None
        if eos_token and self.eos_token_id is None:
            raise ModelLoadError(f"the EOS token {eos_token!r} is not in the vocabulary")

    @classmethod
    def from_folder(cls, folder: str | Path) -> ChatTokenizer:
        """Load tokenizer.json and the chat template of an mlx-lm / Hugging Face model folder."""
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ModelLoadError(f"{folder} has no tokenizer.json (decide does not read slow tokenizers)")
        backend = Tokenizer.from_file(str(path))
        config = _read_json(folder / "tokenizer_config.json")
        eos = _token_text(config.get("eos_token")) or _configured_token(folder, backend, "eos_token_id")
        bos = _token_text(config.get("bos_token")) or _configured_token(folder, backend, "bos_token_id")
        return cls(backend, chat_template=_folder_template(folder, config), eos_token=eos, bos_token=bos)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        """Render `messages` ({"role", "content"} dicts) as the model's prompt text."""
        return self._template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            enable_thinking=False,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    @cached_property
    def _template(self) -> jinja2.Template:
        if not self.chat_template:
            raise ModelLoadError("this model has no chat template; decide needs a chat (instruct) model")
        return _template_env().from_string(self.chat_template)


def tokenizer_from_gguf(metadata: Mapping[str, Any]) -> Tokenizer:
    """Rebuild a gpt2-style byte-level BPE from `tokenizer.ggml.*` metadata."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE, 'gpt2')")
    tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    types = list(metadata.get("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    pre = metadata.get("tokenizer.ggml.pre", "default")
    _set_pre_tokenizer(tokenizer, pre)
    tokenizer.decoder = decoders.ByteLevel()
    special = [
        AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types, strict=True) if k == TOKEN_CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, k in zip(tokens, types, strict=True)
        if k == TOKEN_USER_DEFINED
    ]
    tokenizer.add_special_tokens(special)
    tokenizer.add_tokens(user)
    return tokenizer


def _set_pre_tokenizer(tokenizer: Tokenizer, pre: str) -> None:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=True)
    if pre == "qwen2":
        tokenizer.normalizer = normalizers.NFC()
        split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False)
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    elif pre in ("llama-bpe", "llama3"):
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False)
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    elif pre in _DIGIT_SPLITTING:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2])
    else:
        if pre not in _GPT2_LIKE:
            log.warning("GGUF pre-tokenizer %r is not known to decide; using the GPT-2 split", pre)
        tokenizer.pre_tokenizer = gpt2


def _template_env() -> ImmutableSandboxedEnvironment:
    """A sandbox configured as transformers renders chat templates."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False) -> str:
    # Jinja's own tojson HTML-escapes <, >, & and ' which templates do not expect.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json spells a token as a string or as {"content": ...}."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _configured_token(folder: Path, backend: Tokenizer, key: str) -> str | None:
    """Fall back to an id in generation_config.json or config.json."""
    for name in ("generation_config.json", "config.json"):
        value = _read_json(folder / name).get(key)
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, int):
            return backend.id_to_token(value)
    return None


def _folder_template(folder: Path, config: Mapping[str, Any]) -> str | None:
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default") or next(iter(named.values()), None)
    if template is None and (folder / "chat_template.json").is_file():
        template = _read_json(folder / "chat_template.json").get("chat_template")
    return template if isinstance(template, str) else None
