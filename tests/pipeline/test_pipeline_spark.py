"""Where the workers' Spark runs and how it is configured (core.pipeline.spark_target,
spark_sessions, spark_query, server): the stack's own Connect server's settings, SPARK_CONF,
the classic sessions' settings, the FAIR pools, and what a worker waits for before its first
data task."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from core.pipeline import server, spark_query, spark_sessions, spark_target
from core.procs import free_port


@pytest.mark.parametrize(("master", "setting", "want"), [
    ("local[*]", 0, os.cpu_count() or 2), ("local[3]", 0, 3), ("local[4, 2]", 0, 4),
    ("local", 0, 1), ("spark://host:7077", 0, 8), ("local[*]", 12, 12),
])
def test_shuffle_partitions_follow_the_local_threads_unless_set(
    master: str, setting: int, want: int
) -> None:
    conf = spark_target.base_conf(
        spark_target.SparkTarget(master=master, shuffle_partitions=setting), app="t",
        local_dir=None)
    assert conf["spark.sql.shuffle.partitions"] == str(want)


def test_spark_conf_entries_override_the_defaults_and_add_to_the_drivers_java_options() -> None:
    target = spark_target.SparkTarget(conf=spark_target.parse_conf(
        "spark.driver.memory=8g; spark.sql.shuffle.partitions = 5\n"
        "spark.driver.extraJavaOptions=-XX:+UseG1GC -Xss4m"))
    conf = spark_target.base_conf(target, app="t", local_dir=None, jar=Path("/j/qa.jar"))
    assert conf["spark.driver.memory"] == "8g"
    assert conf["spark.sql.shuffle.partitions"] == "5"
    assert conf["spark.jars"] == "/j/qa.jar"
    assert conf["spark.sql.variable.substitute"] == "false"
    java = conf["spark.driver.extraJavaOptions"]
    assert java.startswith("-Dlog4j2.configurationFile=") and java.endswith("-XX:+UseG1GC -Xss4m")


@pytest.mark.parametrize("bad", ["driver.memory=8g", "spark.driver.memory", "spark.x=",
                                 "spark.a b=1"])
def test_a_spark_conf_entry_that_is_no_setting_is_refused_by_name(bad: str) -> None:
    with pytest.raises(spark_target.SparkConfError, match=re.escape(repr(bad))):
        spark_target.parse_conf(f"spark.ui.enabled=false;{bad}")


def test_the_embedded_server_is_fair_quiet_local_and_takes_spark_conf(tmp_path: Path) -> None:
    config = server.ServerConfig(
        port=15999, local_dir=tmp_path / "connect", memory="2g", jar=tmp_path / "qa.jar",
        conf=(("spark.sql.shuffle.partitions", "7"),
              ("spark.driver.extraJavaOptions", "-Xss4m")))
    conf = server.server_conf(config)
    assert conf["spark.scheduler.mode"] == "FAIR"
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15999"
    assert conf["spark.master"] == "local[*]" and conf["spark.driver.memory"] == "2g"
    assert conf["spark.local.dir"] == str(tmp_path / "connect")
    assert conf["spark.jars"] == str(tmp_path / "qa.jar")
    assert conf["spark.sql.variable.substitute"] == "false"
    assert conf["spark.sql.shuffle.partitions"] == "7"  # SPARK_CONF wins
    assert conf["spark.driver.extraJavaOptions"].endswith(" -Xss4m")  # added to ours
    argv = server.argv(config)
    assert argv[0].endswith("/bin/spark-class") and argv[-1] == "spark-internal"
    assert "spark.connect.grpc.binding.port=15999" in argv


def test_the_jvms_map_the_class_archive_only_where_one_was_made(
    tmp_path: Path, settings: Any,
) -> None:
    """The embedded server and a classic session's JVM map the archive QA_SPARK_CLASSES names
    once `manage.py sparkclasses` made it (core.pipeline.classes); with none made, or none
    named, neither asks for one (a JVM given a missing archive runs without it, silently)."""
    archive = tmp_path / "spark-classes.jsa"
    settings.SPARK_CLASS_ARCHIVE = archive
    settings.SPARK_MASTER, settings.SPARK_REMOTE = "local[2]", ""
    for made in (False, True):
        if made:
            archive.write_bytes(b"made by manage.py sparkclasses")
        config = server.settings_config(tmp_path)
        java = server.server_conf(config)["spark.driver.extraJavaOptions"]
        classic = spark_target.base_conf(spark_target.target_from_settings(), app="t",
                                         local_dir=None)["spark.driver.extraJavaOptions"]
        for options in (java, classic):
            assert (f"-XX:SharedArchiveFile={archive}" in options.split()) is made
    settings.SPARK_REMOTE = "sc://elsewhere:15002"  # a Connect client starts no JVM
    assert spark_target.target_from_settings().class_archive is None
    settings.SPARK_CLASS_ARCHIVE = None  # QA_SPARK_CLASSES unset: the default
    assert "SharedArchiveFile" not in server.server_conf(
        server.settings_config(tmp_path))["spark.driver.extraJavaOptions"]


def test_sparkclasses_without_a_place_to_write_is_refused(settings: Any) -> None:
    from django.core.management import CommandError, call_command

    settings.SPARK_CLASS_ARCHIVE = None
    with pytest.raises(CommandError, match="Give --out PATH, or set QA_SPARK_CLASSES") as caught:
        call_command("sparkclasses")
    assert caught.value.returncode == 2


def test_the_servers_environment_makes_it_a_server_and_runs_this_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spark-submit refuses a server when SPARK_REMOTE says it is a client (a worker's
    environment); its Python workers (UDFs, transforms) are this Python."""
    import sys

    monkeypatch.setenv("SPARK_REMOTE", "sc://elsewhere:15002")
    env = server.env()
    assert "SPARK_REMOTE" not in env
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert env["MALLOC_ARENA_MAX"] == "2"


