package oom

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/memstat/memstat/internal/cmdtest"
	"github.com/memstat/memstat/internal/fixture"
)

// TestFreeMemoryInPrivatePools: a 600 MiB request fails while a CUDA
// graph's pool holds 612 MiB free (internal/command/testdata/pool_oom.mem):
// the device had 204 MiB free, so the cache's free memory would have
// covered the request, but PyTorch's malloc looks only in the request's
// pool (DeviceCachingAllocator::get_pool) and release_cached_blocks keeps
// a live pool's segments. The verdict says so with the figure, in text
// and JSON; at 2.8, whose trace entries carry no pool_id, it says the
// request's pool was taken as the default pools.
func TestFreeMemoryInPrivatePools(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		version string
		known   bool
	}{{"2.10", true}, {"2.8", false}} {
		p, _ := fixture.RecordFile(t, "pool_oom.mem", "pool_oom.pickle", "--device-memory", "1GiB", "--torch-version", tc.version)
		out, _, err := execOOM(t, p)
		if err != nil {
			t.Fatal(err)
		}
		want := "verdict: free memory in other pools: the device had 204.0 MiB free and the cache 612.0 MiB, together at least the 600.0 MiB requested, but 612.0 MiB of the cached free memory sat in private pools (CUDA graphs, MemPool), which PyTorch never gives to ordinary allocations"
		if !strings.Contains(out, want) || !strings.Contains(out, "396.0 MiB was missing") {
			t.Errorf("%s: the verdict lacks the private pools' free memory:\n%s", tc.version, out)
		}
		if strings.Contains(out, "taken as the default pools") == tc.known {
			t.Errorf("%s: whether the request's pool is known is not said right:\n%s", tc.version, out)
		}
		if !strings.Contains(out, "Release the CUDA graphs and MemPools") {
			t.Errorf("%s: no advice to release the pools:\n%s", tc.version, out)
		}
		out, _, err = execOOM(t, p, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Devices []struct {
				OOMs []struct {
					Verdict          string   `json:"verdict"`
					OtherPoolsFree   int64    `json:"free_in_other_pools_bytes"`
					RequestPoolID    [2]int64 `json:"request_pool_id"`
					RequestPoolKnown bool     `json:"request_pool_known"`
					Shortfall        int64    `json:"shortfall_bytes"`
					Advice           []struct{ Kind string }
				} `json:"ooms"`
			} `json:"devices"`
		}
		if err := json.Unmarshal([]byte(cmdtest.Result(t, out)), &got); err != nil {
			t.Fatal(err)
		}
		o := got.Devices[0].OOMs[0]
		if o.Verdict != "free memory in other pools" || o.OtherPoolsFree != 612*mib || o.Shortfall != 396*mib ||
			o.RequestPoolID != [2]int64{} || o.RequestPoolKnown != tc.known || o.Advice[0].Kind != "release_private_pools" {
			t.Errorf("%s: JSON %+v", tc.version, o)
		}
	}

	// Without the graph the same request fits in the free device memory
	// and the cache: no pool is named.
	p, _ := fixture.RecordFile(t, "expandable_oom.mem", "exp.pickle", "--device-memory", "1GiB")
	out, _, err := execOOM(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "other pools") || strings.Contains(out, "private pools") {
		t.Errorf("a file without private pools mentions them:\n%s", out)
	}
}
