# kafkastreams: the two commands of the README are `make run` and `make test`.
# CI runs .ci/run, which installs what a fresh machine lacks, starts dockerd,
# then uses the targets below.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

# The Kafka version has one home: <kafka.version> in the pom (kafkaenv's
# DefaultKafkaVersion is checked against it by a unit test).
KAFKA_POM     := integration/kafkaenv/pom.xml
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' $(KAFKA_POM))
KAFKA_LIBS    := .cache/kafka/$(KAFKA_VERSION)/libs
KAFKA_IMAGE   := kafkastreams/kafka:$(KAFKA_VERSION)

UNIT_TIMEOUT        ?= 10m
INTEGRATION_TIMEOUT ?= 50m
# INTEGRATION_RUN selects integration tests by name (go test -run), e.g. TestPrimitives.
INTEGRATION_RUN     ?=

.PHONY: all test unit integration scenarios bench chaos soak difftest kafka-jars kafka-image proto proto-check run run-stream run-prism vet fmt-check lint clean

all: test

## test: unit tests, then the integration tests against a real Kafka broker.
test: unit integration

## unit: every package except integration/ (no broker needed), after
## checking that every Go file is gofmt-ed (fmt-check).
unit: fmt-check
	$(GO) test -count=1 -timeout $(UNIT_TIMEOUT) $$($(GO) list ./... | grep -v '/integration$$')

## integration: the scenario tests in integration/; one broker per package,
## in a container when a Docker daemon answers (the image is built first),
## else a local java process (the jars are fetched first).
integration: kafka-jars
	@if docker info >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory kafka-image; \
	else \
	  echo "make: no Docker daemon answers: the integration tests will start Kafka as a local process"; \
	fi
	@mkdir -p .cache
	@echo "make: integration tests against a real Kafka broker (several minutes; full log in .cache/integration.log)"
	@set +e; $(GO) test -count=1 -timeout $(INTEGRATION_TIMEOUT) -run '$(INTEGRATION_RUN)' -v ./integration/ 2>&1 | tee .cache/integration.log \
	  | grep -a --line-buffered -E '^(\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS|integration: broker|\s+[a-z_]+_test\.go:[0-9]+: )' | sed -u -E 's/^(.{400}).*/\1/'; \
	  status=$${PIPESTATUS[0]}; set -e; \
	  if [[ $$status -ne 0 ]]; then \
	    echo; echo "make: integration tests FAILED; the failures (details in .cache/integration.log):"; \
	    grep -a -E -v 'level=INFO|^time=|^%[0-9]' .cache/integration.log | grep -a -E -B12 '^\s*--- FAIL' | head -120; exit $$status; \
	  fi

## chaos: SIGKILL random instances of a stateless and a GroupByKey job again
## and again (2-3 running, 4-6 kills, each replaced), then check every element
## and pane once and every survivor's counters; then the unbounded scenario
## job under a steady load for KAFKASTREAMS_CHAOS_MINUTES (default 3) with
## 1-3 instances SIGKILLed, SIGTERMed and started at random, its output
## checked exactly. Ten minutes or more; not part of `make test`.
## CHAOS_COUNT=N repeats it; the seed is logged (KAFKASTREAMS_CHAOS_SEED
## replays a schedule).
CHAOS_COUNT ?= 1
chaos: kafka-jars
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory kafka-image; fi
	KAFKASTREAMS_CHAOS=1 $(GO) test -count=$(CHAOS_COUNT) -run '^TestChaos$$' -v -timeout 60m ./integration/ 2>&1 | grep -v -E '^(kafkaenv|time=|[0-9]{4}/)'

