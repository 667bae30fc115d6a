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


def _folder(root, name, age, now):
    path = root / name
    (path / "sub").mkdir(parents=True)
    (path / ".tmp-part-00003").write_bytes(b"x" * 1000)
    os.utime(path, (now - age, now - age))
    return path


def test_leftovers_of_gone_processes_are_removed(tmp_path):
    now = time.time()
    dead, alive = _dead_pid(), os.getppid()
    gone_old = _folder(tmp_path, f"{dead}-a", storage.STAGING_GRACE + 60, now)
    gone_new = _folder(tmp_path, f"{dead}-b", 5, now)
    mine = _folder(tmp_path, f"{os.getpid()}-c", storage.STAGING_MAX_AGE + 60, now)
    live = _folder(tmp_path, f"{alive}-d", storage.STAGING_GRACE + 60, now)
    live_ancient = _folder(tmp_path, f"{alive}-e", storage.STAGING_MAX_AGE + 60, now)
    other = _folder(tmp_path, "not-a-staging-folder", storage.STAGING_MAX_AGE + 60, now)
    removed = storage.remove_stale_staging(str(tmp_path), now=now)
    assert sorted(removed) == sorted([str(gone_old), str(live_ancient)])
    assert not gone_old.exists() and not live_ancient.exists()
    assert gone_new.exists() and mine.exists() and live.exists() and other.exists()


def test_a_staging_block_removes_leftovers_and_its_own_folder(tmp_path, monkeypatch):
    pytest.importorskip("fsspec")
    monkeypatch.setattr(storage.tempfile, "tempdir", str(tmp_path))
    root = tmp_path / os.path.basename(storage.staging_root())
    leftover = _folder(root, f"{_dead_pid()}-x", storage.STAGING_GRACE + 60, time.time())
    folder = storage.Folder("memory://daskwp-staging-test/out")
    with folder.staging() as staging:
        assert not leftover.exists()
        assert os.path.dirname(staging) == str(root)
        assert os.path.basename(staging).startswith(f"{os.getpid()}-")
    assert not os.path.exists(staging)
