package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"

	"github.com/memstat/memstat/pkg/pickle"
)

// maxJSONDepth bounds nesting; snapshots nest six levels deep.
const maxJSONDepth = 512

// maxJSONNumberLen bounds the text of one number: math/big parses decimal
// text in quadratic time (a million digits took seconds and gigabytes), and
// an int64 or a float64 needs a few dozen characters (snapshot integers fit
// in 20 digits; CPython's json writes at most 17 significant digits).
const maxJSONNumberLen = 2048

// jsonBudgetStep is how many JSON tokens readJSON reads between two calls
// of its budget: a token is at least one byte.
const jsonBudgetStep = 4096

// readJSON reads the JSON form of a snapshot (what the newest web viewer and
// Mosaic accept) into the same values and records a pickle decodes to, so
// one assembler serves both.
//
// budget, if not nil, is called every jsonBudgetStep tokens with the bytes
// held (see pickle.Decoder.SetBudget).
func readJSON(r io.Reader, vs *pickle.Values, c pickle.Compactor, budget func(held int64) error) (pickle.Value, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	type level struct {
		kind  pickle.Kind
		items []pickle.Value
	}
	var stack []level
	var result pickle.Value
	done := false
	open := int64(0) // items in stack's levels
	if b, ok := c.(*builder); ok && b.stream != nil {
		// A device's entries are compacted when its list closes: the
		// list is then device_traces' next item, device_traces the last
		// key of the top-level dict.
		b.stream.place = func() (int, bool) {
			if len(stack) != 2 || stack[0].kind != pickle.KindDict || stack[1].kind != pickle.KindList {
				return 0, false
			}
			keys := stack[0].items
			if len(keys)%2 != 1 || keys[len(keys)-1].Kind != pickle.KindString || vs.Text(keys[len(keys)-1]) != "device_traces" {
				return 0, false
			}
			return len(stack[1].items), true
		}
	}
	put := func(v pickle.Value) {
		if len(stack) == 0 {
			result, done = v, true
			return
		}
		top := &stack[len(stack)-1]
		top.items = append(top.items, v)
		open++
	}
	for tokens := 0; !done; tokens++ {
		if budget != nil && tokens%jsonBudgetStep == 0 {
			if err := budget(vs.Footprint() + 2*16*open); err != nil {
				return pickle.None, err
			}
		}
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return pickle.None, fmt.Errorf("JSON ends early at offset %d (truncated file?)", dec.InputOffset())
			}
			return pickle.None, fmt.Errorf("bad JSON at offset %d: %v", dec.InputOffset(), err)
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= maxJSONDepth {
					return pickle.None, fmt.Errorf("JSON nests deeper than %d levels", maxJSONDepth)
				}
				k := pickle.KindList
				if t == '{' {
					k = pickle.KindDict
				}
				stack = append(stack, level{kind: k})
			case '}', ']':
				top := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				open -= int64(len(top.items))
				v := vs.NewContainer(top.kind)
				if err := vs.Append(v, c, top.items...); err != nil {
					return pickle.None, err
				}
				put(v)
			}
		case string:
			put(vs.Str(t))
		case json.Number:
			v, err := jsonNumber(vs, string(t))
			if err != nil {
				return pickle.None, err
			}
			put(v)
		case bool:
			put(pickle.Bool(t))
		case nil:
			put(pickle.None)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return pickle.None, fmt.Errorf("bad JSON: data after the top-level value at offset %d", dec.InputOffset())
	}
	return vs.Freeze(result, c)
}

func jsonNumber(vs *pickle.Values, s string) (pickle.Value, error) {
	if len(s) > maxJSONNumberLen {
		return pickle.None, fmt.Errorf("JSON number of %d characters is over the %d-character limit", len(s), maxJSONNumberLen)
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return pickle.Int(i), nil
	}
	if x, ok := new(big.Int).SetString(s, 10); ok {
		return vs.BigIntValue(x), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return pickle.None, fmt.Errorf("bad JSON number %s", quote(s))
	}
	return pickle.Float(f), nil
}
