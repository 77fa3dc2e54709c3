"""PySpark integration: the `replog` data source (batch + streaming reads, sink).

    from replog.spark import register
    register(spark)   # then spark.read.format("replog") / df.write.format("replog")

Needs the `spark` extra: `pip install replog[spark]` (pyspark >= 4.2, pyarrow, pandas < 3).
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the `replog` format with a SparkSession."""
    from replog.spark.source import ReplogDataSource

    spark.dataSource.register(ReplogDataSource)


__all__ = ["register"]
