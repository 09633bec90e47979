"""The on-disk embedding cache: round trips, damage of every kind, concurrency."""

from __future__ import annotations

import hashlib
import multiprocessing
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from fs_permissions import permission_bits_enforced
from hypothesis import given, settings
from hypothesis import strategies as st

from toolroute._stores.embedding_cache import (
    CacheWarning,
    EmbeddingCache,
    decode_table,
    default_cache_dir,
    encode_table,
    text_key,
)

IDENT = "fake-embedder:0123456789abcdef"
DIM = 8


def vec_for(text: str, dim: int = DIM) -> np.ndarray:
    """A deterministic float32 vector per text, so any wrong row is detectable."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


def vecs_for(texts: list[str], dim: int = DIM) -> np.ndarray:
    return np.stack([vec_for(t, dim) for t in texts]) if texts else np.zeros((0, dim), np.float32)


def filled_cache(directory: Path, texts: list[str]) -> EmbeddingCache:
    cache = EmbeddingCache(directory)
    cache.put_many(IDENT, texts, vecs_for(texts))
    return cache


TEXTS = ["alpha", "beta tool: does beta things", "", "ünïcödé ✓", "gamma"]


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    filled_cache(tmp_path, TEXTS)
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, TEXTS)
    assert found.all()
    assert vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, vecs_for(TEXTS))


def test_missing_directory_or_file_reads_as_empty_without_warning(tmp_path: Path) -> None:
    vectors, found = EmbeddingCache(tmp_path / "nope").get_many(IDENT, DIM, TEXTS)
    assert vectors.shape == (len(TEXTS), DIM)
    assert not found.any()
    assert not vectors.any()


def test_empty_lookup_and_empty_put(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.put_many(IDENT, [], np.zeros((0, DIM), np.float32))
    vectors, found = cache.get_many(IDENT, DIM, [])
    assert vectors.shape == (0, DIM)
    assert found.shape == (0,)


def test_only_changed_texts_are_missing_after_a_change(tmp_path: Path) -> None:
    filled_cache(tmp_path, TEXTS)
    changed = [*TEXTS[:2], "beta tool: does beta things better", *TEXTS[3:], "delta"]
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, changed)
    assert found.tolist() == [True, True, False, True, True, False]
    np.testing.assert_array_equal(vectors[found], vecs_for(changed)[found])
    assert not vectors[~found].any()


def test_identities_are_isolated_and_odd_names_stay_in_the_directory(tmp_path: Path) -> None:
    cache = filled_cache(tmp_path, TEXTS)
    odd = "../../etc/passwd\x00:*?<>|"
    cache.put_many(odd, ["alpha"], np.ones((1, DIM), np.float32))
    assert cache.path_for(odd).parent == tmp_path
    assert cache.path_for(odd).exists()
    assert EmbeddingCache(tmp_path).get_many(odd, DIM, ["alpha"])[0][0].tolist() == [1.0] * DIM
    assert not EmbeddingCache(tmp_path).get_many("other", DIM, TEXTS)[1].any()


def test_writers_sharing_an_identity_merge_rather_than_evict(tmp_path: Path) -> None:
    first, second = EmbeddingCache(tmp_path), EmbeddingCache(tmp_path)
    first.put_many(IDENT, ["a", "b"], vecs_for(["a", "b"]))
    second.put_many(IDENT, ["c"], vecs_for(["c"]))
    first.put_many(IDENT, ["d"], vecs_for(["d"]))
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, ["a", "b", "c", "d"])
    assert found.all()
    np.testing.assert_array_equal(vectors, vecs_for(["a", "b", "c", "d"]))


def test_rewriting_a_text_replaces_its_vector(tmp_path: Path) -> None:
    cache = filled_cache(tmp_path, TEXTS)
    cache.put_many(IDENT, ["alpha"], np.full((1, DIM), 2.0, np.float32))
    vectors, _ = EmbeddingCache(tmp_path).get_many(IDENT, DIM, ["alpha", "gamma"])
    assert vectors[0].tolist() == [2.0] * DIM
    np.testing.assert_array_equal(vectors[1], vec_for("gamma"))


def test_non_finite_rows_are_not_stored(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    rows = vecs_for(["ok", "nan", "inf"])
    rows[1, 3] = np.nan
    rows[2, 0] = np.inf
    cache.put_many(IDENT, ["ok", "nan", "inf"], rows)
    assert EmbeddingCache(tmp_path).get_many(IDENT, DIM, ["ok", "nan", "inf"])[1].tolist() == [
        True,
        False,
        False,
    ]


def test_put_rejects_a_row_count_that_does_not_match(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shape"):
        EmbeddingCache(tmp_path).put_many(IDENT, ["a", "b"], np.zeros((3, DIM), np.float32))


def test_max_entries_drops_the_oldest_rows(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path, max_entries=3)
    for text in ["a", "b", "c", "d"]:
        cache.put_many(IDENT, [text], vecs_for([text]))
    found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, ["a", "b", "c", "d"])[1]
    assert found.tolist() == [False, True, True, True]


# --- damaged files ----------------------------------------------------------------------


def good_bytes() -> bytes:
    texts = ["one", "two", "three"]
    return encode_table(IDENT, DIM, [text_key(t) for t in texts], vecs_for(texts))


def test_every_truncation_and_every_flipped_byte_is_rejected() -> None:
    data = good_bytes()
    assert not isinstance(decode_table(data, IDENT, DIM), str)
    for cut in range(len(data)):
        assert isinstance(decode_table(data[:cut], IDENT, DIM), str), cut
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x01
        assert isinstance(decode_table(bytes(damaged), IDENT, DIM), str), pos


def expect_ignored_with_warning(directory: Path, match: str) -> None:
    cache = EmbeddingCache(directory)
    with pytest.warns(CacheWarning, match=match):
        vectors, found = cache.get_many(IDENT, DIM, ["one", "two"])
    assert not found.any()
    assert not vectors.any()
    # Once per damaged file, not on every lookup (filterwarnings=error fails a second one).
    assert not cache.get_many(IDENT, DIM, ["one"])[1].any()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_truncated_file_is_ignored_with_a_warning(data: st.DataObject) -> None:
    good = good_bytes()
    cut = data.draw(st.integers(0, len(good) - 1), label="cut")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        EmbeddingCache(directory).path_for(IDENT).write_bytes(good[:cut])
        expect_ignored_with_warning(directory, "truncated|rebuilt")


def test_flipped_byte_is_ignored_with_a_warning(tmp_path: Path) -> None:
    data = bytearray(good_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the float matrix
    EmbeddingCache(tmp_path).path_for(IDENT).write_bytes(bytes(data))
    expect_ignored_with_warning(tmp_path, "checksum")


def test_wrong_magic_is_ignored_with_a_warning(tmp_path: Path) -> None:
    EmbeddingCache(tmp_path).path_for(IDENT).write_bytes(b"NOTMAGIC" + good_bytes()[8:])
    expect_ignored_with_warning(tmp_path, "does not start with")


def test_wrong_dim_is_ignored_then_rebuilt(tmp_path: Path) -> None:
    filled_cache(tmp_path, ["one", "two"])
    cache = EmbeddingCache(tmp_path)
    with pytest.warns(CacheWarning, match="8-d vectors, expected 4-d"):
        assert not cache.get_many(IDENT, 4, ["one"])[1].any()
    cache.put_many(IDENT, ["one"], np.ones((1, 4), np.float32))
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, 4, ["one", "two"])
    assert found.tolist() == [True, False]
    assert vectors[0].tolist() == [1.0] * 4


def test_file_of_another_identity_is_ignored(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.path_for(IDENT).write_bytes(encode_table("someone-else", DIM, [], vecs_for([])))
    expect_ignored_with_warning(tmp_path, "belongs to embedder")


def test_damaged_file_is_replaced_by_the_next_write(tmp_path: Path) -> None:
    EmbeddingCache(tmp_path).path_for(IDENT).write_bytes(b"garbage")
    cache = EmbeddingCache(tmp_path)
    with pytest.warns(CacheWarning, match="rebuilt"):
        cache.put_many(IDENT, ["one"], vecs_for(["one"]))
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, ["one"])
    assert found.all()
    np.testing.assert_array_equal(vectors[0], vec_for("one"))


# --- directories ------------------------------------------------------------------------


def test_unwritable_directory_warns_once_and_continues_uncached(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = EmbeddingCache(blocker / "cache")  # mkdir fails even for root
    with pytest.warns(CacheWarning, match="continuing without a cache"):
        cache.put_many(IDENT, ["one"], vecs_for(["one"]))
    cache.put_many(IDENT, ["two"], vecs_for(["two"]))  # no second warning
    assert not cache.get_many(IDENT, DIM, ["one", "two"])[1].any()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_read_only_directory_warns_once(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with permission_bits_enforced():  # as root too: CI runs as root
            cache = EmbeddingCache(tmp_path)
            with pytest.warns(CacheWarning, match="continuing without a cache"):
                cache.put_many(IDENT, ["one"], vecs_for(["one"]))
            cache.put_many(IDENT, ["two"], vecs_for(["two"]))  # no second warning
        assert list(tmp_path.iterdir()) == []  # nothing was written
    finally:
        tmp_path.chmod(0o700)


def test_default_cache_dir_prefers_the_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", str(tmp_path / "override"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "override"
    assert (tmp_path / "override").is_dir()


def test_default_cache_dir_uses_xdg_then_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLROUTE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "toolroute"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "toolroute"


def test_default_cache_dir_falls_back_to_a_private_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(CacheWarning):
        chosen = default_cache_dir()
    assert chosen.is_dir()
    assert chosen.is_relative_to(tempfile.gettempdir())
    if sys.platform != "win32":
        assert chosen.stat().st_mode & 0o077 == 0


# --- concurrency ------------------------------------------------------------------------


def _writer(directory: str, worker: int, rounds: int) -> None:
    cache = EmbeddingCache(directory)
    for r in range(rounds):
        texts = [f"worker {worker} round {r} text {i}" for i in range(20)]
        cache.put_many(IDENT, texts, vecs_for(texts))


def test_concurrent_writers_never_tear_the_file_and_keep_every_row(tmp_path: Path) -> None:
    workers, rounds = 4, 15
    all_texts = [
        f"worker {w} round {r} text {i}"
        for w in range(workers)
        for r in range(rounds)
        for i in range(20)
    ]
    expected = vecs_for(all_texts)
    stop = threading.Event()
    reader_errors: list[BaseException] = []

    def read_continuously() -> None:
        cache = EmbeddingCache(tmp_path)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a torn file would warn: fail loudly instead
            while not stop.is_set():
                try:
                    vectors, found = cache.get_many(IDENT, DIM, all_texts)
                    np.testing.assert_array_equal(vectors[found], expected[found])
                except BaseException as exc:
                    reader_errors.append(exc)
                    return

    readers = [threading.Thread(target=read_continuously) for _ in range(2)]
    for t in readers:
        t.start()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, rounds)) for w in range(workers)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert [p.exitcode for p in procs] == [0] * workers
    assert reader_errors == []
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, all_texts)
    np.testing.assert_array_equal(vectors[found], expected[found])
    if sys.platform != "win32":  # writers hold an flock while merging: nothing is lost
        assert found.all()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_threads_sharing_one_cache_keep_every_row(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    texts = [[f"thread {t} text {i}" for i in range(30)] for t in range(6)]

    def write(batch: list[str]) -> None:
        for i in range(0, len(batch), 5):
            cache.put_many(IDENT, batch[i : i + 5], vecs_for(batch[i : i + 5]))

    threads = [threading.Thread(target=write, args=(b,)) for b in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [t for batch in texts for t in batch]
    vectors, found = EmbeddingCache(tmp_path).get_many(IDENT, DIM, flat)
    assert found.all()
    np.testing.assert_array_equal(vectors, vecs_for(flat))


def test_an_unusable_cache_dir_variable_falls_back_with_a_warning_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(CacheWarning, match=r"TOOLROUTE_CACHE_DIR=.*a-file/cache.*not writable"):
        chosen = default_cache_dir()
    assert chosen.is_relative_to(tempfile.gettempdir())


def test_a_cache_dir_variable_naming_no_user_falls_back_instead_of_crashing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", "~no-such-user-toolroute/cache")
    with pytest.warns(
        CacheWarning, match=r"TOOLROUTE_CACHE_DIR='~no-such-user.*cannot be resolved"
    ):
        chosen = default_cache_dir()
    assert chosen.is_relative_to(tempfile.gettempdir())


def test_a_blank_cache_dir_variable_counts_as_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLROUTE_CACHE_DIR", "   ")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "toolroute"
    assert list(tmp_path.iterdir()) == [tmp_path / "xdg"]


def test_a_relative_home_is_not_used_for_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOOLROUTE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "relative-home")
    with pytest.warns(CacheWarning, match="home directory cannot be resolved"):
        chosen = default_cache_dir()
    assert chosen.is_relative_to(tempfile.gettempdir())
    assert list(tmp_path.iterdir()) == []
