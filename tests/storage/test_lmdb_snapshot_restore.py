"""What the redo journal's recovery (docs/journal.md) needs from LMDB itself, checked on
LMDB (py-lmdb's bundled 0.9), not on our code.

The claim: flush an environment that commits without syncing, keep its two meta
pages and hold a read transaction on that commit; then, whatever later unsynced
commits did and whichever of their pages reached the disk in whatever order,
writing the kept meta pages back gives exactly the flushed commit, and a whole
one. The disk model is this file's: the file as flushed, overlaid with any
subset of the pages that differ now (meta pages included), then the kept meta
pages written back. Without the pinned reader the claim fails: later commits
reuse the flushed commit's freed pages, which the last test shows, so the test
can tell.
"""

from __future__ import annotations

import random
from pathlib import Path

import lmdb
import lmdb.verify
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

MAP = 64 << 20


def _env(directory: Path) -> lmdb.Environment:
    return lmdb.open(str(directory), map_size=MAP, sync=False, metasync=False, max_dbs=4)


def _contents(env: lmdb.Environment) -> dict[bytes, bytes]:
    db = env.open_db(b"t")
    with env.begin(db=db) as txn:
        return dict(txn.cursor())


def _write(env: lmdb.Environment, rng: random.Random, commits: int) -> None:
    """Unsynced commits that insert, overwrite and delete: pages are freed and reused."""
    db = env.open_db(b"t")
    for _ in range(commits):
        with env.begin(write=True, db=db) as txn:
            for _ in range(rng.randrange(1, 20)):
                key = b"k%05d" % rng.randrange(3000)
                if rng.random() < 0.3:
                    txn.delete(key)
                else:
                    txn.put(key, bytes([rng.randrange(256)]) * rng.randrange(1, 900))


def _checkpoint(env: lmdb.Environment, data: Path) -> tuple[bytes, bytes, int]:
    """Flush; return the file as flushed, its two meta pages, and the page size."""
    env.sync(True)
    page = env.stat()["psize"]
    flushed = data.read_bytes()
    return flushed, flushed[: 2 * page], page


def _cut(
    flushed: bytes, now: bytes, metas: bytes, page: int, rng: random.Random, *, reached: float = 0.5
) -> bytes:
    """The disk after a power cut: any subset of the changed pages (each with the chance
    ``reached``), then the metas restored."""
    image = bytearray(flushed + bytes(max(0, len(now) - len(flushed))))
    for at in range(0, len(now), page):
        if now[at : at + page] != image[at : at + page] and rng.random() < reached:
            image[at : at + page] = now[at : at + page]
    image[: len(metas)] = metas
    return bytes(image)


def _open_image(directory: Path, image: bytes) -> dict[bytes, bytes]:
    directory.mkdir()
    (directory / "data.mdb").write_bytes(image)
    lmdb.verify.verify(str(directory / "data.mdb"))  # raises on any damaged page
    env = lmdb.open(str(directory), map_size=MAP, max_dbs=4, readonly=True, lock=False)
    try:
        return _contents(env)
    finally:
        env.close()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), before=st.integers(1, 60), after=st.integers(1, 120))
def test_kept_meta_pages_give_back_the_flushed_commit_when_it_was_pinned(
    tmp_path_factory: pytest.TempPathFactory, seed: int, before: int, after: int
) -> None:
    rng = random.Random(seed)
    directory = tmp_path_factory.mktemp("live")
    env = _env(directory)
    _write(env, rng, before)
    flushed, metas, page = _checkpoint(env, directory / "data.mdb")
    expected = _contents(env)
    pin = env.begin()  # the flushed commit's pages are never reused while this is open
    _write(env, rng, after)
    now = (directory / "data.mdb").read_bytes()
    image = _cut(flushed, now, metas, page, rng)
    pin.abort()
    env.close()
    restored = _open_image(tmp_path_factory.mktemp("cut") / "db", image)
    assert restored == expected


def _restore_after(tmp_path: Path, *, pinned: bool) -> tuple[dict[bytes, bytes], bytes]:
    """The flushed commit's contents, and the image with every later page on the disk."""
    rng = random.Random(7)
    env = _env(tmp_path / "live")
    _write(env, rng, 60)
    flushed, metas, page = _checkpoint(env, tmp_path / "live" / "data.mdb")
    expected = _contents(env)
    pin = env.begin() if pinned else None
    _write(env, rng, 200)
    now = (tmp_path / "live" / "data.mdb").read_bytes()
    if pin is not None:
        pin.abort()
    env.close()
    return expected, _cut(flushed, now, metas, page, rng, reached=1.0)


def test_with_the_pin_the_worst_cut_still_gives_back_the_flushed_commit(tmp_path: Path) -> None:
    expected, image = _restore_after(tmp_path, pinned=True)
    assert _open_image(tmp_path / "cut", image) == expected


def test_without_the_pin_later_commits_overwrite_the_flushed_commits_pages(
    tmp_path: Path,
) -> None:
    expected, image = _restore_after(tmp_path, pinned=False)
    try:
        restored = _open_image(tmp_path / "cut", image)
    except (lmdb.Error, lmdb.verify.VerifyError):
        return  # a damaged page, or a main table that no longer names the flushed tables
    assert restored != expected
