package replay

import "github.com/memstat/memstat/pkg/allocator"

// propCase is one setting of the random workload (internal/randworkload)
// that the replay tests record and follow.
type propCase struct {
	conf     string
	v        allocator.Version
	capacity int64
	fraction float64
	streams  []int64
	scale    int64
	toggle   bool // switch expandable segments on and off at runtime
	pools    bool // graph captures and MemPools (randworkload.Workload.Pools)
}
