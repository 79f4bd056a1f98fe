# Eddy's entry points. `make test` is what CI runs (.ci/run); `make demo` runs the word-count
# example locally. Every target sets up what it needs (Python env, Kafka jars, Kubernetes
# binaries, the node's Debian packages, the container images) and caches it: .venv/ and .cache/
# are git-ignored.

PY      := .venv/bin/python
PYTEST  := $(PY) -m pytest
# each test lane's JUnit report, for infra/test_failures.py
REPORTS := .cache/test-reports
export EDDY_CACHE ?= $(CURDIR)/.cache

.PHONY: setup setup-go setup-control-plane setup-node setup-go-meanwhile setup-fetched setup-python setup-images setup-images-meanwhile test test-before-e2e test-apps test-kafka-only test-on-control-plane test-unit test-properties test-integration test-e2e lint demo bench-failover bench-autoscale chaos clean-cache

# In two lanes at once: the Go builds keep both cores busy while the other lane mostly waits on
# downloads (pip, the Kafka jars, Debian packages, the image's debootstrap). Their logs interleave
# as they come (each script names itself in its lines; make's output sync would hold a 20-minute
# build's lines until it ends).
setup:
	@$(MAKE) --no-print-directory -j2 setup-go setup-fetched

setup-go: setup-control-plane
	@$(MAKE) --no-print-directory setup-node

setup-control-plane:
	$(call timed,infra/k8s/k8s.sh build control-plane)

# Only the e2e stage's real nodes need these (the integration stage's nodes are kwok's).
setup-node:
	$(call timed,infra/k8s/k8s.sh build node)
	$(call timed,infra/cluster/node.sh build)

setup-fetched: setup-python setup-images

setup-python:
	$(call timed,infra/python-env.sh)
	$(call timed,infra/kafka/kafka.sh fetch)

# The real nodes' Debian packages and the images they run; of the tests before the e2e stage only
# tests/infra/test_image.py needs them (marked `image`).
setup-images:
	$(call timed,infra/cluster/packages.sh)
	$(call timed,infra/image/image.sh build)

# $(call timed,COMMAND): runs it, then says how long it took (CI's log keeps only what is printed).
timed = @start=$$(date +%s); $(1) && echo "setup: $(1): $$(( $$(date +%s) - start )) s"

# Stages run cheapest first; each fails the run on any failure, including "no tests collected".
# Before the e2e stage, five lanes at once (`-Oline`: each command's output printed whole, when it
# ends, so that two test sessions' lines never mix):
#   - the apps' lane: lint, unit, properties, then the integration tests without the control
#     plane or the images, on Spark (about two thirds of both cores);
#   - the Kafka lane: the integration tests that need a broker but no Spark (KAFKA_ONLY_TESTS: the
#     state core, the fences, the Kafka clusters; a session of their own, with a broker of its own).
#     In the apps' lane they left a third of both cores idle for 14 minutes once the control
#     plane's lane was done (the CI run of 2026-11-29: the apps' lane 23 min, that one 9);
#   - the control plane's lane: its integration tests (the operator on kwok's nodes, the chart,
#     leader election: a third of both cores) as soon as `k8s.sh build control-plane` has its
#     binaries (it waits for the build under way), then the image's once `image.sh build` has it;
#   - the Go builds (~20 min of both cores from an empty Go cache) and
#   - the node's Debian packages and the images, both at nice 19, on what the tests leave idle.
# The e2e stage starts once every lane has ended. A failed stage ends with the names of the tests
# that failed, from each lane's JUnit report (infra/test_failures.py): a CI log keeps the tail.
test:
	@rm -rf $(REPORTS)
	@$(MAKE) --no-print-directory -j5 -Oline test-before-e2e || { python3 infra/test_failures.py $(REPORTS); exit 1; }
	@$(MAKE) --no-print-directory test-e2e || { python3 infra/test_failures.py $(REPORTS); exit 1; }

test-before-e2e: test-apps test-kafka-only test-on-control-plane setup-go-meanwhile setup-images-meanwhile

