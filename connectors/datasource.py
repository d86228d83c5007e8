"""The ``dedup-broker`` format for Spark's Python Data Source API (pyspark 4.2+).

Register it once per SparkSession, then use it like any format::

    from connectors.datasource import DedupBrokerDataSource

    spark.dataSource.register(DedupBrokerDataSource)
    df = (spark.readStream.format("dedup-broker")
          .option("serviceUrl", "pulsar://localhost:6650")
          .option("adminUrl", "http://localhost:8080")
          .option("topic", "orders").load())
    (df.writeStream.format("dedup-broker")
       .option("serviceUrl", "pulsar://localhost:6650").option("topic", "orders-out")
       .option("name", "orders-query")
       .option("checkpointLocation", "/checkpoints/orders").start())

Reading: ``connectors.datasource_reader``; writing: ``connectors.datasource_writer``;
options, columns and guarantees: docs/spark.md, "Data Source API".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from connectors.datasource_reader import SCHEMA, BatchReader, SourceOptions, StreamReader
from connectors.datasource_writer import (
    ArrowBatchWriter,
    ArrowStreamWriter,
    BatchWriter,
    StreamWriter,
)
from connectors.sink_options import ClientKind

FORMAT = "dedup-broker"


class DedupBrokerDataSource(DataSource):
    """Topics of the broker as a streaming and batch source and sink."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return StreamReader(SourceOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if _client(self.options) is ClientKind.OFFICIAL:
            return BatchWriter(self.options, schema)
        return ArrowBatchWriter(self.options, schema)

    def streamWriter(  # noqa: N802 - Spark's name
        self, schema: StructType, overwrite: bool
    ) -> DataSourceStreamWriter:
        if _client(self.options) is ClientKind.OFFICIAL:
            return StreamWriter(self.options, schema)
        return ArrowStreamWriter(self.options, schema)


def _client(options: Mapping[str, str]) -> ClientKind:
    """The ``client`` option: ``lean`` (default) or ``official``."""
    return ClientKind(options.get("client") or ClientKind.LEAN.value)


def register(spark: Any) -> None:
    """Make ``format("dedup-broker")`` known to ``spark`` (once per SparkSession)."""
    spark.dataSource.register(DedupBrokerDataSource)
