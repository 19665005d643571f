"""Server settings: one small dataclass, read from the environment by `ServerConfig.from_env`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..wire.common import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUESTIONS

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class ServerConfig:
    """Every field has an environment variable (in brackets); unset means the default."""

    # [DECIDE_API_KEY] the one API key for both protocols; None or empty = auth off (the header is ignored).
    api_key: str | None = field(default=None, repr=False)
    # [DECIDE_MAX_BODY_BYTES] cap on a request body, checked before and after zstd decoding (413 beyond).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # [DECIDE_STRICT_MODELS] reject model names other than the served id, jev-latest, gpt-6-luna and the aliases.
    strict_models: bool = False
    # [DECIDE_MODEL_ALIASES] extra accepted model names, comma separated; all answer with the served model.
    aliases: tuple[str, ...] = ()
    # [DECIDE_FETCH_REMOTE_IMAGES] read http(s) image URLs (10 s, 20 MiB); off = such URLs are a 400.
    fetch_remote_images: bool = False
    # [DECIDE_MAX_QUESTIONS] questions per request (OpenAI never more than 400).
    max_questions: int = DEFAULT_MAX_QUESTIONS
    # [DECIDE_MAX_PENDING] requests admitted to the model at once; more get an immediate 429 + Retry-After.
    max_pending: int = 32
    # [DECIDE_MODEL] the model create_app loads when it is given no decider (None = Decider.load's default).
    model: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerConfig:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            api_key=env.get("DECIDE_API_KEY") or None,
            max_body_bytes=_int(env, "DECIDE_MAX_BODY_BYTES", d.max_body_bytes),
            strict_models=_bool(env, "DECIDE_STRICT_MODELS", d.strict_models),
            aliases=tuple(a.strip() for a in env.get("DECIDE_MODEL_ALIASES", "").split(",") if a.strip()),
            fetch_remote_images=_bool(env, "DECIDE_FETCH_REMOTE_IMAGES", d.fetch_remote_images),
            max_questions=_int(env, "DECIDE_MAX_QUESTIONS", d.max_questions),
            max_pending=_int(env, "DECIDE_MAX_PENDING", d.max_pending),
            model=env.get("DECIDE_MODEL") or None,
        )


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ValueError(f"{name} must be one of {'/'.join(_TRUE[1:])} or {'/'.join(_FALSE[2:])}, got {raw!r}")
