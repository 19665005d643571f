"""Profile files: a readout keeps its layers; format 2 (one layer) and 1 (the last) still load; newer is refused."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from decide.prompts import Demonstration
from decide.quality.fitting import Bias, Readout
from decide.quality.profile import PROFILE_FILE, Entry, Profile, ProfileError

D, K = 8, 3


def readout(layers: tuple[int, ...], seed: int = 0) -> Readout:
    rng = np.random.default_rng(seed)
    d = D * max(1, len(layers))
    return Readout(
        rng.normal(size=d), rng.random(d) + 0.5, rng.normal(size=(d + K, K)), rng.normal(size=K), 0.1, layers
    )


def saved(tmp_path, layers: tuple[int, ...]):
    profile = Profile("m", "f" * 32, {"key": Entry("Which?", "readout", Bias(1.0, np.zeros(K)), readout(layers))})
    return profile, profile.save(tmp_path)


def rewritten(folder, format: int, **arrays) -> Entry:
    """The saved profile loaded after its file says `format` and its readout's layer arrays are `arrays`."""
    body = json.loads((folder / PROFILE_FILE).read_text())
    body["format"] = format
    (folder / PROFILE_FILE).write_text(json.dumps(body))
    with np.load(folder / "key.npz") as z:
        kept = {name: z[name] for name in z.files if name not in ("layer", "layers")}
    np.savez(folder / "key.npz", **kept, **arrays)
    return Profile.load(folder).entries["key"]


def states(seed: int = 1) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {layer: rng.normal(size=D) for layer in (2, 5, 7)}


def test_a_readout_round_trips_with_its_layers(tmp_path):
    profile, folder = saved(tmp_path, (2, 7))
    loaded = Profile.load(folder).entries["key"]
    assert loaded.readout.layers == (2, 7)
    ll, h = np.array([0.0, -1.0, -3.0]), states()
    np.testing.assert_allclose(loaded.probabilities(ll, h), profile.entries["key"].probabilities(ll, h))
    log_probs = np.log(np.exp(ll) / np.exp(ll).sum())[None]
    want = readout((2, 7)).probabilities(np.concatenate([h[2], h[7]])[None], log_probs)[0]
    np.testing.assert_allclose(loaded.probabilities(ll, h), want)
    assert not np.allclose(loaded.probabilities(ll, h), loaded.probabilities(ll, {2: h[7], 7: h[2]}))


def test_a_readout_missing_one_of_its_layers_answers_with_the_bias(tmp_path):
    _, folder = saved(tmp_path, (2, 7))
    entry = Profile.load(folder).entries["key"]
    ll, h = np.array([0.0, -1.0, -3.0]), states()
    want = entry.bias.probabilities(np.log(np.exp(ll) / np.exp(ll).sum())[None])[0]
    np.testing.assert_allclose(entry.probabilities(ll, {2: h[2], 5: h[5]}), want)


def test_a_format_2_profile_reads_its_one_layer(tmp_path):
    _, folder = saved(tmp_path, (5,))
    entry = rewritten(folder, 2, layer=np.int64(5))
    assert entry.readout.layers == (5,)
    ll, h = np.array([0.0, -1.0, -3.0]), states()
    np.testing.assert_allclose(entry.probabilities(ll, h), entry.probabilities(ll, {5: h[5]}))
    assert rewritten(folder, 2, layer=np.int64(-1)).readout.layers == ()


def test_a_format_1_profile_reads_the_last_layer(tmp_path):
    _, folder = saved(tmp_path, (5,))
    entry = rewritten(folder, 1)
    assert entry.readout.layers == ()
    ll, h = np.array([0.0, -1.0, -3.0]), states()
    np.testing.assert_allclose(entry.probabilities(ll, h), entry.probabilities(ll, {7: h[7]}))
    assert not np.allclose(entry.probabilities(ll, h), entry.probabilities(ll, {7: h[5]}))


def test_a_profile_of_a_newer_format_is_refused(tmp_path):
    _, folder = saved(tmp_path, (5,))
    body = json.loads((folder / PROFILE_FILE).read_text())
    body["format"] = 99
    (folder / PROFILE_FILE).write_text(json.dumps(body))
    with pytest.raises(ProfileError, match="format 99, from a newer decide"):
        Profile.load(folder)


def test_a_format_4_profile_loads_unless_it_shows_demonstrations(tmp_path):
    """Format 4 showed each demonstration with its own question block: its fits do not hold for a series."""
    shown = Entry("Which?", "bias", Bias(1.0, np.zeros(K)), None, (Demonstration("hi", 1),))
    for entries, refused in (({"key": shown}, True), ({"key": replace(shown, demonstrations=())}, False)):
        folder = Profile("m", "f" * 32, entries).save(tmp_path / str(refused))
        body = json.loads((folder / PROFILE_FILE).read_text())
        (folder / PROFILE_FILE).write_text(json.dumps({**body, "format": 4}))
        if refused:
            with pytest.raises(ProfileError, match="format 4.*fit it again"):
                Profile.load(folder)
        else:
            assert Profile.load(folder).entries["key"].demonstrations == ()
