"""Profiles: what `decide fit` learned per question, stored with the fingerprint of the model it used.

    PROFILE_DIR/profile.json   model id, weights fingerprint, one entry per question (key, method, bias,
                               the demonstrations its prompt shows)
    PROFILE_DIR/<key>.npz      a readout's arrays (mean, std, weights, bias)

A question is matched by its key: a hash of its kind, instructions and options (values and
descriptions), never its id. Questions without an entry are answered as without a profile.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DecideError
from ..prompts import Demonstration
from ..request import Question
from .fitting import Bias, Readout, model_log_probs

PROFILE_FILE = "profile.json"
# 5: demonstrations as a series; 4: each with its question block (not read if it shows any); 3: a readout
# names its layers; 2: one layer; 1: the last layer's state
FORMAT = 5


class ProfileError(DecideError):
    """A profile that cannot be used: missing, unreadable, or fitted on other weights."""


@functools.lru_cache(maxsize=4096)  # asked per question of every request: for its prompt, its parts, its answer
def question_key(q: Question) -> str:
    spec = [q.kind, q.instructions, [[o.value, o.description] for o in q.options]]
    return hashlib.sha256(json.dumps(spec, ensure_ascii=False).encode()).hexdigest()[:24]


def model_fingerprint(loaded) -> str:
    """A hash of the weights: from the conversion manifest's file hashes when there is one, else of the files."""
    folder = Path(loaded.source)
    manifest = folder / "manifest.json"
    digest = hashlib.sha256()
    if manifest.exists():
        files = json.loads(manifest.read_text())["files"]
        for name in sorted(files):
            digest.update(f"{name}:{files[name]['sha256']}\n".encode())
    else:
        for path in sorted(folder.glob("*.safetensors")) + [folder / "config.json"]:
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Entry:
    """One question's fit: `method` is the readout used when the hidden state is at hand. The fit was made
    on prompts that show `demonstrations`, so they are shown wherever it answers."""

    instructions: str
    method: str  # "bias" or "readout"
    bias: Bias
    readout: Readout | None = None
    demonstrations: tuple[Demonstration, ...] = ()

    @classmethod
    def unfitted(cls, q: Question, demonstrations: tuple[Demonstration, ...]) -> Entry:
        """The model's own answers, asked after `demonstrations` (what `decide fit` scores its labels with)."""
        return cls(q.instructions, "bias", Bias(1.0, np.zeros(len(q.options))), None, demonstrations)

    def probabilities(self, log_likelihoods, hidden: dict[int, np.ndarray] | None) -> np.ndarray:
        log_probs = model_log_probs(np.asarray([log_likelihoods]))
        state = self.readout.state(hidden) if self.method == "readout" and self.readout and hidden else None
        if state is not None:
            return self.readout.probabilities(np.asarray(state)[None], log_probs)[0]
        return self.bias.probabilities(log_probs)[0]


@dataclass
class Profile:
    model_id: str
    fingerprint: str
    entries: dict[str, Entry] = field(default_factory=dict)

    def entry(self, q: Question) -> Entry | None:
        return self.entries.get(question_key(q))

    def demonstrations(self, q: Question) -> tuple[Demonstration, ...]:
        entry = self.entry(q)
        return entry.demonstrations if entry else ()

    @property
    def shows_demonstrations(self) -> bool:
        return any(e.demonstrations for e in self.entries.values())

    def check_model(self, loaded) -> None:
        found = model_fingerprint(loaded)
        if found != self.fingerprint:
            raise ProfileError(
                f"this profile was fitted on model {self.model_id} (weights {self.fingerprint}), not on "
                f"{loaded.model_id} (weights {found}); fit it again with `decide fit --model {loaded.model_id}` "
                "or serve the model it was fitted on"
            )

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        questions = {}
        for key, e in self.entries.items():
            questions[key] = {
                "instructions": e.instructions,
                "method": e.method,
                "scale": e.bias.scale,
                "bias": e.bias.bias.tolist(),
                "demonstrations": [{"input": d.input, "option": d.option} for d in e.demonstrations],
            }
            if e.readout is not None:
                r = e.readout
                np.savez(
                    folder / f"{key}.npz",
                    mean=r.mean,
                    std=r.std,
                    weights=r.weights,
                    bias=r.bias,
                    l2=r.l2,
                    layers=np.asarray(r.layers, dtype=np.int64),
                )
        body = {"format": FORMAT, "model": self.model_id, "fingerprint": self.fingerprint, "questions": questions}
        (folder / PROFILE_FILE).write_text(json.dumps(body, indent=2, ensure_ascii=False))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Profile:
        folder = Path(folder)
        try:
            body = json.loads((folder / PROFILE_FILE).read_text())
            if body.get("format", 1) > FORMAT:
                raise ProfileError(
                    f"the profile in {folder} has format {body['format']}, from a newer decide (this one reads "
                    f"up to {FORMAT}); upgrade decide or fit it again"
                )
            if body.get("format", 1) == 4 and any(q.get("demonstrations") for q in body["questions"].values()):
                raise ProfileError(
                    f"the profile in {folder} (format 4) was fitted on demonstrations laid out as this decide no "
                    "longer shows them; fit it again with `decide fit`"
                )
            entries = {key: _entry(folder, key, q) for key, q in body["questions"].items()}
            return cls(body["model"], body["fingerprint"], entries)
        except FileNotFoundError as e:
            raise ProfileError(
                f"no profile in {folder}: {e.filename} is missing; create one with `decide fit`"
            ) from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ProfileError(f"cannot read the profile in {folder}: {e!r}; fit it again with `decide fit`") from None


def _entry(folder: Path, key: str, q: dict) -> Entry:
    readout = None
    if (folder / f"{key}.npz").exists():
        with np.load(folder / f"{key}.npz") as z:
            readout = Readout(z["mean"], z["std"], z["weights"], z["bias"], float(z["l2"]), _layers(z))
    shown = tuple(Demonstration(str(d["input"]), int(d["option"])) for d in q.get("demonstrations", ()))
    if any(not 0 <= d.option < len(q["bias"]) for d in shown):
        raise ValueError(f"question {key}: a demonstration's option is not one of its {len(q['bias'])}")
    return Entry(q["instructions"], q["method"], Bias(float(q["scale"]), np.asarray(q["bias"], float)), readout, shown)


def _layers(z) -> tuple[int, ...]:
    """A readout's layers from its arrays: `layers` (format 3), `layer` (format 2, -1 the last), or the last."""
    if "layers" in z.files:
        return tuple(int(layer) for layer in z["layers"])
    if "layer" in z.files and int(z["layer"]) >= 0:
        return (int(z["layer"]),)
    return ()
