# memstat: build, run the main job on the embedded default, test, benchmark.
GO      ?= go
BIN     := bin/memstat
OUT     := out
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/memstat/memstat/internal/command/root.Version=$(VERSION)

.PHONY: all build run test vet fuzz bench fidelity install clean

all: build

# A single static binary: no cgo, no Python, no torch.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/memstat

# The main job: record the default workload on the embedded allocator and
# print its memory_stats.
run: build
	@mkdir -p $(OUT)
	$(BIN) record -o $(OUT)/default.pickle
	$(BIN) stats $(OUT)/default.pickle

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)

# Unit, golden, differential (CPython, gopickle) and real-snapshot tests;
# tests that need ../shared/testdata/real or python3 skip with a message
# when those are absent. scripts/testsummary prints go test's usual lines
# plus a "skipped:" line per skipped test and reason (plain go test shows
# skip messages only under -v).
test: vet
	$(GO) test -count=1 -json $(PKGS) | $(GO) run ./scripts/testsummary

# The round-trip harness at length: FIDELITY_RUNS random workloads per
# allocator setting and PyTorch release are recorded, written, read back
# and replayed; the table (README, "Fidelity") gives the share whose exact
# figures all equal the simulator's and whose bounds all hold.
FIDELITY_RUNS ?= 200
fidelity:
	$(GO) test -count=1 -timeout 60m -run '^TestRoundTrip$$' ./pkg/replay -v -roundtrip.runs=$(FIDELITY_RUNS) -roundtrip.table | grep -v '^=== RUN\|^--- PASS\|^PASS$$\|^ok \|^    '

# A short run of every fuzz target (CI runs this too): the decoder, the
# reader, trace --stream's lazy reading against the ordinary one, its skim
# in pieces against the skim in order, every
# command from bytes to output (replay, what-if, advise, export, report,
# trace, ...), workload files and rules files. Each runs a
# number of inputs (about 10 s each on a 2-core machine), not a duration: a
# duration (-fuzztime=10s) can fail at its end with "context deadline
# exceeded" and no failing input, a race in Go's fuzz coordinator
# (golang/go#75804, fixed in Go 1.27). A new interesting input is
# minimized for at most 500 runs (Go's default is up to 60 s each, which
# stalled a CI run for a minute). FUZZTIME=30s (or 5000x) sets one budget
# for all seven.
FUZZ_DECODE ?= 40000x
FUZZ_READ ?= 20000x
FUZZ_STREAMLAZY ?= 5000x
FUZZ_SKIMSPLIT ?= 10000x
FUZZ_COMMANDS ?= 600x
FUZZ_WORKLOAD ?= 200000x
FUZZ_RULES ?= 200000x
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_DECODE)) ./pkg/pickle
	$(GO) test -run='^$$' -fuzz='^FuzzRead$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_READ)) ./pkg/snapshot
	$(GO) test -run='^$$' -fuzz='^FuzzStreamLazy$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_STREAMLAZY)) ./pkg/snapshot
	$(GO) test -run='^$$' -fuzz='^FuzzSkimSplit$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_SKIMSPLIT)) ./pkg/pickle
	$(GO) test -run='^$$' -fuzz='^FuzzCommands$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_COMMANDS)) ./internal/command/root
	$(GO) test -run='^$$' -fuzz='^FuzzWorkloadFile$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_WORKLOAD)) ./pkg/workload
	$(GO) test -run='^$$' -fuzz='^FuzzRulesFile$$' -fuzzminimizetime=500x -fuzztime=$(or $(FUZZTIME),$(FUZZ_RULES)) ./pkg/check

# Benchmarks; figures go to BENCHMARKS.md (see bench/run.sh). QUICK=1 make
# bench checks the script in a few minutes on small files (figures to
# bench/out/BENCHMARKS.quick.md).
bench: build
	./bench/run.sh

install:
	CGO_ENABLED=0 $(GO) install -trimpath -ldflags '$(LDFLAGS)' ./cmd/memstat

clean:
	rm -rf bin $(OUT)
