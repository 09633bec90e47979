"""The fast tier's cache folder, shared by the processes of one host (a server's workers)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from toolroute.providers._embedders.fast_tier import files


def test_two_writers_saving_at_once_leave_a_consistent_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four workers warming one catalogue cold all save the same folder at once. Another
    # writer's whole save lands between this writer's first write and its rename.
    real_replace = os.replace
    others: list[bool] = []

    def another_writer_first(
        source: str | os.PathLike[str], target: str | os.PathLike[str]
    ) -> None:
        if not others:
            others.append(True)
            other = {"a.npy": np.full(3, 2.0), "b.npy": np.full(3, 2.0)}
            files.save(tmp_path, "sha", other, 1, shipped=True)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", another_writer_first)
    mine = {"a.npy": np.full(3, 1.0), "b.npy": np.full(3, 1.0)}
    files.save(tmp_path, "sha", mine, 1, shipped=True)

    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    for name in mine:
        assert files._checked_array(tmp_path, name, manifest["sha256"]).tolist() == [1.0] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "b.npy", "manifest.json"]


def test_two_workers_fetching_the_shared_folder_at_once_both_land_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolroute._stores.redis import fast_tier

    real_replace = os.replace
    others: list[bool] = []
    fetched = {"a.npy": b"A" * 10, "b.npy": b"B" * 10}

    def another_worker_first(
        source: str | os.PathLike[str], target: str | os.PathLike[str]
    ) -> None:
        if not others:
            others.append(True)
            fast_tier._write_folder(tmp_path, fetched, b"{}")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", another_worker_first)
    fast_tier._write_folder(tmp_path, fetched, b"{}")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        **fetched,
        "manifest.json": b"{}",
    }
