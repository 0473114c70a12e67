"""The data-job walkthrough: its two `datajob submit` commands, read from docs/pipeline.md
itself (the README shows the first), run on the nycflights13 sample data under the stack's
default data roots (var/sample, var/data; outputs in var/out), on the run's Spark Connect
server, and their output equals the same computation in pandas."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.cli.datajob import build_spec, submit
from core.management.commands.datajob import Command
from core.pipeline import jobs
from core.queue import Queue
from core.sample import nycflights13
from tests.pipeline_support import run_worker

# Spark; and a datajob submit writes its audit entry.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]
ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PIPELINE = ROOT / "docs" / "pipeline.md"


def submit_commands(text: str) -> list[list[str]]:
    """Every `python manage.py datajob submit` of a text, as argument lists."""
    found = re.findall(r"^python manage\.py datajob submit (?:.*\\\n)*.*$", text, re.M)
    return [shlex.split(cmd.replace("\\\n", " ")) for cmd in found]


def walkthrough_commands() -> list[list[str]]:
    """The commands of docs/pipeline.md's walkthrough section."""
    text = PIPELINE.read_text()
    section = text.split("\n## A walkthrough on nycflights13\n", 1)[1].split("\n## ", 1)[0]
    return submit_commands(section)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout-like directory with var/sample written as `make run` writes it."""
    root = tmp_path_factory.mktemp("walkthrough")
    nycflights13.write_tables(root / "var" / "sample")
    return root


@pytest.fixture
def stack_roots(sample: Path, settings: Any) -> None:
    """The data roots a stack in `sample` has by default (QA_DATA_ROOTS and QA_OUTPUT_ROOTS
    unset): its var/sample and var/data to read, var/out to write; the rest of var/ private.
    The in-process worker checks its tasks against the same settings."""
    var = sample / "var"
    settings.VAR_DIR = var
    settings.DATA_ROOTS = [str(var / "sample"), str(var / "data")]
    settings.OUTPUT_ROOTS = [str(var / "out")]


def run_readme_job(argv: list[str], root: Path, q: Queue,
                   monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame:
    monkeypatch.chdir(root)
    o = vars(Command().create_parser("manage.py", "datajob").parse_args(argv[3:]))
    assert o["wait"], "the README's command follows the job (--wait)"
    spec = build_spec(input=o["input"], format=o["format"], output=o["output"],
                      output_format=o["output_format"], sql=o["sql"], transform=o["transform"],
                      combine_sql=o["combine_sql"], views=o["view"], chunks=o["chunks"],
                      rows_per_chunk=o["rows_per_chunk"], overwrite=o["overwrite"])
    assert spec.output == str((root / o["output"]).resolve())  # resolved from where it runs
    submit(spec, queue=q.name, options=jobs.QueueOptions(), stdout=io.StringIO(),
           stderr=io.StringIO())
    run_worker(q)
    st = jobs.status(q, spec.job_id)
    assert st.state == "done", st.failures
    assert st.manifest["rows_in"] == 336_776
    # The README's job asks for no chunking: the sample is one chunk, run in one step.
    assert len(st.manifest["chunks"]) == (o["chunks"] or 1)
    assert st.manifest["one_step"] is (o["chunks"] is None)
    [part] = Path(spec.output).glob("part-*.csv")
    return pd.read_csv(part, keep_default_na=False)


def test_the_walkthrough_has_both_jobs_and_the_readme_its_first() -> None:
    commands = walkthrough_commands()
    assert len(commands) == 2
    assert "--view" in commands[1] and "--view" not in commands[0]
    assert submit_commands(README.read_text()) == [commands[0]]


def test_mean_departure_delay_per_carrier_and_month_equals_pandas(
    sample: Path, stack_roots: None, connect_url: str, django_queue: Queue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [argv] = [c for c in walkthrough_commands() if "--view" not in c]
    got = run_readme_job(argv, sample, django_queue, monkeypatch)
    flights = pd.read_parquet(sample / "var/sample/flights.parquet")
    want = (flights.groupby(["carrier", "month"], as_index=False)
            .agg(mean_dep_delay=("dep_delay", "mean"), flights=("dep_delay", "count"))
            .sort_values(["carrier", "month"], ignore_index=True))
    assert list(got.columns) == list(want.columns)
    assert got[["carrier", "month", "flights"]].equals(want[["carrier", "month", "flights"]])
    # Spark rounds half up to 2 places; within that rounding of pandas' own mean
    assert (got.mean_dep_delay - want.mean_dep_delay).abs().max() <= 0.005 + 1e-9
    assert got.iloc[0].tolist() == ["9E", 1, 16.88, 1498]  # the first line the docs show


def test_flights_per_manufacturer_equals_pandas(
    sample: Path, stack_roots: None, connect_url: str, django_queue: Queue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [argv] = [c for c in walkthrough_commands() if "--view" in c]
    got = run_readme_job(argv, sample, django_queue, monkeypatch)
    flights = pd.read_parquet(sample / "var/sample/flights.parquet")
    planes = pd.read_parquet(sample / "var/sample/planes.parquet")
    joined = flights.merge(planes, on="tailnum")
    want = (joined.groupby("manufacturer", as_index=False).size()
            .rename(columns={"size": "flights"})
            .sort_values(["flights", "manufacturer"], ascending=[False, True],
                         ignore_index=True))
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert got.iloc[0].tolist() == ["BOEING", 82912]
