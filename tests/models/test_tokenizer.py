"""ChatTokenizer: the byte-level BPE rebuilt from GGUF metadata, and chat-template rendering.

No reference tokenizer is available offline, so these tests check invariants that a wrong
tokenizer breaks (round trips, special ids, digit splitting, merges, template text), plus a
few encodings of the Qwen2 tokenizer that are well known.
"""

from __future__ import annotations

import json
from datetime import datetime

import jinja2
import pytest
from tiny_model import CHATML_TEMPLATE, tiny_vocab

from decide.errors import ModelLoadError
from decide.models import ChatTokenizer
from decide.models.tokenizer import tokenizer_from_gguf

TEXTS = [
    "Hello, world!",
    "naïve café — 日本語のテキスト 🎉👍🏽",
    "tabs\tand\nnew lines\r\n\n  indented   spaces   ",
    "numbers 1234567890, 3.14159 and -42",
    "emoji sequence 👩‍💻 and flags 🇫🇷",
    "Ελληνικά, русский, עברית, العربية",
    "it's don't we'll I'M",
    '{"answer": true, "labels": ["a", "b"]}',
    "",
]


def _tiny(pre: str) -> ChatTokenizer:
    tokens, types, merges = tiny_vocab()
    metadata = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }
    return ChatTokenizer(
        tokenizer_from_gguf(metadata), chat_template=CHATML_TEMPLATE, eos_token="<|im_end|>", bos_token="<|im_start|>"
    )


@pytest.fixture(scope="module", params=["smollm", "qwen2"])
def tiny_tok(request) -> ChatTokenizer:
    return _tiny(request.param)


def _pieces(tok: ChatTokenizer, text: str) -> list[str]:
    return [tok.backend.id_to_token(i) for i in tok.encode(text)]


# ------------------------------------------------------------------ tiny vocabulary


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(tiny_tok, text):
    assert tiny_tok.decode(tiny_tok.encode(text)) == text


def test_special_tokens_become_their_ids(tiny_tok):
    ids = tiny_tok.encode("<|im_start|>user\nhi<|im_end|>\n")
    assert ids[0] == 1 and 2 in ids
    assert tiny_tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n"
    assert tiny_tok.eos_token_id == 2


def test_encode_adds_nothing(tiny_tok):
    assert tiny_tok.encode("") == []
    assert not {0, 1, 2} & set(tiny_tok.encode("hello there"))


def test_digits_are_split_one_by_one(tiny_tok):
    # "Ġ1" is in the tiny vocabulary: only the pre-tokenizer keeps it from being used.
    assert tiny_tok.token_to_id("Ġ1") is not None
    assert _pieces(tiny_tok, " 1") == ["Ġ", "1"]
    assert _pieces(tiny_tok, "2024") == ["2", "0", "2", "4"]


def test_merges_are_applied(tiny_tok):
    assert _pieces(tiny_tok, "hello") == ["hello"]
    assert _pieces(tiny_tok, " the answer is true") == ["Ġthe", "Ġanswer", "Ġis", "Ġtrue"]


def test_encode_batch_matches_encode(tiny_tok):
    assert tiny_tok.encode_batch(TEXTS) == [tiny_tok.encode(t) for t in TEXTS]


