"""The workload whose classes the image's class-data sharing archive holds (docker/cds.sh): a
local Spark job that starts a SparkContext, runs Python tasks through a shuffle, and a SQL
aggregation, so that the archive has what an executor JVM loads to start and run a task (local
mode runs the executor in the same JVM)."""

from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[1]").appName("eddy-cds").config("spark.ui.enabled", "false").getOrCreate()
pairs = spark.sparkContext.parallelize(range(1000), 2).map(lambda n: (n % 7, 1)).reduceByKey(lambda a, b: a + b)
assert sum(count for _, count in pairs.collect()) == 1000
assert spark.range(1000).selectExpr("id % 3 AS k").groupBy("k").count().count() == 3
spark.stop()
