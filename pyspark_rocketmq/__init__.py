"""``format("rocketmq")`` in every Spark 4 session, with nothing to register.

Spark 4 looks, once per driver, for installed top-level modules named ``pyspark_*`` that
define ``DefaultSource`` (a ``pyspark.sql.datasource.DataSource``) and registers each under
its ``name()`` (SPARK-45917; ``spark.sql.pyspark.dataSource.staticImport.enabled``, on by
default). That look-up runs in a Python worker of the driver (``spark.pyspark.python`` /
``PYSPARK_PYTHON``), so the Python that has rmq-spark installed must be the one Spark runs.
This module is that entry point: the pyspark shell, notebooks, ``spark-sql`` (``CREATE TABLE
... USING rocketmq``) and a plain ``SparkSession.builder.getOrCreate()`` all find the source.
"""

from rmq_spark.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