def test_a_job_runs_in_one_of_1024_fair_pools_chosen_by_its_id() -> None:
    pools = {spark_query.job_pool(f"job-{i}") for i in range(5000)}
    assert all(re.fullmatch(r"queueadmin-\d{4}", p) for p in pools)
    assert 900 < len(pools) <= 1024
    assert spark_query.job_pool("nightly-2026-11-25") == spark_query.job_pool("nightly-2026-11-25")


def test_a_worker_waits_for_a_connect_server_that_does_not_answer(settings: Any) -> None:
    port = free_port()
    settings.SPARK_REMOTE, settings.SPARK_MASTER = "", ""
    settings.SPARK_CONNECT_PORT = port
    target = spark_target.target_from_settings()
    assert target.remote == f"sc://127.0.0.1:{port}" and not target.expected
    reason = spark_sessions.not_ready(target)
    assert reason == (f"the Spark Connect server at sc://127.0.0.1:{port} does not answer "
                      "(the stack's own, which `make run` starts; or set SPARK_REMOTE or "
                      "SPARK_MASTER)")
    settings.SPARK_REMOTE = f"sc://127.0.0.1:{port}/;token=s3cret"
    target = spark_target.target_from_settings()
    assert target.expected  # configured: a worker waits for it before its first task
    assert "s3cret" not in (spark_sessions.not_ready(target) or "")


@pytest.mark.parametrize(("master", "here", "want"), [
    ("local[*]", True, os.cpu_count() or 1), ("local", True, 1),
    ("local[3]", False, 3), ("local[4, 2]", True, 4), ("local[*]", False, None),
    ("spark://host:7077", True, None), ("yarn", True, None), ("sc://elsewhere:15002", True, None),
])
def test_the_cores_of_a_local_spark_are_known_and_a_clusters_are_not(
    master: str, here: bool, want: int | None
) -> None:
    assert spark_target.cores_of(master, here=here) == want


@pytest.mark.parametrize(("url", "want"), [
    ("sc://127.0.0.1:15390", ("127.0.0.1", 15390)), ("sc://spark.example:443/;token=t", (
        "spark.example", 443)), ("sc://spark.example", ("spark.example", 15002)),
    ("sc://spark.example/;use_ssl=true", ("spark.example", 15002)),
    ("sc://[::1]:15390", ("::1", 15390)), ("sc://[::1]", ("::1", 15002)),
])
def test_a_connect_urls_host_and_port_default_to_sparks_port(
    url: str, want: tuple[str, int]
) -> None:
    assert spark_target.parse_url(url) == want


@pytest.mark.parametrize(("cores", "at_once", "want"), [
    (2, 2, 1), (2, 1, 2), (2, 8, 1), (8, 3, 3), (4, 0, 4), (None, 2, None),
])
def test_chunks_running_at_once_share_the_cores(
    cores: int | None, at_once: int, want: int | None
) -> None:
    assert spark_query.chunk_partitions(cores, at_once) == want


def test_the_run_servers_cores_are_read_from_its_master(spark_session: Any) -> None:
    # The test server runs local[2] on 127.0.0.1.
    target = spark_target.target_from_settings()
    assert spark_sessions.local_cores(spark_session, target) == 2


def test_file_partitions_are_set_for_a_chunk_and_the_sessions_own_come_back(
    spark_session: Any, tmp_path: Path
) -> None:
    conf = spark_session.conf
    conf.set(spark_query.MAX_PARTITION_BYTES, "64m")  # the session's own, before
    try:
        spark_query.file_partitions(spark_session, 1)
        assert conf.get(spark_query.MIN_PARTITIONS) == "1"
        assert int(conf.get(spark_query.MAX_PARTITION_BYTES)) >= 1 << 40
        spark_query.file_partitions(spark_session, 3)
        assert conf.get(spark_query.MIN_PARTITIONS) == "3"
        spark_query.file_partitions(spark_session, None)
        assert conf.get(spark_query.MAX_PARTITION_BYTES) == "64m"
        assert conf.get(spark_query.MIN_PARTITIONS, None) is None
        # Spark's reader follows them: two files, read in one partition, then in Spark's two.
        from pyspark.sql import functions as F

        def partitions() -> int:
            path = str(tmp_path / "two-files")
            spark_session.range(0, 1000, 1, 2).write.mode("overwrite").parquet(path)
            read = spark_session.read.parquet(path)
            return read.select(F.spark_partition_id().alias("p")).distinct().count()

        spark_query.file_partitions(spark_session, 1)
        assert partitions() == 1
        spark_query.file_partitions(spark_session, None)
        assert partitions() == 2
    finally:
        spark_query.file_partitions(spark_session, None)
        conf.unset(spark_query.MAX_PARTITION_BYTES)
