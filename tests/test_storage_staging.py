"""Staging folders of object-store outputs: a killed worker's leftover is removed by the next
staging block on the host; a live process's folder is kept."""
import os
import subprocess
import sys
import time

import pytest

from daskwp.frames import storage


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _folder(root, name, age, now, file_age=None):
    path = root / name
    (path / "sub").mkdir(parents=True)
    part = path / ".tmp-part-00003"
    part.write_bytes(b"x" * 1000)
    for p, a in ((path / "sub", age), (part, age if file_age is None else file_age), (path, age)):
        os.utime(p, (now - a, now - a))
    return path


def test_leftovers_of_gone_processes_are_removed(tmp_path):
    now = time.time()
    dead, alive = _dead_pid(), os.getppid()
    grace, max_age = storage.STAGING_GRACE + 60, storage.STAGING_MAX_AGE + 60
    gone_old = _folder(tmp_path, f"{dead}-abcd_123", grace, now)
    gone_new = _folder(tmp_path, f"{dead}-bbbbbbbb", 5, now)
    # its folder untouched, but a file in it written to a moment ago: kept
    gone_writing = _folder(tmp_path, f"{dead}-cccccccc", grace, now, file_age=5)
    mine = _folder(tmp_path, f"{os.getpid()}-dddddddd", max_age, now)
    live = _folder(tmp_path, f"{alive}-eeeeeeee", grace, now)
    live_ancient = _folder(tmp_path, f"{alive}-ffffffff", max_age, now)
    other = _folder(tmp_path, "2019-archive", max_age, now)      # not a staging name
    removed = storage.remove_stale_staging(str(tmp_path), now=now)
    assert sorted(removed) == sorted([str(gone_old), str(live_ancient)])
    assert not gone_old.exists() and not live_ancient.exists()
    for kept in (gone_new, gone_writing, mine, live, other):
        assert kept.exists(), kept


def test_a_staging_block_removes_leftovers_and_its_own_folder(tmp_path, monkeypatch):
    pytest.importorskip("fsspec")
    monkeypatch.setattr(storage.tempfile, "tempdir", str(tmp_path))
    root = tmp_path / os.path.basename(storage.staging_root())
    root.mkdir(mode=0o700)
    leftover = _folder(root, f"{_dead_pid()}-xxxxxxxx", storage.STAGING_GRACE + 60, time.time())
    folder = storage.Folder("memory://daskwp-staging-test/out")
    with folder.staging() as staging:
        assert not leftover.exists()
        assert os.path.dirname(staging) == str(root)
        assert os.path.basename(staging).startswith(f"{os.getpid()}-")
    assert not os.path.exists(staging)


@pytest.mark.parametrize("kind", ["link", "open"])
def test_a_staging_root_others_could_have_made_is_not_used(tmp_path, monkeypatch, kind):
    """The root's name is fixed in a shared temporary folder: a link made by someone else (to
    a folder of the user's, whose digit-named folders a sweep would remove) or a folder others
    can write to is not swept nor used; the block gets a folder of its own."""
    pytest.importorskip("fsspec")
    monkeypatch.setattr(storage.tempfile, "tempdir", str(tmp_path))
    root = tmp_path / os.path.basename(storage.staging_root())
    target = tmp_path / "users-own"
    target.mkdir()
    victim = _folder(target, f"{_dead_pid()}-zzzzzzzz", storage.STAGING_MAX_AGE + 60, time.time())
    if kind == "link":
        root.symlink_to(target, target_is_directory=True)
    else:
        root.mkdir(mode=0o700)
        os.chmod(root, 0o777)
        victim = _folder(root, f"{_dead_pid()}-zzzzzzzz", storage.STAGING_MAX_AGE + 60,
                         time.time())
    assert not storage.private_folder(str(root))
    with storage.Folder("memory://daskwp-staging-test/out").staging() as staging:
        assert os.path.dirname(staging) == str(tmp_path)
        assert os.path.basename(staging).startswith("daskwp-staging-")
    assert victim.exists()
    assert not os.path.exists(staging)
