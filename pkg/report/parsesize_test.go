package report

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512B": 512, "512 b": 512,
		"24GiB": 24 << 30, "24 GiB": 24 << 30, "24gib": 24 << 30, "24G": 24 << 30, "1.5GiB": 3 << 29,
		"512MiB": 512 << 20, "512M": 512 << 20, "512MB": 512e6, "80GB": 80e9, "1.5GB": 15e8,
		"4KiB": 4096, "4KB": 4000, "1TiB": 1 << 40, "2TB": 2e12, " 7 ": 7,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1GiB", "1.2.3G", "1.3B", "0.1KiB", "12 parsecs", "1e3", "9999999TiB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
