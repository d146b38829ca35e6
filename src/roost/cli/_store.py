"""``roost store``: check a store for damage, salvage what is readable, back it up."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from roost.cli._common import data_dir_option, echo_json, failures, json_option, table
from roost.storage._care import backup_store, check_store, salvage_store

__all__ = ["store"]


@click.group()
def store() -> None:
    """Store care: check for damage, salvage a damaged store, back up a running one."""


@store.command()
@data_dir_option
@json_option
def check(data_dir: Path, as_json: bool) -> None:
    """Read every table and record (read-only); exit 1 if anything is damaged."""
    with failures():
        report = check_store(data_dir)
    if as_json:
        echo_json(report.to_json())
    else:
        for problem in report.problems:
            click.echo(f"damaged: {problem}")
        rows = [
            [name, t.records, len(t.damaged_pages), len(t.undecodable)]
            for name, t in sorted(report.tables.items())
        ]
        if rows:
            columns = ["table", "records", "damaged pages", "undecodable"]
            table(f"store {report.path}", columns, rows)
        for name, t in sorted(report.tables.items()):
            for page in t.damaged_pages:
                after = f" (after key {page['after']})" if page["after"] else ""
                click.echo(f"damaged: {name}: {page['reason']}{after}")
            for row in t.undecodable:
                click.echo(f"undecodable: {name}: key {row['key']}: {row['error']}")
        for earlier in report.earlier:
            lost = earlier.get("records_lost") or {}
            what = ", ".join(f"{t} {n}" for t, n in sorted(lost.items())) or "none"
            click.echo(
                f"salvaged at open: the damaged file is kept at {earlier.get('source')}; "
                f"records lost: {what}; report: {earlier['report']}"
            )
    if report.damaged:
        click.echo(
            f"the store in {report.path} is damaged: stop the node and run "
            f"`roost store salvage {report.path} NEW_DIR`, then start the node on NEW_DIR "
            "(or restart the node: it salvages a store with damaged pages at open, keeping "
            f"the damaged file in {report.path}/damaged/)",
            err=True,
        )
        sys.exit(1)
    if not as_json:
        click.echo(f"ok: no damage found in {report.path}")


@store.command()
@click.argument("source", type=click.Path(file_okay=False, path_type=Path))
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@json_option
def salvage(source: Path, dest: Path, as_json: bool) -> None:
    """Copy every readable record of the store in SOURCE into a new store in DEST.

    SOURCE is only read (stop its node first); what cannot be read is listed, and the
    command then exits 1 (records were lost).
    """
    with failures():
        report = salvage_store(source, dest)
    if as_json:
        echo_json(report.to_json())
        if report.lost:
            sys.exit(1)
        return
    for problem in report.problems:
        click.echo(f"damaged: {problem}")
    table(
        f"salvaged {report.source} into {report.dest}",
        ["table", "records copied"],
        [[name, count] for name, count in sorted(report.copied.items())],
    )
    for lost in report.lost:
        after = f" (the records after key {lost['after']})" if lost["after"] else ""
        click.echo(f"lost: {lost['table']}: {lost['reason']}{after}")
    total = sum(report.copied.values())
    click.echo(
        f"copied {total} records; {len(report.lost)} damaged page(s) could not be read"
        f"; start the node on {report.dest}"
    )
    if report.lost:
        sys.exit(1)


@store.command()
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@data_dir_option
def backup(dest: Path, data_dir: Path) -> None:
    """Write a consistent, compacted copy of the store into DEST (works beside a running node)."""
    with failures():
        copy = backup_store(data_dir, dest)
    click.echo(f"backed up {data_dir} to {copy}; restore by starting a node on {Path(copy).parent}")
