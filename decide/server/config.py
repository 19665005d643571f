"""Server settings: one small dataclass, read from the environment by `ServerConfig.from_env`.

Every limit is a clear 4xx when crossed; the defaults are listed in README.md ("Deployment").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from .. import limits

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
_SPECIAL = ("api_key", "aliases", "model")  # strings where empty means unset
_ZERO_ALLOWED = ("DECIDE_WRITING_WAIT_S",)  # numbers where 0 is a setting (never wait), not a mistake


@dataclass(frozen=True)
class ServerConfig:
    """Every field has an environment variable (in brackets); unset means the default."""

    # [DECIDE_API_KEY] the one API key for both protocols; None or empty = auth off (the header is ignored).
    api_key: str | None = field(default=None, repr=False)
    # [DECIDE_MAX_BODY_BYTES] cap on a request body, checked before and after zstd decoding (413 beyond).
    max_body_bytes: int = limits.MAX_BODY_BYTES
    # [DECIDE_STRICT_MODELS] reject model names other than the served id, jev-latest, gpt-6-luna and the aliases.
    strict_models: bool = False
    # [DECIDE_MODEL_ALIASES] extra accepted model names, comma separated; all answer with the served model.
    aliases: tuple[str, ...] = ()
    # [DECIDE_FETCH_REMOTE_IMAGES] read http(s) image URLs (10 s, 20 MiB); off = such URLs are a 400.
    fetch_remote_images: bool = False
    # [DECIDE_MAX_QUESTIONS] questions per request (OpenAI never more than 400).
    max_questions: int = limits.MAX_QUESTIONS
    # [DECIDE_MAX_PENDING] requests waiting for the engine; one more gets an immediate 429 + Retry-After.
    max_pending: int = 32
    # [DECIDE_MODEL] the model create_app loads when it is given no decider (None = Decider.load's default).
    model: str | None = None
    # [DECIDE_DEADLINE_S] longest wait in the queue; a request still queued then is dropped (503 + Retry-After).
    # An OpenAI SDK's own timeout (x-stainless-read-timeout) shortens it.
    deadline_s: float = 60.0
    # [DECIDE_WRITING_WAIT_S] how long a request waits for the examples the model writes for its new questions (the
    # default calibration; minutes on the 1.5B model) before it is answered without them; they are written between
    # requests meanwhile. An OpenAI SDK's own timeout (x-stainless-read-timeout), less 5 s, lengthens it.
    writing_wait_s: float = 2.0
    # [DECIDE_BATCH_MAX_TOKENS] input tokens merged into one decide_batch call (a larger request runs alone).
    batch_max_tokens: int = 8192
    # [DECIDE_BATCH_MAX_QUESTIONS] questions merged into one decide_batch call.
    batch_max_questions: int = 64
    # [DECIDE_MAX_REQUEST_TOKENS] input tokens of one request (usage.input_tokens); more is a 400 before compute.
    max_request_tokens: int = limits.MAX_REQUEST_TOKENS
    # [DECIDE_MAX_OPTIONS] choices or levels per question (the protocols allow at most 255 and 10).
    max_options: int = limits.MAX_OPTIONS
    # [DECIDE_MAX_IMAGES] images per request.
    max_images: int = limits.MAX_IMAGES
    # [DECIDE_MAX_JSON_DEPTH] nesting depth of a JSON body (System One states may nest 64 levels themselves).
    max_json_depth: int = limits.MAX_JSON_DEPTH
    # [DECIDE_MAX_HEADER_BYTES] total size of the request headers (names + values); 431 beyond.
    max_header_bytes: int = 32 * 1024
    # [DECIDE_MAX_HEADERS] number of request headers; 431 beyond.
    max_headers: int = 100
    # [DECIDE_ALLOWED_HOSTS] Host names accepted besides localhost, IP literals and the bind host ("*": any).
    allowed_hosts: tuple[str, ...] = ()
    # [DECIDE_ALLOWED_ORIGINS] browser origins (scheme://host[:port]) allowed besides localhost pages ("*": any).
    allowed_origins: tuple[str, ...] = ()
    # [DECIDE_BIND] the address gunicorn binds (its host is an accepted Host name).
    bind: str = "127.0.0.1:8000"
    # [DECIDE_PREFIX_CACHE_BYTES] prefix-cache budget of the loaded Decider (None = the core's default).
    prefix_cache_bytes: int | None = None
    # [DECIDE_MLX_CACHE_BYTES] cap on MLX's buffer cache, so memory stays flat under varied requests. Below a
    # request's working set, buffers go back to malloc and come back page-faulted: at 256 MiB the 1.5B model's
    # ticket (890 MiB peak) took 0.3 s longer than in process.
    mlx_cache_bytes: int = 1 << 30
    # [DECIDE_TUNE_MALLOC] two malloc arenas (glibc), so RSS does not creep with the number of threads, and blocks below
    # 1 GiB from the heap (above 32 MiB glibc maps each block anew, page faults included: see server/memory.py).
    tune_malloc: bool = True
    # [DECIDE_BACKGROUND_LOAD] load the model in the engine thread; /health says "loading" until it is ready.
    background_load: bool = True
    # [DECIDE_EXIT_ON_LOAD_ERROR] a model that fails to load ends the process (gunicorn then stops, with the reason).
    exit_on_load_error: bool = True
    # [DECIDE_RETRY_AFTER_S] the Retry-After of 429 and 503 answers.
    retry_after_s: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerConfig:
        env = os.environ if env is None else env
        values: dict = {}
        for f in fields(cls):
            name, raw = "DECIDE_" + f.name.upper(), env.get("DECIDE_" + f.name.upper())
            if f.name in _SPECIAL or raw is None or (not raw.strip() and not isinstance(f.default, bool)):
                continue
            values[f.name] = _parse(name, raw, f.default)
        values["api_key"] = env.get("DECIDE_API_KEY") or None
        values["aliases"] = _names(env.get("DECIDE_MODEL_ALIASES", ""))
        values["model"] = env.get("DECIDE_MODEL") or None
        return cls(**values)

    @property
    def bind_host(self) -> str:
        """The host part of `bind` ("127.0.0.1:8000" → "127.0.0.1", "[::1]:80" → "[::1]")."""
        host = self.bind.removeprefix("tcp://")
        if host.startswith("unix:"):
            return ""
        if host.startswith("["):
            return host[: host.find("]") + 1]
        return host.rsplit(":", 1)[0] if ":" in host else host


def _parse(name: str, raw: str, default: object) -> object:
    """One environment value, typed like the field's default."""
    if isinstance(default, bool):
        if raw.strip().lower() not in (*_TRUE, *_FALSE):
            raise ValueError(f"{name} must be one of {'/'.join(_TRUE[1:])} or {'/'.join(_FALSE[2:])}, got {raw!r}")
        return raw.strip().lower() in _TRUE
    if isinstance(default, tuple):
        return _names(raw)
    if isinstance(default, float):
        return _number(name, raw, float)
    if isinstance(default, int) or default is None:
        return _number(name, raw, int)
    return raw.strip()


def switched_on(name: str, env: Mapping[str, str] = os.environ) -> bool:
    """An on-by-default switch outside ServerConfig (the CLI's): off only for one of the false words."""
    return env.get(name, "on").strip().lower() not in _FALSE


def _names(raw: str) -> tuple[str, ...]:
    return tuple(a.strip() for a in raw.split(",") if a.strip())


def _number(name: str, raw: str, kind: type) -> int | float:
    try:
        value = kind(raw.strip())
    except ValueError:
        raise ValueError(f"{name} must be a positive {'integer' if kind is int else 'number'}, got {raw!r}") from None
    if name in _ZERO_ALLOWED and value == 0:
        return value
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value
