"""Profile files: a readout keeps its layer; a format-1 profile reads the last layer; a newer format is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from decide.quality.fitting import Bias, Readout
from decide.quality.profile import PROFILE_FILE, Entry, Profile, ProfileError

D, K = 8, 3


def readout(layer: int | None, seed: int = 0) -> Readout:
    rng = np.random.default_rng(seed)
    return Readout(rng.normal(size=D), rng.random(D) + 0.5, rng.normal(size=(D + K, K)), rng.normal(size=K), 0.1, layer)


def saved(tmp_path, layer: int | None):
    profile = Profile("m", "f" * 32, {"key": Entry("Which?", "readout", Bias(1.0, np.zeros(K)), readout(layer))})
    return profile, profile.save(tmp_path)


def states(seed: int = 1) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {layer: rng.normal(size=D) for layer in (2, 5, 7)}


def test_a_readout_round_trips_with_its_layer(tmp_path):
    profile, folder = saved(tmp_path, 5)
    loaded = Profile.load(folder).entries["key"]
    assert loaded.readout.layer == 5
    ll, h = np.array([0.0, -1.0, -3.0]), states()
    np.testing.assert_allclose(loaded.probabilities(ll, h), profile.entries["key"].probabilities(ll, h))
    want = readout(5).probabilities(h[5][None], np.log(np.exp(ll) / np.exp(ll).sum())[None])[0]
    np.testing.assert_allclose(loaded.probabilities(ll, h), want)


def test_a_format_1_profile_reads_the_last_layer(tmp_path):
    _, folder = saved(tmp_path, 5)
    body = json.loads((folder / PROFILE_FILE).read_text())
    body["format"] = 1
    (folder / PROFILE_FILE).write_text(json.dumps(body))
    with np.load(folder / "key.npz") as z:
        arrays = {name: z[name] for name in z.files if name != "layer"}
    np.savez(folder / "key.npz", **arrays)
    entry = Profile.load(folder).entries["key"]
    assert entry.readout.layer is None
    ll, h = np.array([0.0, -1.0, -3.0]), states()
    np.testing.assert_allclose(entry.probabilities(ll, h), entry.probabilities(ll, {7: h[7]}))
    assert not np.allclose(entry.probabilities(ll, h), entry.probabilities(ll, {7: h[5]}))


def test_a_profile_of_a_newer_format_is_refused(tmp_path):
    _, folder = saved(tmp_path, 5)
    body = json.loads((folder / PROFILE_FILE).read_text())
    body["format"] = 99
    (folder / PROFILE_FILE).write_text(json.dumps(body))
    with pytest.raises(ProfileError, match="format 99, from a newer decide"):
        Profile.load(folder)
