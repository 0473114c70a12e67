"""A data job's "where the time went" bars (core/console/jobtime.py) from its figures: what the
job page draws and says, without Spark (the browser test draws a real job's)."""

from __future__ import annotations

from core.console.jobtime import WIDTH, job_time, of_status

T0 = 1_800_000_000_000  # the submit (ms)


def chunk(k: int, start_s: float, seconds: float, *, queued_s: float, spark: float,
          write: float) -> dict[str, object]:
    return {"chunk": k, "started_ms": T0 + int(start_s * 1000), "seconds": seconds,
            "queued_ms": int(queued_s * 1000), "spark_s": spark, "write_s": write}


def figures(**more: object) -> dict[str, object]:
    return {"created_ms": T0, "split_started_ms": T0 + 50, "split_queued_ms": 50,
            "split_seconds": 0.2, **more}


def test_four_chunks_on_two_slots_are_two_waves_and_each_bar_sits_on_the_jobs_time() -> None:
    chunks = [chunk(0, 0.3, 1.0, queued_s=0.05, spark=0.8, write=0.1),
              chunk(1, 0.3, 1.0, queued_s=0.05, spark=0.8, write=0.1),
              chunk(2, 1.3, 1.0, queued_s=1.05, spark=0.8, write=0.1),
              chunk(3, 1.3, 1.0, queued_s=1.05, spark=0.8, write=0.1)]
    got = job_time(figures(combine_started_ms=T0 + 2400, combine_queued_ms=100,
                           combine_seconds=0.6), chunks)
    assert got is not None
    assert got.total_s == 3.0
    assert [b.label for b in got.bars] == ["split", "chunk 0", "chunk 1", "chunk 2", "chunk 3",
                                           "combine"]
    assert dict(got.summary)["chunks"] == "2.00 s: 4 chunks in 2 waves of up to 2 at once"
    late = got.bars[3]  # chunk 2 waited a wave for a slot: its bar says so, in grey
    assert [s.kind for s in late.segments] == ["wait", "other", "spark", "write"]
    assert late.waited == 1.05
    wait, _, spark, write = late.segments
    assert wait.x == round((300 - 50) * WIDTH / 3000, 2)  # from the add to its start
    assert spark.width > write.width > 0 and spark.title == "Spark: 0.80 s"
    combine = got.bars[-1]
    assert combine.segments[-1].x + combine.segments[-1].width == WIDTH  # ends the job


def test_a_one_step_job_shows_its_split_and_one_step_and_no_combine() -> None:
    manifest = {"submitted_ms": T0, "split_started_ms": T0 + 20, "split_queued_ms": 20,
                "split_seconds": 0.05, "one_step": True, "combine_seconds": 0.0,
                "chunks": [chunk(0, 0.07, 0.5, queued_s=0, spark=0.45, write=0)]}
    got = of_status(manifest, {}, [])
    assert got is not None
    assert [b.label for b in got.bars] == ["split", "one step"]
    assert dict(got.summary)["one step"] == "0.50 s: chunk and combine in one Spark query"
    assert "combine" not in dict(got.summary)


def test_a_job_of_an_earlier_version_has_no_bars() -> None:
    """Its reports carry no start times: nothing is drawn rather than bars at zero."""
    assert of_status({"submitted_ms": T0, "chunks": [{"chunk": 0, "seconds": 1.0}]}, {},
                     []) is None
    assert of_status(None, {}, []) is None