def test_chatml_template_renders(tiny_tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    assert tiny_tok.apply_chat_template(messages) == expected
    assert tiny_tok.apply_chat_template(messages, add_generation_prompt=False) == expected.removesuffix(
        "<|im_start|>assistant\n"
    )


def test_tiny_model_tokenizer_is_the_gguf_one(tiny_model):
    assert tiny_model.tokenizer.vocab_size == len(tiny_vocab()[0])
    assert tiny_model.tokenizer.eos_token == "<|im_end|>" and tiny_model.tokenizer.bos_token == "<|im_start|>"
    assert tiny_model.tokenizer.encode("12 hello") == _tiny("smollm").encode("12 hello")


# ------------------------------------------------------------------ template environment


def _render(template: str, **kwargs) -> str:
    tok = _tiny("smollm")
    tok = ChatTokenizer(tok.backend, chat_template=template, eos_token="<|im_end|>", bos_token="<|im_start|>")
    return tok.apply_chat_template(kwargs.pop("messages", [{"role": "user", "content": "x"}]), **kwargs)


def test_template_tojson_does_not_escape():
    messages = [{"role": "user", "content": '<b>"é"</b> & more'}]
    assert _render("{{ messages[0].content | tojson }}", messages=messages) == '"<b>\\"é\\"</b> & more"'
    assert _render("{{ {'a': [1]} | tojson(indent=2) }}") == '{\n  "a": [\n    1\n  ]\n}'


def test_template_globals_and_variables():
    rendered = _render("{{ bos_token }}|{{ eos_token }}|{{ enable_thinking }}|{{ add_generation_prompt }}")
    assert rendered == "<|im_start|>|<|im_end|>|False|True"
    assert _render("{{ strftime_now('%Y') }}") == str(datetime.now().year)
    with pytest.raises(jinja2.TemplateError, match="roles must alternate"):
        _render("{{ raise_exception('roles must alternate') }}")


def test_template_whitespace_control_as_transformers():
    assert _render("{% for m in messages %}\n{{ m.role }}\n{% endfor %}") == "user\n"
    assert _render("  {% if true %}x{% endif %}") == "x"
    assert _render("{% for m in messages %}{% if loop.first %}{% break %}{% endif %}{% endfor %}ok") == "ok"


def test_template_is_sandboxed():
    with pytest.raises(jinja2.exceptions.SecurityError):
        _render("{{ messages.append(1) }}")


def test_missing_template_is_a_load_error():
    tok = ChatTokenizer(_tiny("smollm").backend, chat_template=None, eos_token="<|im_end|>")
    with pytest.raises(ModelLoadError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "x"}])


# ------------------------------------------------------------------ folders


def _folder(tmp_path, config: dict, jinja: str | None = None):
    _tiny("smollm").backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (tmp_path / "chat_template.jinja").write_text(jinja)
    return ChatTokenizer.from_folder(tmp_path)


def test_folder_tokens_in_dict_form_and_named_templates(tmp_path):
    config = {
        "eos_token": {"content": "<|im_end|>", "special": True},
        "bos_token": None,
        "chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default"}],
    }
    tok = _folder(tmp_path, config)
    assert (tok.eos_token, tok.eos_token_id, tok.bos_token, tok.chat_template) == ("<|im_end|>", 2, None, "default")


def test_folder_prefers_chat_template_jinja(tmp_path):
    tok = _folder(tmp_path, {"eos_token": "<|im_end|>", "chat_template": "old"}, jinja="new")
    assert tok.chat_template == "new"


def test_folder_eos_from_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    assert _folder(tmp_path, {}).eos_token == "<|im_end|>"


def test_folder_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        ChatTokenizer.from_folder(tmp_path)
    with pytest.raises(ModelLoadError, match="not in the vocabulary"):
        _folder(tmp_path, {"eos_token": "<|nope|>"})


def test_unsupported_gguf_tokenizer_model():
    with pytest.raises(ModelLoadError, match="llama"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"]})


# ------------------------------------------------------------------ the embedded models


@pytest.mark.smollm
def test_smollm2_vocabulary(smollm):
    tok = smollm.tokenizer
    assert [tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 2)
    for word in (" the", " and", " of", "hello", " world", " Paris", " capital", " France", " true", " false"):
        token = word.replace(" ", "Ġ")
        assert tok.token_to_id(token) is not None, word
        assert tok.encode(word) == [tok.token_to_id(token)], word
    assert len(tok.encode("hello world")) <= 3
    assert _pieces(tok, "score 2024") == ["score", "Ġ", "2", "0", "2", "4"]
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text


@pytest.mark.smollm
def test_smollm2_chat_template(smollm):
    rendered = smollm.tokenizer.apply_chat_template([{"role": "user", "content": "Hi?"}])
    assert rendered == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = smollm.tokenizer.encode(rendered)
    assert ids[0] == 1 and ids.count(2) == 2 and ids[-4:] == smollm.tokenizer.encode("<|im_start|>assistant\n")


@pytest.mark.slow
def test_qwen_known_encodings(qwen):
    tok = qwen.tokenizer
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert tok.encode("hello world") == [14990, 1879]
    assert [tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [151643, 151644, 151645]
    assert (tok.eos_token, tok.eos_token_id) == ("<|im_end|>", 151645)
    assert _pieces(tok, "12345") == ["1", "2", "3", "4", "5"]
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
    assert tok.apply_chat_template([{"role": "user", "content": "Hi?"}]) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    )
