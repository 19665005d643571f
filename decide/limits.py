"""Every fixed size limit, stated once: the parsers, the request model, the server config and the
OpenAPI document all read them from here.

Protocol maxima are what a client may send; the server's own caps (ServerConfig) default to them
and may only lower them.
"""

from __future__ import annotations

# ---- the request model (any protocol)
MAX_OPTIONS = 255  # options of one question
MAX_QUESTIONS = 400  # questions of one request
MAX_TEXT = 1_048_576  # characters of one text field
MAX_IMAGES = 128  # images of one request
CONTEXT_CAP = 32_768  # tokens of context used, whatever a model's config claims

# ---- OpenAI Decisions
OPENAI_MIN_OPTIONS = 2  # choices or levels of one question
MAX_ID_LENGTH = 64  # prompt_cache_key, safety_identifier
JSON_MAX_DEPTH = 32  # an input_json part
JSON_MAX_VALUES = 10_000
JSON_MAX_BYTES = 256 * 1024

# ---- TypeSafe System One
SYSTEMONE_MAX_LEVELS = 10  # score criteria
SYSTEMONE_MAX_DEPTH = 64  # a text given as a JSON object or array
MAX_PLACEHOLDER_BYTES = 1024  # an asset key

# ---- the HTTP body (both protocols)
MAX_BODY_BYTES = 64 * 1024 * 1024  # before and after Content-Encoding is undone
MAX_REQUEST_TOKENS = 1 << 20  # input tokens of one request
MAX_JSON_DEPTH = 100  # nesting of a whole body