## soak: issue 23's Kafka system test (integration/soak_test.go, TestSoak;
## its short version runs in make test): the scenario job on a 3-node
## KRaft cluster (replication factor 3, min.insync.replicas 2) under a
## steady load for MINUTES (default 30) of random instance faults (SIGKILL,
## SIGSTOP past the session and transaction timeouts then SIGCONT, SIGTERM;
## 1-3 running) and node faults (SIGTERM, SIGKILL, the active controller
## among them; each node restarted, one down at a time); then the output
## checked exactly. Prints the lines "figures soak: …"; the full log in
## .cache/soak.log. The seed is logged; KAFKASTREAMS_SOAK_SEED=<seed>
## replays a schedule.
SOAK_MINUTES = $(or $(MINUTES),30)
soak: kafka-jars
	@mkdir -p .cache
	@echo "make: soak for $(SOAK_MINUTES) minutes of faults (full log in .cache/soak.log)"
	@set +e; KAFKASTREAMS_SOAK_MINUTES=$(SOAK_MINUTES) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout $$(( $(SOAK_MINUTES) + 40 ))m ./integration/ 2>&1 | tee .cache/soak.log \
	  | grep -a --line-buffered -E '^(\s*--- (PASS|FAIL)|ok|FAIL|PASS|\s+soak_test\.go:[0-9]+: |\s+scenarios_test\.go:[0-9]+: (figures|soak)|\s{4,}[+-]?[0-9.]+s )' | sed -u -E 's/^(.{600}).*/\1/'; \
	  exit $${PIPESTATUS[0]}

## difftest: the randomized differential test against Prism
## (integration/difftest_test.go) on more seeds than make test's: N=n runs
## n random seeds, MINUTES=m as many as fit in m minutes (one of them is
## needed); the first seed is logged, KAFKASTREAMS_DIFFTEST_SEED=s replays
## one. Full log in .cache/difftest.log; each difference is printed with its
## seed and a minimal pipeline (lines "DIFFERENCE seed …").
N ?=
MINUTES ?=
DIFFTEST_TIMEOUT ?= 300m
difftest: kafka-jars
	@if [[ -z "$(N)$(MINUTES)$${KAFKASTREAMS_DIFFTEST_SEED:-}$${KAFKASTREAMS_DIFFTEST_SPEC:-}" ]]; then echo "make: difftest needs N=<seeds> or MINUTES=<minutes> (or KAFKASTREAMS_DIFFTEST_SEED=<seed>, KAFKASTREAMS_DIFFTEST_SPEC=<json>)" >&2; exit 2; fi
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory kafka-image; fi
	@mkdir -p .cache
	@set +e; KAFKASTREAMS_DIFFTEST_N=$(N) KAFKASTREAMS_DIFFTEST_MINUTES=$(MINUTES) $(GO) test -count=1 -timeout $(DIFFTEST_TIMEOUT) -run '^TestDifferential$$' -v ./integration/ 2>&1 | tee .cache/difftest.log \
	  | grep -a --line-buffered -E '^(\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS|integration: broker|\s+difftest_test\.go:[0-9]+: (difftest|DIFFERENCE|seed [0-9]+: [^0-9])|\s{4,}\S)' | sed -u -E '/replay:/!s/^(.{400}).*/\1/'; \
	  exit $${PIPESTATUS[0]}

## scenarios: the six scenarios of an unbounded job (steady, scale-out,
## clean scale-in, SIGKILL, reassignment, broker failover on a 3-node
## KRaft cluster; integration/scenarios_test.go) for
## minutes each at 1 000 records/s (their short versions run in make test);
## prints each scenario's figures (the lines "figures <scenario>: …");
## then the SIGKILL handover of 1 GiB of GroupByKey state with
## --standby_replicas=1 (TestStandbySIGKILLRestoresTheTail,
## KAFKASTREAMS_STANDBY_MB=1024; 10 MiB in make test).
scenarios: kafka-jars
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory kafka-image; fi
	KAFKASTREAMS_SCENARIOS=long $(GO) test -count=1 -run '^TestScenario' -v -timeout 60m ./integration/ 2>&1 | grep -a -E '^(\s*--- (PASS|FAIL)|ok|FAIL|\s+scenarios_test\.go:[0-9]+: )'
	KAFKASTREAMS_STANDBY_MB=1024 $(GO) test -count=1 -run '^TestStandbySIGKILLRestoresTheTail$$' -v -timeout 60m ./integration/ 2>&1 | grep -a -E '^(\s*--- (PASS|FAIL)|ok|FAIL|\s+standby_test\.go:[0-9]+: )'

