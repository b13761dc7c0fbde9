"""A built cache entry packed on one host lands whole in another's cache with the extensions its
build named, each file's mtime to the nanosecond (ninja builds again what looks newer than its
logs); a good entry or a built extension already there stays; an entry too large to carry is not
packed; two toolchains say how they differ, and an entry made for another key or other GPUs is
named unfit."""
import dataclasses
import os

import pytest

from harness.engine.building import shipping
from harness.engine.building.cache import BuildEntry
from harness.engine.building.extensions import extension_dir
from harness.engine.building.shipping import Toolchain, land, landed, misfits, pack
from harness.results import BuildResult

SOURCE = "# a candidate's source: the key is its hash\n"
EXTENSION = "0123456789abcdef01234567"  # a keyed extension directory's name (extensions.py)


def built_entry(cache) -> BuildEntry:
    """An entry as a build leaves it: its record, its log, and its extension's files with odd mtimes."""
    entry = BuildEntry(cache, SOURCE, "cpu")
    ext = extension_dir(entry.extensions, EXTENSION)
    ext.mkdir(parents=True)
    for n, name in enumerate(("main.cpp", "main.o", "op.so", ".ninja_log", ".ninja_deps")):
        (ext / name).write_bytes(os.urandom(1000 * (n + 1)))
        os.utime(ext / name, ns=(1_700_000_000_123_456_789 + n, 1_700_000_000_123_456_789 + n))
    entry.dir.mkdir(parents=True)
    entry.log_path.write_text("built\n")
    entry.record(BuildResult(True, 12.5, key=entry.key, log_path=str(entry.log_path), extensions=[EXTENSION]))
    return entry


def files(directory) -> dict:
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_an_entry_lands_whole_with_its_files_and_their_nanosecond_mtimes(tmp_path):
    made = built_entry(tmp_path / "a")
    data = pack(made)
    there = BuildEntry(tmp_path / "b", SOURCE, "cpu")
    assert not landed(there)
    land(there, data)
    assert landed(there) and there.recorded().seconds == 12.5
    assert files(there.dir) == files(made.dir)
    assert files(extension_dir(there.extensions, EXTENSION)) == files(extension_dir(made.extensions, EXTENSION))
    assert not list(there.dir.parent.glob("*.partial"))


def test_a_good_entry_or_extension_already_there_is_left_as_it_is_and_a_broken_one_is_replaced(tmp_path):
    made = built_entry(tmp_path / "a")
    data = pack(made)
    there = built_entry(tmp_path / "b")
    (there.dir / "build.log").write_text("in use")  # a shared filesystem: the same build
    land(there, data)
    assert (there.dir / "build.log").read_text() == "in use"

    half = BuildEntry(tmp_path / "c", SOURCE, "cpu")
    half.dir.mkdir(parents=True)
    (half.dir / "build.log").write_text("cut short")  # a build that died: no record
    ext = extension_dir(half.extensions, EXTENSION)
    ext.mkdir(parents=True)
    (ext / "main.o").write_bytes(b"cut short")  # nor a library
    land(half, data)
    assert files(half.dir) == files(made.dir)
    assert files(ext) == files(extension_dir(made.extensions, EXTENSION))

    other = BuildEntry(tmp_path / "d", SOURCE, "cpu")
    ext = extension_dir(other.extensions, EXTENSION)
    ext.mkdir(parents=True)
    (ext / "op.so").write_bytes(b"built here by another candidate")
    land(other, data)
    assert landed(other) and (ext / "op.so").read_bytes() == b"built here by another candidate"


def test_an_entry_over_the_limit_is_not_packed(tmp_path, monkeypatch):
    entry = built_entry(tmp_path)
    monkeypatch.setattr(shipping, "SHIP_LIMIT_BYTES", 4000)
    assert pack(entry) is None


def test_toolchains_name_what_differs(tmp_path):
    here = Toolchain.here(tmp_path)
    assert here.differences(Toolchain.here(tmp_path)) == []
    other = dataclasses.replace(here, torch="2.10.0", cache="/elsewhere")
    assert here.differences(other) == [f"torch {here.torch} against 2.10.0", f"cache {here.cache} against /elsewhere"]


@pytest.mark.parametrize("name", ["../escape", "/abs", "entry/../../escape", "elsewhere/x", "extensions/x/y",
                                  f"extensions/{EXTENSION}"])
def test_a_packed_entry_that_names_a_path_outside_its_place_is_refused(tmp_path, name):
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.pax_headers = 1, {shipping.MTIME_NS: "1"}
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.TarError):
        land(BuildEntry(tmp_path, SOURCE, "cpu"), buffer.getvalue())
    assert not (tmp_path.parent / "escape").exists()


def test_an_entry_made_for_another_key_or_other_gpus_is_unfit(tmp_path):
    made = BuildEntry(tmp_path / "a", SOURCE, "8.0;9.0")
    assert misfits(BuildEntry(tmp_path / "b", SOURCE, "8.0;9.0"), made, "9.0") == []
    made.key = "0" * 64  # as torch, CUDA or Python of another version give
    unfit = misfits(BuildEntry(tmp_path / "b", SOURCE, "8.0;9.0"), made, "10.0")
    assert len(unfit) == 2 and "cache key" in unfit[0]
    assert unfit[1] == "it was built for 8.0;9.0, and this node's GPU is 10.0"
