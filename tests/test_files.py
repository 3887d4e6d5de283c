"""`crate_nn.files`: the one atomic write and the one file lock every writer of the package uses."""
from __future__ import annotations

import json
import os

import pytest

from crate_nn.files import FileLock, WriteError, atomic_write, write_json


def test_an_atomic_write_replaces_the_file_whole_with_the_mode_of_a_new_file(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    write_json(path, {"a": [1, 2]}, "output")
    assert json.loads(path.read_text()) == {"a": [1, 2]} and path.read_text().endswith("\n")
    plain = tmp_path / "plain"
    plain.write_text("")
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "plain"]  # no temporary file left


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="stopped"), atomic_write(path, "output") as f:
        f.write(b"new, half written")
        raise RuntimeError("stopped")
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_refused_write_names_what_and_the_file(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    os.chmod(folder, 0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        with pytest.raises(WriteError, match=f"^output: cannot write {folder / 'x.json'}: "):
            write_json(folder / "x.json", {}, "output")
    finally:
        os.chmod(folder, 0o700)


def test_a_second_holder_of_a_lock_is_refused_naming_the_first(tmp_path):
    path = tmp_path / "folder" / ".lock"
    with FileLock(path):
        assert f"process {os.getpid()} on " in path.read_text()
        with pytest.raises(ValueError, match=f"held by process {os.getpid()} on "):
            with FileLock(path):
                pass
        with pytest.raises(RuntimeError, match="^busy: process "):
            with FileLock(path, refuse=lambda holder: RuntimeError(f"busy: {holder}")):
                pass
        with FileLock(path, enabled=False):  # e.g. the processes but the main one: no lock taken
            pass
    with FileLock(path):  # released at the end of the block
        pass