## bench: this runner's start-up (Execute to the first record read) against
## a bare consumer's first read, its stateless stage against a plain
## transactional copy loop, a GroupByKey stage (100 000 keys, 1 M values)
## against the stateless stage, a Kafka source stage against the copy loop,
## each pair on the same broker in the same run; BenchmarkInstances: one
## GroupByKey job as 1, 2 and 3 instances (values/s, CPU s per M values);
## BenchmarkPartitions: a Kafka source stage into a GroupByKey at 4, 32,
## 128 and 512 partitions, 2 rounds of alternating order (medians), its
## records/s and report records per data record (env
## KAFKASTREAMS_BENCH_PARTITIONS_COUNTS=4,128 and _ROUNDS=3 choose); then
## BenchmarkScale: the
## main job (cmd/commitactivity, the windows of `make run`) as a child
## process on this runner and on Prism, over git-commits.csv and over SCALE
## synthetic events (comma-separated sizes), its wall time, events/s and
## peak RSS (Prism is skipped where its projected memory does not fit the
## machine). Prints ONE table of issue 13's goals (cmd/benchtable; the full
## output in .cache/bench.log) and writes BENCH_PLOT, wall time against
## input size for both runners. `make bench` took 26-44 minutes here;
## `make bench SCALE=100000,300000` is a quick run. BENCH=Scale runs only
## the benchmarks it names (a regexp of names without "Benchmark");
## BENCH_MEMORY_GB=g runs Prism only where it is projected to need at most
## g GB (default: 80% of the machine's available memory).
## BenchmarkKafkaStreams (issue 24): a windowed sum on this runner and as
## the Kafka Streams application integration/kstreamsbench (1 and 2
## threads, built here with mvn when its sources change), 2 alternating
## rounds of 1 M and of 10 M records (KS=1M runs the first only, about
## 5 minutes less), then a 60 s steady run at 2 000 records/s (KS_STEADY=0
## skips it):
## wall, CPU s (process, broker), peak RSS, latency p50/p99; then the
## restore of a 1 GiB changelog partition both ways (KS_RESTORE=256M sets
## its size, 0 skips it): MB/s, seconds, CPU s.
SCALE         ?= 1000000,3000000,10000000
KS            ?= 1M,10M
KS_STEADY     ?= 60s
KS_RESTORE    ?= 1G
BENCH         ?= Startup|StatelessStage|GroupByKeyStage|KafkaSourceStage|Instances|Partitions|KafkaStreams|Scale
KS_DIR        := integration/kstreamsbench
KS_JAR        := $(KS_DIR)/target/kstreamsbench.jar
BENCH_PLOT    ?= cmd/benchtable/bench-scale.png
BENCH_TIMEOUT ?= 180m
BENCH_MEMORY_GB ?=
bench: kafka-jars $(KS_JAR)
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory kafka-image; fi
	$(GO) build -o bin/commitactivity ./cmd/commitactivity
	@mkdir -p .cache
	@set +e; KAFKASTREAMS_BENCH_SCALE='$(SCALE)' KAFKASTREAMS_BENCH_MEMORY_GB='$(BENCH_MEMORY_GB)' KAFKASTREAMS_BENCH_COMMITACTIVITY=$(abspath bin/commitactivity) \
	  KAFKASTREAMS_BENCH_KS='$(KS)' KAFKASTREAMS_BENCH_KS_STEADY='$(KS_STEADY)' KAFKASTREAMS_BENCH_KS_RESTORE='$(KS_RESTORE)' KAFKASTREAMS_BENCH_KS_JAR=$(abspath $(KS_JAR)) \
	  $(GO) test -count=1 -run '^$$' -bench '^Benchmark($(BENCH))$$' -benchtime=1x -timeout $(BENCH_TIMEOUT) ./integration/ 2>&1 | tee .cache/bench.log \
	  | grep -a --line-buffered -E '^(Benchmark|ok|FAIL|PASS|---|\s+(bench|startup_bench|scale_bench|partitions_bench|kstreams_bench|kstreams_restore)_test)'; \
	  status=$${PIPESTATUS[0]}; set -e; \
	  $(GO) run ./cmd/benchtable --in=.cache/bench.log --plot='$(BENCH_PLOT)'; \
	  exit $$status

## The Kafka Streams application of BenchmarkKafkaStreams and its runtime
## jars (target/lib), from Maven Central, Kafka Streams of the broker's
## version; rebuilt when its pom, its source or the Kafka version changes.
$(KS_JAR): $(KS_DIR)/pom.xml $(KAFKA_POM) $(shell find $(KS_DIR)/src -name '*.java' 2>/dev/null)
	@command -v mvn >/dev/null || { echo "make: mvn not found: install Maven (apt-get install maven)" >&2; exit 1; }
	@rm -rf $(KS_DIR)/target/lib
	MAVEN_OPTS="-Djansi.passthrough=false -Dstyle.color=never" mvn -B -q -Dstyle.color=never -Dkafka.version=$(KAFKA_VERSION) -f $(KS_DIR)/pom.xml package dependency:copy-dependencies
	@touch $@

