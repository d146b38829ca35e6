"""A damaged store is found, named and survivable: real damage on copies of a real store.

One store is built once (``damage_app.py``: sleeping workflows, small and big state rows)
and copied per case; each copy is damaged the way disks damage files (a page overwritten
with random bytes, the file cut to 50 % or 10 %, emptied, a bit flipped in every page), with
seeded randomness. Every case either opens (the damage quarantined, or on pages nothing
reads) or is refused with a ``roost.Error`` of kind Unavailable that names
``roost store check`` and ``roost store salvage`` -- never a raw lmdb error, never a signal:
the node opens in a child process, whose exit code would show a SIGBUS or SIGABRT.
``roost store salvage`` copies every record on an undamaged page, and only those.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import damage_app
import lmdb
import pytest
import trio
import trio.testing
from click.testing import CliRunner

import roost
from roost import Error, ErrorKind
from roost.cli import main
from roost.storage import TABLES, Codec, open_lmdb_store, unpack_key
from roost.storage._care import backup_store, check_store, salvage_store
from roost.storage._lmdb_file import FREE_TABLE, MAIN_TABLE, LmdbFile

HERE = Path(__file__).parent
PSIZE = 4096
CARE = ("roost store check", "roost store salvage")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("damage") / "base"
    trio.run(damage_app.build, str(path))
    return path


def _records(path: Path) -> dict[str, dict[bytes, bytes]]:
    """Every record of every table, read by LMDB itself."""
    env = lmdb.open(str(path), max_dbs=128, readonly=True)
    try:
        out = {}
        for name in TABLES:
            db = env.open_db(name.encode(), create=False)
            with env.begin() as txn:
                out[name] = dict(txn.cursor(db=db))
        return out
    finally:
        env.close()


def _pages(path: Path) -> dict[str, dict[bytes, tuple[int, ...]]]:
    with LmdbFile(str(path / "data.mdb")) as file:
        tables, damage = file.tables()
        assert damage == []
        return {name: file.pages_of(name, record) for name, record in tables.items()}


def _unused(path: Path) -> list[int]:
    """The pages no tree reaches (free pages, kept for reuse): nothing reads them."""
    with LmdbFile(str(path / "data.mdb")) as file:
        tables, _ = file.tables()
        trees = [file.meta.main, file.meta.free, *tables.values()]
        names = [MAIN_TABLE, FREE_TABLE, *tables]
        used = {
            p
            for name, record in zip(names, trees, strict=True)
            for pages in file.pages_of(name, record).values()
            for p in pages
        }
        used |= {file.meta.main.root, file.meta.free.root}
        return sorted(set(range(2, file.meta.last_pg + 1)) - used)


def _value_offset(path: Path, leaf: int, key: bytes) -> int:
    """Where the value of ``key`` starts in the file, found from its leaf's node table.

    (Not by searching for its bytes: a page's free space keeps stale copies of old nodes.)
    """
    page = (path / "data.mdb").read_bytes()[leaf * PSIZE : (leaf + 1) * PSIZE]
    lower = struct.unpack_from("<H", page, 12)[0]
    for (offset,) in struct.iter_unpack("<H", page[16:lower]):
        ksize = struct.unpack_from("<H", page, offset + 6)[0]
        if page[offset + 8 : offset + 8 + ksize] == key:
            return leaf * PSIZE + offset + 8 + ksize
    raise AssertionError(f"{key!r} is not on page {leaf}")


def _copy(base: Path, to: Path) -> Path:
    shutil.copytree(base, to)
    return to


def _overwrite(path: Path, page: int, data: bytes) -> None:
    with open(path / "data.mdb", "r+b") as f:
        f.seek(page * PSIZE)
        f.write(data)


def _with_current_meta_page_damaged(base: Path, to: Path, *, seed: int) -> tuple[Path, int]:
    """A copy of ``base`` at ``to`` whose current meta page is random bytes; and that page."""
    with LmdbFile(str(base / "data.mdb")) as file:
        current = file.meta.page
    path = _copy(base, to)
    _overwrite(path, current, random.Random(seed).randbytes(PSIZE))
    return path, current


def _open_in_child(
    paths: list[Path] | list[Path | str], command: str = "open"
) -> list[dict[str, Any]]:
    """Open a node on each path in a child; its exit code says no signal killed it."""
    child = subprocess.run(
        [sys.executable, str(HERE / "damage_app.py"), command, *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,  # a guard against a hang, far past what the cases take on a busy machine
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    results = [json.loads(line) for line in child.stdout.splitlines()]
    assert [r["path"] for r in results] == [str(p) for p in paths]
    return results


def _assert_refused_well(result: dict[str, Any], *, names: tuple[str, ...] = CARE) -> None:
    assert "raw" not in result, result
    assert result["opened"] is False
    assert result["kind"] == "Unavailable", result
    assert all(command in result["message"] for command in names), result["message"]


def _headed(path: Path, pages: list[int]) -> list[int]:
    """The pages with a header of their own (not the second and later pages of a big value).

    Those hold bytes of a value and nothing else: LMDB keeps no checksum, so damage there
    changes the value without a sign (a node's decode, or a later read, finds it).
    """
    data = (path / "data.mdb").read_bytes()
    return [p for p in pages if int.from_bytes(data[p * PSIZE : p * PSIZE + 8], "little") == p]


def test_the_page_walk_reads_what_lmdb_reads(base: Path) -> None:
    expected = _records(base)
    with LmdbFile(str(base / "data.mdb")) as file:
        tables, damage = file.tables()
        assert damage == []
        assert file.check_free_list() == []
        walked = {name: dict(file.walk(name, record)) for name, record in tables.items()}
    assert walked == expected
    assert sum(len(t) for t in expected.values()) > damage_app.SMALL + damage_app.WORKFLOWS
    assert check_store(base).damaged is False


def test_every_damage_is_salvaged_at_open_or_refused_with_a_roost_error_never_a_signal(
    base: Path, tmp_path: Path
) -> None:
    pages = _pages(base)
    in_use = _headed(base, sorted({p for t in pages.values() for ps in t.values() for p in ps}))
    file_pages = os.path.getsize(base / "data.mdb") // PSIZE
    rnd = random.Random(24)
    cases: list[tuple[str, Path | str]] = []
    unused = _unused(base)
    assert unused
    # Random bytes over pages in use (of every table), and over a page nothing reads.
    for n, page in enumerate([*rnd.sample(in_use, 8), unused[0]]):
        path = _copy(base, tmp_path / f"page-{n}")
        _overwrite(path, page, rnd.randbytes(PSIZE))
        cases.append((f"page {page}" if page != unused[0] else "unused page", path))
    for percent in (50, 10):
        path = _copy(base, tmp_path / f"cut-{percent}")
        os.truncate(path / "data.mdb", file_pages * PSIZE * percent // 100)
        cases.append((f"cut to {percent}%", path))
    # A byte of one run's stored value overwritten in place: its page is sound, its value not.
    path = _copy(base, tmp_path / "value")
    at = _value_offset(path, pages["runs"][b"w-7"][-1], b"w-7")
    with open(path / "data.mdb", "r+b") as f:
        f.seek(at)
        f.write(b"\xff")  # a CBOR break code where no indefinite item is open
    assert _records(path)["runs"][b"w-7"][0] == 0xFF
    cases.append(("a run's value", path))
    path = _copy(base, tmp_path / "empty")
    os.truncate(path / "data.mdb", 0)
    cases.append(("empty", path))
    path = _copy(base, tmp_path / "flipped")
    with open(path / "data.mdb", "r+b") as f:
        for page in range(file_pages):
            f.seek(page * PSIZE + rnd.randrange(PSIZE))
            byte = f.read(1)[0]
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte ^ 1 << rnd.randrange(8)]))
    # (Its workflows are not run on: flipped bits in their values decode to other values.)
    cases.append(("a bit flipped in every page", f"opened-only:{path}"))
    # A page that goes bad after the check (simulated: the check is skipped): LMDB finds it
    # as recovery reads the runs (the first leaf, zeroed: LMDB's page search reports it).
    path = _copy(base, tmp_path / "after-check")
    _overwrite(path, pages["runs"][min(pages["runs"])][-1], bytes(PSIZE))
    cases.append(("after the check", f"unchecked:{path}"))
    results = dict(
        zip([name for name, _ in cases], _open_in_child([p for _, p in cases]), strict=True)
    )

    for name in ("cut to 50%", "cut to 10%"):
        _assert_refused_well(results[name])
        assert "cut short" in results[name]["message"]
    _assert_refused_well(results["empty"], names=("docs/operating.md",))
    assert "0 bytes" in results["empty"]["message"]
    late = results["after the check"]
    _assert_refused_well(late)
    assert late["message"].startswith("the store's runs table is damaged: LMDB cannot read")
    assert str(tmp_path / "after-check") in late["message"]
    owners = _workflow_pages(base, pages)
    salvaged = []
    for name, result in results.items():
        if name == "empty":
            continue
        if not result["opened"]:
            _assert_refused_well(result)
            continue
        if name == "a bit flipped in every page":
            # LMDB keeps no checksums: a flipped bit inside a stored value can still decode
            # (to another string, another due time); it opened, and that is all it shows.
            continue
        statuses = result["workflows"]
        # Nothing resumes from a partial history: every workflow completed, or is set aside.
        assert set(statuses.values()) <= {"completed", "quarantined"}, (name, result)
        assert result["read"]["other"] == 0, (name, result)
        assert result["read"]["unavailable"] == result["read"]["error"] == 0, (name, result)
        if not result["salvages"]:
            assert result["read"]["missing"] == 0, (name, result)
            continue
        salvaged.append(name)
        assert result["warned"], result  # a WARNING naming roost store check
        assert result["kept_modes"] == ["0o600"]
        (salvage,) = result["salvages"]
        assert result["read"]["missing"] <= salvage["records_lost"].get("state", 0)
        page = int(name.split()[1])
        hit = {w for w, ps in owners.items() if page in ps}
        # A workflow with a row on the damaged page is quarantined (or gone with its rows);
        # the others resume and complete.
        assert all(statuses.get(w, "gone") in ("quarantined", "gone") for w in hit), name
        assert statuses, (name, result)
        for w, status in statuses.items():
            if status == "quarantined" and w not in hit:
                continue  # a neighbour of the lost range: it may have lost rows too
            if status == "quarantined":
                error = next(e for e in result["quarantine_errors"] if w in e)
                assert "lost stored rows to a damaged store" in error
                assert "roost store check" in error
        completed = [w for w, s in statuses.items() if s == "completed"]
        assert completed or hit >= set(owners), (name, result)
    assert salvaged, results  # pages in use were hit, and salvaged at open
    # A lost run record is found from its history and the workflow quarantined by its id.
    for name in salvaged:
        lost_runs = results[name]["salvages"][0]["records_lost"].get("runs", 0)
        assert results[name]["quarantined"] >= lost_runs, results[name]
    assert any(results[name]["quarantined"] for name in salvaged), results
    # Damage inside a value is quarantined (its workflow set aside) and the rest runs.
    assert results["a run's value"]["opened"] is True, results["a run's value"]
    assert results["a run's value"]["quarantined"] == 1, results["a run's value"]
    assert results["a run's value"]["read"]["same"] == damage_app.SMALL
    assert results["a run's value"]["statuses"]["completed"] == damage_app.WORKFLOWS - 1
    # A page nothing reads leaves the store as it was.
    assert results["unused page"]["opened"] is True
    assert results["unused page"]["read"]["same"] == damage_app.SMALL
    assert results["unused page"]["salvages"] == []
    assert results["unused page"]["statuses"] == {"completed": damage_app.WORKFLOWS}


def test_on_damage_refuse_refuses_each_damaged_page(base: Path, tmp_path: Path) -> None:
    pages = _pages(base)
    in_use = _headed(base, sorted({p for t in pages.values() for ps in t.values() for p in ps}))
    rnd = random.Random(24)
    paths = []
    for n, page in enumerate(rnd.sample(in_use, 4)):
        path = _copy(base, tmp_path / f"page-{n}")
        _overwrite(path, page, rnd.randbytes(PSIZE))
        paths.append(path)
    results = _open_in_child(paths, command="open-refuse")
    refused = [r for r in results if not r["opened"]]
    assert refused, results
    for result in refused:
        _assert_refused_well(result)
        assert "page(s) cannot be read" in result["message"]
    assert all(not (p / "damaged").exists() for p in paths)  # nothing was moved


def test_two_damaged_meta_pages_or_a_lost_core_root_are_refused_at_open(
    base: Path, tmp_path: Path
) -> None:
    metas = _copy(base, tmp_path / "metas")
    _overwrite(metas, 0, bytes(PSIZE))
    _overwrite(metas, 1, bytes(PSIZE))
    with LmdbFile(str(base / "data.mdb")) as file:
        runs_root = file.tables()[0]["runs"].root
    root = _copy(base, tmp_path / "root")
    _overwrite(root, runs_root, bytes(PSIZE))
    meta_result, root_result = _open_in_child([metas, root])
    _assert_refused_well(meta_result)
    assert "meta page 0" in meta_result["message"]
    _assert_refused_well(root_result)
    assert "root of the core runs table" in root_result["message"]


def _workflow_pages(
    base: Path, pages: dict[str, dict[bytes, tuple[int, ...]]]
) -> dict[str, set[int]]:
    """Each workflow's pages: those of its run record, history, inbox, tasks and timers."""
    codec = Codec()
    runs = {k.decode(): codec.decode(v) for k, v in _records(base)["runs"].items()}
    by_run = {record.run_id: wid for wid, record in runs.items()}
    out: dict[str, set[int]] = {wid: set(pages["runs"][wid.encode()]) for wid in runs}
    for table in ("histories", "inbox", "tasks", "timers"):
        kinds = (int, str, int) if table == "timers" else (str, int)
        for k, ps in pages.get(table, {}).items():
            run_id = str(unpack_key(k, *kinds)[1 if table == "timers" else 0])
            if run_id in by_run:
                out[by_run[run_id]] |= set(ps)
    return out


def test_a_cut_store_is_refused_by_the_cli_too_without_a_signal(base: Path, tmp_path: Path) -> None:
    path = _copy(base, tmp_path / "cut")
    os.truncate(path / "data.mdb", os.path.getsize(path / "data.mdb") // 10)
    child = subprocess.run(
        [sys.executable, "-m", "roost", "workflow", "list", "--data-dir", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert child.returncode == 1, (child.returncode, child.stderr)
    assert child.returncode != -signal.SIGBUS
    assert "[Unavailable]" in child.stderr
    assert "cut short" in child.stderr
    assert "roost store salvage" in child.stderr


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_salvage_recovers_every_record_on_an_undamaged_page(
    base: Path, tmp_path: Path, seed: int
) -> None:
    pages = _pages(base)
    before = _records(base)
    rnd = random.Random(seed)
    in_use = {p for t in ("histories", "state", "runs") for ps in pages[t].values() for p in ps}
    candidates = _headed(base, sorted(in_use))
    damaged = rnd.choice(candidates)
    path = _copy(base, tmp_path / "src")
    _overwrite(path, damaged, rnd.randbytes(PSIZE))

    report = salvage_store(path, tmp_path / "dest")

    after = _records(tmp_path / "dest")
    expected = {
        table: {k: v for k, v in rows.items() if damaged not in pages[table].get(k, ())}
        for table, rows in before.items()
    }
    assert after == expected
    assert sum(len(t) for t in after.values()) < sum(len(t) for t in before.values())
    assert any(lost["page"] == damaged for lost in report.lost), report.lost
    assert report.copied == {t: len(rows) for t, rows in expected.items() if rows}
    assert check_store(tmp_path / "dest").damaged is False


def test_salvage_of_a_cut_store_keeps_the_pages_before_the_cut(base: Path, tmp_path: Path) -> None:
    pages = _pages(base)
    before = _records(base)
    path = _copy(base, tmp_path / "src")
    size = os.path.getsize(path / "data.mdb") // 2 // PSIZE * PSIZE
    os.truncate(path / "data.mdb", size)
    last = size // PSIZE - 1

    report = salvage_store(path, tmp_path / "dest")

    after = _records(tmp_path / "dest")
    for table, rows in before.items():
        kept = {k: v for k, v in rows.items() if max(pages[table].get(k, {0})) <= last}
        assert after[table] == kept, table
    assert report.problems and "cut short" in report.problems[0]
    assert report.lost


def test_a_damaged_meta_page_is_refused_and_salvage_reads_the_other(
    base: Path, tmp_path: Path
) -> None:
    before = _records(base)
    path, current = _with_current_meta_page_damaged(base, tmp_path / "src", seed=7)
    with pytest.raises(Error) as raised:
        open_lmdb_store(path).close()
    assert raised.value.kind is ErrorKind.UNAVAILABLE
    assert f"meta page {current}" in raised.value.message
    assert all(command in raised.value.message for command in CARE)

    report = salvage_store(path, tmp_path / "dest")

    assert any(f"from meta page {1 - current}" in p for p in report.problems), report.problems
    after = _records(tmp_path / "dest")
    # The other meta page is one commit older: the build's last commit (one state row) and
    # nothing else is missing.
    missing = {(t, k) for t, rows in before.items() for k in rows if k not in after[t]}
    assert len(missing) <= 1, missing
    assert all(after[t][k] == before[t][k] for t in after for k in after[t] if k in before[t])


def test_a_salvaged_store_opens_and_its_workflows_resume(base: Path, tmp_path: Path) -> None:
    pages = _pages(base)
    path = _copy(base, tmp_path / "src")
    state_page = min(
        p
        for ps in pages["state"].values()
        for p in ps
        if p
        not in {q for t in ("runs", "histories", "timers") for qs in pages[t].values() for q in qs}
    )
    _overwrite(path, state_page, bytes(PSIZE))
    salvage_store(path, tmp_path / "dest")

    async def reopen() -> list[dict[str, Any]]:
        async with roost.open_node(damage_app.app, tmp_path / "dest") as node:
            return node.list_workflows()

    listed = trio.run(reopen, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(listed) == damage_app.WORKFLOWS
    assert {w["status"] for w in listed} == {"running"}


def test_a_read_in_a_call_fails_that_call_and_the_node_keeps_serving(
    base: Path, tmp_path: Path
) -> None:
    pages = _pages(base)
    path = _copy(base, tmp_path / "live")
    small = {k: ps for k, ps in pages["state"].items() if b"small" in k}
    leaf_of = {k: ps[-1] for k, ps in small.items()}  # no overflow: the path ends at the leaf
    victim_key, victim_leaf = sorted(leaf_of.items())[len(leaf_of) // 2]
    spared = sorted(k for k, leaf in leaf_of.items() if leaf != victim_leaf)
    assert spared

    def name(k: bytes) -> str:
        return k.split(b"\x00\x01")[-2].decode()

    async def body() -> None:
        async with roost.open_node(damage_app.app, path):
            # The page goes bad under the running node, where no check before open saw it.
            _overwrite(path, victim_leaf, bytes(PSIZE))
            with pytest.raises(Error) as raised:
                await roost.state.get("small", name(victim_key))
            assert raised.value.kind is ErrorKind.UNAVAILABLE
            assert raised.value.details["table"] == "state"
            assert raised.value.details["key"] == victim_key.hex()
            assert "roost store check" in raised.value.message
            for k in (spared[0], spared[-1]):  # the rest is served as before
                i = int(name(k)[2:])
                assert await roost.state.get("small", name(k)) == damage_app.small_value(i)
            await roost.state.set("big", "after", "the damage")
            assert await roost.state.get("big", "after") == "the damage"

    trio.run(body)


def test_an_empty_data_file_is_refused_where_a_store_was_and_new_where_none_was(
    tmp_path: Path,
) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "data.mdb").write_bytes(b"")
    open_lmdb_store(fresh).close()  # no earlier store here: a new one
    assert os.path.getsize(fresh / "data.mdb") > 0

    wiped = tmp_path / "wiped"
    open_lmdb_store(wiped).close()
    os.truncate(wiped / "data.mdb", 0)
    for readonly in (False, True):
        with pytest.raises(Error) as raised:
            open_lmdb_store(wiped, readonly=readonly, lock=not readonly).close()
        assert raised.value.kind is ErrorKind.UNAVAILABLE
        assert "0 bytes" in raised.value.message
        assert "roost.lock" in raised.value.message


def test_store_check_reports_damage_and_exits_1(base: Path, tmp_path: Path) -> None:
    ok = CliRunner().invoke(main, ["store", "check", "--data-dir", str(base)])
    assert ok.exit_code == 0, ok.output
    assert "no damage found" in ok.output

    pages = _pages(base)
    path = _copy(base, tmp_path / "bad")
    run_page = max(p for ps in pages["runs"].values() for p in ps)
    _overwrite(path, run_page, random.Random(5).randbytes(PSIZE))
    bad = CliRunner().invoke(main, ["store", "check", "--data-dir", str(path), "--json"])
    assert bad.exit_code == 1
    report = json.loads(bad.stdout)
    assert report["damaged"] is True
    assert [d["page"] for d in report["tables"]["runs"]["damaged_pages"]] == [run_page]
    assert report["tables"]["state"]["damaged_pages"] == []
    text = CliRunner().invoke(main, ["store", "check", "--data-dir", str(path)])
    assert text.exit_code == 1
    assert f"damaged: runs: page {run_page}" in text.stdout
    assert "roost store salvage" in text.stderr


def test_store_salvage_cli_lists_what_it_could_not_read(base: Path, tmp_path: Path) -> None:
    path = _copy(base, tmp_path / "bad")
    os.truncate(path / "data.mdb", os.path.getsize(path / "data.mdb") // 2)
    dest = tmp_path / "new"
    result = CliRunner().invoke(main, ["store", "salvage", str(path), str(dest), "--json"])
    assert result.exit_code == 1, result.output  # records were lost
    report = json.loads(result.stdout)
    assert report["lost"]
    assert sum(report["copied"].values()) >= 1
    again = CliRunner().invoke(main, ["store", "salvage", str(path), str(dest)])
    assert again.exit_code == 2  # dest holds a store now
    assert "already holds a store" in again.output


def test_backup_beside_a_running_node_is_a_consistent_copy(base: Path, tmp_path: Path) -> None:
    path = _copy(base, tmp_path / "live")
    dest = tmp_path / "backup"

    async def body() -> None:
        async with roost.open_node(damage_app.app, path):
            await roost.state.set("small", "during", "backup")
            child = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "roost",
                    "store",
                    "backup",
                    str(dest),
                    "--data-dir",
                    str(path),
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert child.returncode == 0, child.stderr
            assert b"backed up" in child.stdout
            with pytest.raises(Error) as refused:  # salvage would race the node's writes
                salvage_store(path, tmp_path / "salvaged")
            assert refused.value.kind is ErrorKind.INVALID_STATE
            assert "roost store backup" in refused.value.message

    trio.run(body)
    copied = _records(dest)
    assert copied["state"] == _records(path)["state"]
    assert oct(os.stat(dest / "data.mdb").st_mode & 0o777) == "0o600"
    assert check_store(dest).damaged is False
    with pytest.raises(Error) as raised:
        backup_store(path, dest)
    assert raised.value.kind is ErrorKind.INVALID


def test_store_check_shows_a_salvage_made_at_open(base: Path, tmp_path: Path) -> None:
    pages = _pages(base)
    path = _copy(base, tmp_path / "bad")
    state_leaf = max(ps[-1] for k, ps in pages["state"].items() if b"small" in k)
    _overwrite(path, state_leaf, bytes(PSIZE))

    async def reopen() -> None:
        async with roost.open_node(damage_app.app, path):
            pass

    trio.run(reopen, clock=trio.testing.MockClock(autojump_threshold=0))
    (kept,) = (path / "damaged").glob("data.mdb.*[0-9]Z")
    assert kept.read_bytes()[state_leaf * PSIZE : (state_leaf + 1) * PSIZE] == bytes(PSIZE)
    result = CliRunner().invoke(main, ["store", "check", "--data-dir", str(path)])
    assert result.exit_code == 0, result.output  # the store in use is sound
    assert f"salvaged at open: the damaged file is kept at {kept}" in result.stdout
    assert "records lost: state " in result.stdout
    report = json.loads(
        CliRunner().invoke(main, ["store", "check", "--data-dir", str(path), "--json"]).stdout
    )
    (earlier,) = report["earlier_salvages"]
    assert earlier["lost"][0]["page"] == state_leaf
    store = open_lmdb_store(path, readonly=True, lock=False)
    try:
        entries = roost.storage.quarantined(store)
    finally:
        store.close()
    assert [e["unit"] for e in entries] == ["store"]
    assert entries[0]["info"]["kept"] == str(kept)


def test_a_node_salvages_a_store_with_one_damaged_meta_page_from_the_other(
    base: Path, tmp_path: Path
) -> None:
    before = _records(base)
    path, _ = _with_current_meta_page_damaged(base, tmp_path / "src", seed=8)
    (result,) = _open_in_child([path])
    assert result["opened"] is True, result
    assert result["warned"], result
    (salvage,) = result["salvages"]
    assert salvage["lost"] == []
    assert result["statuses"] == {"completed": damage_app.WORKFLOWS}
    # The other meta page is one commit older: at most the build's last state row is gone.
    assert result["read"]["same"] >= damage_app.SMALL - 1
    assert result["read"]["other"] == 0
    assert set(_records(path)["runs"]) == set(before["runs"])


def test_a_salvage_killed_before_its_rename_is_done_again_at_the_next_open(
    base: Path, tmp_path: Path
) -> None:
    pages = _pages(base)
    path = _copy(base, tmp_path / "bad")
    state_leaf = max(ps[-1] for k, ps in pages["state"].items() if b"small" in k)
    _overwrite(path, state_leaf, bytes(PSIZE))
    # What a kill leaves between the copy and the rename: a half-written store beside.
    stale = path / "damaged" / "salvage-20261202T000000.000000Z.tmp"
    stale.mkdir(parents=True)
    (stale / "data.mdb").write_bytes(b"half a copy")
    (result,) = _open_in_child([path])
    assert result["opened"] is True, result
    assert not stale.exists()
    assert len(result["salvages"]) == 1
    assert check_store(path).damaged is False