KAFKA_ONLY_TESTS := tests/state tests/infra tests/bench tests/operator/test_driverless.py tests/runtime/test_fences.py \
	tests/runtime/test_fenced_runner.py tests/runtime/test_topics.py tests/runtime/test_offsets.py tests/runtime/test_health.py

test-apps: setup-python
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory test-unit
	@$(MAKE) --no-print-directory test-properties
	$(PYTEST) -m "integration and not control_plane and not image" -q --durations=20 \
		--junitxml=$(REPORTS)/apps.xml $(addprefix --ignore=,$(KAFKA_ONLY_TESTS))

test-kafka-only: setup-python
	$(PYTEST) -m "integration and not control_plane and not image" -q --durations=10 \
		--junitxml=$(REPORTS)/kafka-only.xml $(KAFKA_ONLY_TESTS)

# (niced: if it comes first, the build it waits for is its own)
test-on-control-plane: setup-python
	@nice -n 19 $(MAKE) --no-print-directory setup-control-plane
	$(PYTEST) -m "integration and control_plane" -q --durations=10 --junitxml=$(REPORTS)/control-plane.xml
	@nice -n 19 $(MAKE) --no-print-directory setup-images
	$(PYTEST) -m "integration and image" -q --junitxml=$(REPORTS)/image.xml

setup-go-meanwhile:
	@nice -n 19 $(MAKE) --no-print-directory setup-go

setup-images-meanwhile:
	@nice -n 19 $(MAKE) --no-print-directory setup-images

# ruff; import circles and layering (infra/lint/import_cycles.py); mypy --strict (pyproject.toml).
lint:
	$(PY) -m ruff check .
	$(PY) infra/lint/import_cycles.py
	$(PY) -m mypy
	$(PY) -m mypy infra/lint

test-unit:
	$(PYTEST) -m unit -q --junitxml=$(REPORTS)/unit.xml

# The assignor's property tests again, with 400 examples each (tests/contract/conftest.py).
test-properties:
	EDDY_HYPOTHESIS_PROFILE=thorough $(PYTEST) -m unit -q tests/contract --junitxml=$(REPORTS)/properties.xml

# The slowest tests are listed at the end, so that a CI log shows where the stage's time went.
test-integration:
	$(PYTEST) -m integration -q --durations=20

# The slow end-to-end tests live in e2e/ and run in a stage of their own, on a real one-node
# cluster inside a network namespace of their own (pod and Service addresses never leave it).
test-e2e:
	infra/cluster/netns.sh $(PYTEST) e2e -m e2e -q --durations=13 --junitxml=$(REPORTS)/e2e.xml

# Failover figures on real pods (bench/failover_pods.py): several minutes.
bench-failover: setup
	infra/cluster/netns.sh $(PY) bench/failover_pods.py

# Autoscaling figures on real pods (bench/autoscale.py, docs/operations.md "Autoscaling"): a 3x step
# in the input rate, Eddy's autoscaler, Eddy with fixed executors and Kafka Streams under a KEDA-style
# rule; about half an hour a run. AUTOSCALE_ARGS passes options (`--repeat 3 --json out.json`).
bench-autoscale: setup
	infra/cluster/netns.sh $(PY) bench/autoscale.py $(AUTOSCALE_ARGS)

# The fault campaign (bench/chaos.py, docs/reliability.md): three real nodes, three brokers, 56 faults
# of seven kinds while data flows, then the verifier and the report; about an hour. CHAOS_ARGS
# passes options (`--seed 2 --faults 14 --out /tmp/chaos`).
chaos: setup
	infra/cluster/netns.sh $(PY) bench/chaos.py $(CHAOS_ARGS)

# Needs only the Python env: `eddy run` starts its own Kafka broker (fetching the jars on first use).
demo:
	infra/python-env.sh
	.venv/bin/eddy run examples/wordcount/streamapp.yaml

clean-cache:
	rm -rf .cache .venv
