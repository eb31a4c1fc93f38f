package allocator

// What the external property tests (property_test.go, package
// allocator_test: they import internal/randworkload, which imports this
// package) need from the inside.

var (
	Layout = layout
	PyBool = pyBool
)

func StatArrays(s *Stats) []*StatArray { return s.arrays() }
