"""decide: exact answers to typed questions (yes/no, choice, score) from a local chat model."""

__version__ = "0.1.0"