## kafka-jars: the Kafka broker jars from Maven Central into .cache/.
kafka-jars: $(KAFKA_LIBS)/.complete

$(KAFKA_LIBS)/.complete: $(KAFKA_POM)
	@command -v mvn >/dev/null || { echo "make: mvn not found: install Maven (apt-get install maven); the Kafka jars come from Maven Central" >&2; exit 1; }
	@rm -rf $(KAFKA_LIBS)
	@echo "make: fetching org.apache.kafka:kafka_2.13:$(KAFKA_VERSION) and its dependencies from Maven Central into $(KAFKA_LIBS)"
	@MAVEN_OPTS="-Djansi.passthrough=false -Dstyle.color=never" mvn -B -q -Dstyle.color=never -f $(KAFKA_POM) dependency:copy-dependencies \
	  -DoutputDirectory=$(abspath $(KAFKA_LIBS)) \
	  || { echo "make: fetching org.apache.kafka:kafka_2.13:$(KAFKA_VERSION) and its dependencies from Maven Central failed (see above)" >&2; exit 1; }
	@touch $@

## kafka-image: the FROM-scratch broker image (skipped when its inputs are unchanged).
kafka-image: kafka-jars
	KAFKA_VERSION=$(KAFKA_VERSION) KAFKA_LIBS=$(abspath $(KAFKA_LIBS)) KAFKA_IMAGE=$(KAFKA_IMAGE) \
	  bash integration/kafkaenv/image/build.sh

## proto: regenerate the Go code of proto/.
proto:
	@test -f proto/gen.sh || { echo "make: proto/gen.sh does not exist yet" >&2; exit 1; }
	bash proto/gen.sh

## proto-check: fail if the generated code differs from what is committed.
proto-check: proto
	git diff --exit-code -- proto/
	@untracked="$$(git ls-files --others --exclude-standard -- proto/)"; \
	if [[ -n "$$untracked" ]]; then echo "make: untracked generated files: $$untracked" >&2; exit 1; fi

## run: the main job (cmd/commitactivity) over git-commits.csv on a local
## Kafka broker it starts and stops (a container when a Docker daemon
## answers, else a java process; $$KAFKA_BOOTSTRAP_SERVERS if set), with
## --runner=kafkastreams as INSTANCES OS processes sharing the work; prints
## the table once and the wall time (cmd/commitactivity/run.sh).
INSTANCES ?= 1
run:
	$(GO) build -o bin/localkafka ./cmd/localkafka
	$(GO) build -o bin/commitactivity ./cmd/commitactivity
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory kafka-image; fi
	INSTANCES=$(INSTANCES) bash cmd/commitactivity/run.sh

## run-stream: the streaming variant of the main job on a local broker
## started as for `make run`: git-commits.csv loaded into a topic in arrival
## order (4 partitions, keyed by area, CreateTime = event time), then the
## same windows over a bounded kafkaio.Read of it, with a 30-day
## out-of-orderness watermark, 365 days of allowed lateness and late panes,
## written to an output topic with kafkaio.Write; prints the final table,
## the on-time, late and dropped rows, the check (final panes + dropped =
## every input row; the target fails if it does not hold) and the wall time
## (cmd/commitactivity/run-stream.sh).
run-stream:
	$(GO) build -o bin/localkafka ./cmd/localkafka
	$(GO) build -o bin/commitactivity ./cmd/commitactivity
	@if docker info >/dev/null 2>&1; then $(MAKE) --no-print-directory kafka-image; fi
	bash cmd/commitactivity/run-stream.sh

## run-prism: the same job on Prism (Beam's local runner, in-process) for
## comparison: no broker; prints the table and the wall time.
run-prism:
	$(GO) build -o bin/commitactivity ./cmd/commitactivity
	./bin/commitactivity --runner=prism --output=bin/commitactivity-prism.csv

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [[ -n "$$out" ]]; then echo "make: not gofmt-ed:"; echo "$$out"; exit 1; fi

lint: vet fmt-check

clean:
	rm -rf .cache bin $(KS_DIR)/target
