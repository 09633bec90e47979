"""The local learning stores: what they keep, what they refuse to load, and where they live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolroute import CacheWarning, EngineConfig
from toolroute._stores.local import local_stores
from toolroute.stores import (
    LearnedExample,
    LearningCache,
    LearningStore,
    MemoryLearningStore,
    Stores,
)


def entry(digest: str, source: str = "use", text: str | None = None) -> LearnedExample:
    vector = np.arange(4, dtype=np.float32) + len(digest)
    return LearnedExample(
        digest=digest, vector=vector / np.linalg.norm(vector), source=source, text=text
    )


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LearningStore:
    return MemoryLearningStore() if request.param == "memory" else LearningCache(tmp_path)


def test_a_store_keeps_each_tools_entries_per_identity_and_forgets_them(
    store: LearningStore,
) -> None:
    assert isinstance(store, LearningStore)
    store.save("model", "a", [entry("1"), entry("22", "example")])
    store.save("model", "b", [entry("3")])
    store.save("other", "a", [entry("4")])
    loaded = store.load("model")
    assert sorted(loaded) == ["a", "b"]
    assert [(e.digest, e.source, e.text) for e in loaded["a"]] == [
        ("1", "use", None),
        ("22", "example", None),
    ]
    assert np.allclose(loaded["a"][0].vector, entry("1").vector)
    store.save("model", "b", [])  # no entries: the tool has none
    assert sorted(store.load("model")) == ["a"]
    store.forget("model", ["a", "never-stored"])
    assert store.load("model") == {}
    assert sorted(store.load("other")) == ["a"]
    store.forget("other")
    assert store.load("other") == {}


def test_text_is_stored_only_when_an_entry_carries_it(store: LearningStore) -> None:
    store.save("model", "a", [entry("1", text="book a flight"), entry("2")])
    assert [e.text for e in store.load("model")["a"]] == ["book a flight", None]
    store.save("model", "a", [entry("2")])
    assert [e.text for e in store.load("model")["a"]] == [None]


def test_a_damaged_or_misplaced_file_is_ignored_with_a_warning(tmp_path: Path) -> None:
    store = LearningCache(tmp_path)
    store.save("model", "a", [entry("1")])
    store.save("model", "b", [entry("2")])
    files = sorted(store.folder_for("model").glob("*.npz"))
    files[0].write_bytes(b"not a numpy file")
    with pytest.warns(CacheWarning, match="does not load"):
        loaded = store.load("model")
    assert len(loaded) == 1
    # A file copied under another identity's folder belongs to that identity only.
    other = store.folder_for("other")
    other.mkdir()
    (other / files[1].name).write_bytes(files[1].read_bytes())
    with pytest.warns(CacheWarning, match="belongs to embedder 'model'"):
        assert store.load("other") == {}


def test_a_truncated_file_is_ignored_with_a_warning_and_the_others_load(tmp_path: Path) -> None:
    # A crash or a full disk mid-copy leaves a file that starts as a zip and stops short;
    # it used to fail the whole load, so every tool's evidence was lost.
    store = LearningCache(tmp_path)
    store.save("model", "a", [entry("1")])
    store.save("model", "b", [entry("2")])
    damaged = sorted(store.folder_for("model").glob("*.npz"))[0]
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    with pytest.warns(CacheWarning, match="does not load"):
        loaded = store.load("model")
    assert len(loaded) == 1


def test_an_unwritable_directory_costs_only_the_persistence(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    store = LearningCache(blocker)
    with pytest.warns(CacheWarning, match="cannot write learning file"):
        store.save("model", "a", [entry("1")])
    assert store.load("model") == {}


def test_the_engine_learns_on_disk_where_it_caches_and_in_memory_without_a_cache(
    tmp_path: Path,
) -> None:
    on_disk = local_stores(EngineConfig(cache_dir=str(tmp_path))).learning
    assert isinstance(on_disk, LearningCache)
    assert on_disk.directory == tmp_path / "learning"
    assert isinstance(local_stores(EngineConfig(cache=False)).learning, MemoryLearningStore)
    given = MemoryLearningStore()
    assert local_stores(EngineConfig(cache=False), Stores(learning=given)).learning is given
