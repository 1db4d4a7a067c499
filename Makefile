# rmq-spark: every entry point bootstraps what it needs (venv, pinned deps, Delta jars).
#   make run     the end-to-end demo
#   make cluster the demo over a cluster: name server, two brokers, one killed and restarted
#   make test    lint + the whole test suite (what CI runs)
#   make bench   the benchmarks in bench/ (figures go to BENCHMARKS.md by hand)
#   make bench-peers  reput catch-up vs Kafka -> Delta, side by side (BENCH_ARGS=--short)
#   make lint    ruff check + ruff format --check
#   make package dist/rmq_spark-<version>.zip for a cluster's executors (spark-submit --py-files)
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
DEPS_STAMP := $(VENV)/.deps-installed
JARS_STAMP := jars/manifest.txt
ROCKETMQ_JARS_STAMP := jars/rocketmq/manifest.txt
ROCKETMQ4_JARS_STAMP := jars/rocketmq4/manifest.txt
LINK_STAMP := $(VENV)/.delta-jars-linked
NATIVE_FRONT := build/native-front/rmq-front
NATIVE_CRC := build/native-crc/libcrc_slices.so
HADOOP_FS_JAR := build/rmq-spark-hadoop-fs.jar
ZIP_BYTECODE_STAMP := $(VENV)/.pyspark-zip-bytecode
PYTEST_ARGS ?=
# Test processes: most slow tests wait on subprocesses (brokers, JVMs, name servers), so two
# workers fill two cores; a module stays in one worker (its fixtures start one JVM each).
# TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2

.PHONY: setup bytecode class-archive run cluster test test-fast lint format bench bench-peers package clean help

help:
	@sed -n '1,9p' Makefile

setup: $(DEPS_STAMP) $(JARS_STAMP) $(LINK_STAMP) $(ROCKETMQ_JARS_STAMP) $(ROCKETMQ4_JARS_STAMP) \
	$(NATIVE_FRONT) $(NATIVE_CRC) $(HADOOP_FS_JAR) $(ZIP_BYTECODE_STAMP) bytecode class-archive

$(DEPS_STAMP): pyproject.toml requirements.lock scripts/bootstrap_venv.sh
	@scripts/bootstrap_venv.sh
	@touch $@

$(JARS_STAMP): scripts/delta-jars.pom.xml scripts/fetch_jars.sh
	@scripts/fetch_jars.sh

# RocketMQ's name server and admin tools (rmq-spark namesrv / mqadmin): a folder of their own,
# never linked into pyspark (link_jars.sh links jars/manifest.txt only).
$(ROCKETMQ_JARS_STAMP): scripts/rocketmq-jars.pom.xml scripts/fetch_rocketmq_jars.sh | $(JARS_STAMP)
	@scripts/fetch_rocketmq_jars.sh

# RocketMQ 4.9.8's Java client, for the tests of the broker's remoting port: its own folder too.
$(ROCKETMQ4_JARS_STAMP): scripts/rocketmq4-jars.pom.xml scripts/fetch_rocketmq4_jars.sh | $(JARS_STAMP)
	@scripts/fetch_rocketmq4_jars.sh

# The broker's native gRPC front, built with Go from the module proxy: the default
# (broker.grpc_front = "auto") runs it when it is built, else grpc.aio, so a machine without Go
# only warns.
$(NATIVE_FRONT): $(DEPS_STAMP) $(wildcard native/front/*.go native/front/go.mod native/front/go.sum)
	@$(BIN)/python -m rmq_spark.broker.grpc.native_front || \
		echo "warning: no native gRPC front (without Go the broker serves gRPC with grpc.aio)"

# The readers' and a slave's CRC of many records in one call (rmq_spark/store/crc.py): C with
# no dependency (zlib-ng's function is handed in at run time); without a compiler the same
# checks run one Python call a record, so a machine without cc only warns.
$(NATIVE_CRC): native/crc/crc_slices.c
	@mkdir -p $(@D)
	@$(CC) -O2 -fPIC -shared -o $@ $< || \
		echo "warning: no native CRC loop (without a C compiler the readers check each record's CRC in Python)"

$(LINK_STAMP): $(DEPS_STAMP) $(JARS_STAMP) scripts/link_jars.sh
	@scripts/link_jars.sh
	@touch $@

# Hadoop's local file system without a fork per file written (jvm/hadoop-fs), built with the
# JDK against pyspark's Hadoop jar and linked into pyspark/jars; sessions use it when present.
$(HADOOP_FS_JAR): $(DEPS_STAMP) scripts/build_hadoop_fs.sh $(wildcard jvm/hadoop-fs/org/rmqspark/hadoop/*.java)
	@scripts/build_hadoop_fs.sh

# Bytecode in pyspark.zip and py4j's zip, which Spark puts first on its Python processes'
# path: without it each process compiles PySpark (~0.5 s of every streaming query's start).
$(ZIP_BYTECODE_STAMP): $(DEPS_STAMP) rmq_spark/spark/zip_bytecode.py
	@$(BIN)/python -m rmq_spark.spark.zip_bytecode
	@touch $@

# Bytecode of our own package, beside its sources (__pycache__, not in git): a process whose
# environment sets PYTHONDONTWRITEBYTECODE, as many containers do, never writes it and so
# compiles every module it imports, each time (~0.5 s of each CLI command, ~0.2 s of each
# Python process Spark starts). Run each time: only what changed is compiled again, and a
# stale .pyc is never used (Python checks it against its source).
bytecode: $(DEPS_STAMP)
	@$(BIN)/python -m compileall -q rmq_spark pyspark_rocketmq

# The Spark driver's class-data archive (rmq_spark/spark/class_archive.py): a short Spark run
# writes it once per JDK and Spark jars (~45 s; every later session starts ~2 s sooner). Run
# each time: it ends at once when the archive for this JDK and these jars is there.
class-archive: $(DEPS_STAMP) $(LINK_STAMP) $(HADOOP_FS_JAR) $(ZIP_BYTECODE_STAMP)
	@$(BIN)/python -m rmq_spark.spark.class_archive_build || \
		echo "warning: no class-data archive (Spark sessions start ~2 s slower)"

run: setup
	$(BIN)/rmq-spark demo $(DEMO_ARGS)

cluster: setup
	$(BIN)/rmq-spark demo --brokers 2 $(DEMO_ARGS)

lint: $(DEPS_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(DEPS_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: setup lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not spark and not slow" $(PYTEST_ARGS)

bench: setup
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

bench-peers: setup
	flock /tmp/bench.lock $(BIN)/python bench/peers/run.py $(BENCH_ARGS)

package: $(DEPS_STAMP) $(NATIVE_CRC)
	$(BIN)/python scripts/package.py

clean:
	rm -rf .pytest_cache .ruff_cache .hypothesis spark-warehouse metastore_db derby.log work
