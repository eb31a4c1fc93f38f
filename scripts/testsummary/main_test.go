package main

import (
	"strings"
	"testing"
)

// A go test -json stream (trimmed from a real one): a passing test that
// logs, a skip, two subtests skipped for one reason, a failing test.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"m/a","Test":"TestA","Output":"    a_test.go:3: hello\n"}
{"Action":"pass","Package":"m/a","Test":"TestA"}
{"Action":"output","Package":"m/a","Test":"TestB","Output":"    a_test.go:4: no shared here; skipping\n"}
{"Action":"output","Package":"m/a","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestB"}
{"Action":"output","Package":"m/a","Test":"TestC/x","Output":"    a_test.go:5: no shared here; skipping\n"}
{"Action":"skip","Package":"m/a","Test":"TestC/x"}
{"Action":"output","Package":"m/a","Test":"TestC/y","Output":"    a_test.go:5: no shared here; skipping\n"}
{"Action":"skip","Package":"m/a","Test":"TestC/y"}
{"Action":"pass","Package":"m/a","Test":"TestC"}
{"Action":"output","Package":"m/a","Output":"PASS\n"}
{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.01s\n"}
{"Action":"pass","Package":"m/a"}
{"Action":"output","Package":"m/b","Test":"TestD","Output":"=== RUN   TestD\n"}
{"Action":"output","Package":"m/b","Test":"TestD","Output":"    b_test.go:3: boom\n"}
{"Action":"output","Package":"m/b","Test":"TestD","Output":"--- FAIL: TestD (0.00s)\n"}
{"Action":"fail","Package":"m/b","Test":"TestD"}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.01s\n"}
{"Action":"fail","Package":"m/b"}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	failed, err := summarize(strings.NewReader(stream), &out)
	if err != nil || !failed {
		t.Fatalf("failed %v, err %v: a failing package must fail the run", failed, err)
	}
	want := "ok  \tm/a\t0.01s\n" +
		"    b_test.go:3: boom\n--- FAIL: TestD (0.00s)\nFAIL\nFAIL\tm/b\t0.01s\n" +
		"skipped 3 tests (a.TestB, a.TestC): no shared here; skipping\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestPassingRunAndEmptyInput(t *testing.T) {
	pass := strings.Join(strings.Split(stream, "\n")[:15], "\n")
	var out strings.Builder
	if failed, err := summarize(strings.NewReader(pass), &out); failed || err != nil {
		t.Errorf("a passing run: failed %v, err %v", failed, err)
	}
	if failed, err := summarize(strings.NewReader("go: go.mod file not found\n"), &out); !failed || err == nil {
		t.Errorf("no package reported: failed %v, err %v; want a failure", failed, err)
	}
}
