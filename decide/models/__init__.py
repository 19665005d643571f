"""Model loading: embedded aliases, mlx-lm folders, GGUF files, the local Hugging Face cache."""

from decide.models.cache import default_cache_dir
from decide.models.embedded import EMBEDDED
from decide.models.loader import LoadedModel, load_model
from decide.models.sources import DEFAULT_MODEL
from decide.models.tokenizer import ChatTokenizer

__all__ = ["DEFAULT_MODEL", "EMBEDDED", "ChatTokenizer", "LoadedModel", "default_cache_dir", "load_model"]
