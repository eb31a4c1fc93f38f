// Package schemacheck validates JSON values against the subset of JSON
// Schema (draft 2020-12) that docs/output.schema.json uses: type,
// properties, required, additionalProperties, items, const, enum, minimum,
// allOf, oneOf, if/then and local $ref ("#/$defs/name"). Tests use it to
// hold every command's --json to the documented schema without a
// dependency; a keyword outside the subset is an error, not a pass.
package schemacheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"
)

// Schema is a parsed schema document.
type Schema struct {
	root map[string]any
}

// Load reads a schema file.
func Load(path string) (*Schema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Parse parses a schema document.
func Parse(data []byte) (*Schema, error) {
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return &Schema{root: root}, nil
}

// Validate checks the JSON document data against the schema's root, or
// against the definition ref names ("#/$defs/jsonl_line") when ref is not
// empty. It returns the first few violations, each with its JSON path.
func (s *Schema) Validate(data []byte, ref string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	var node any = s.root
	if ref != "" {
		n, err := s.resolve(ref)
		if err != nil {
			return err
		}
		node = n
	}
	var errs []string
	s.check(node, v, "$", &errs)
	if len(errs) == 0 {
		return nil
	}
	if len(errs) > 5 {
		errs = append(errs[:5], fmt.Sprintf("... and %d more", len(errs)-5))
	}
	return fmt.Errorf("%s", strings.Join(errs, "; "))
}

func (s *Schema) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("schema: only local references: %q", ref)
	}
	var node any = s.root
	for _, part := range strings.Split(ref[2:], "/") {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("schema: %q does not resolve", ref)
		}
		if node, ok = m[part]; !ok {
			return nil, fmt.Errorf("schema: %q does not resolve", ref)
		}
	}
	return node, nil
}

// known are the keywords check understands; annotations are ignored.
var known = map[string]bool{
	"$ref": true, "type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "const": true, "enum": true, "minimum": true, "allOf": true, "oneOf": true,
	"if": true, "then": true,
	"$schema": true, "$id": true, "$defs": true, "title": true, "description": true,
}

func (s *Schema) check(node, v any, path string, errs *[]string) {
	sch, ok := node.(map[string]any)
	if !ok {
		if b, isBool := node.(bool); isBool {
			if !b {
				*errs = append(*errs, path+": not allowed")
			}
			return
		}
		*errs = append(*errs, path+": schema node is not an object")
		return
	}
	keys := make([]string, 0, len(sch))
	for k := range sch {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] {
			*errs = append(*errs, fmt.Sprintf("%s: schema keyword %q is not supported", path, k))
			return
		}
	}
	if ref, ok := sch["$ref"].(string); ok {
		n, err := s.resolve(ref)
		if err != nil {
			*errs = append(*errs, path+": "+err.Error())
			return
		}
		s.check(n, v, path, errs)
	}
	if t, ok := sch["type"]; ok && !typeMatches(t, v) {
		*errs = append(*errs, fmt.Sprintf("%s: %s is not of type %v", path, kindOf(v), t))
		return
	}
	if c, ok := sch["const"]; ok && !equal(c, v) {
		*errs = append(*errs, fmt.Sprintf("%s: %v is not %v", path, v, c))
	}
	if e, ok := sch["enum"].([]any); ok {
		found := false
		for _, c := range e {
			found = found || equal(c, v)
		}
		if !found {
			*errs = append(*errs, fmt.Sprintf("%s: %v is not one of %v", path, v, e))
		}
	}
	if m, ok := sch["minimum"]; ok {
		if n, isNum := v.(json.Number); isNum {
			f, _ := n.Float64()
			if f < toFloat(m) {
				*errs = append(*errs, fmt.Sprintf("%s: %v is below %v", path, v, m))
			}
		}
	}
	if obj, isObj := v.(map[string]any); isObj {
		props, _ := sch["properties"].(map[string]any)
		if req, ok := sch["required"].([]any); ok {
			for _, r := range req {
				if _, has := obj[r.(string)]; !has {
					*errs = append(*errs, fmt.Sprintf("%s: missing %q", path, r))
				}
			}
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if p, ok := props[k]; ok {
				s.check(p, obj[k], path+"."+k, errs)
			} else if ap, ok := sch["additionalProperties"]; ok {
				if b, isBool := ap.(bool); isBool && !b {
					*errs = append(*errs, fmt.Sprintf("%s: unexpected field %q", path, k))
				} else if !isBool {
					s.check(ap, obj[k], path+"."+k, errs)
				}
			}
		}
	}
	if arr, isArr := v.([]any); isArr {
		if it, ok := sch["items"]; ok {
			for i, x := range arr {
				s.check(it, x, fmt.Sprintf("%s[%d]", path, i), errs)
			}
		}
	}
	if all, ok := sch["allOf"].([]any); ok {
		for _, sub := range all {
			s.check(sub, v, path, errs)
		}
	}
	if one, ok := sch["oneOf"].([]any); ok {
		matched := 0
		var firstErrs []string
		for _, sub := range one {
			var e []string
			s.check(sub, v, path, &e)
			if len(e) == 0 {
				matched++
			} else if firstErrs == nil {
				firstErrs = e
			}
		}
		if matched != 1 {
			*errs = append(*errs, fmt.Sprintf("%s: matches %d of oneOf's %d schemas, not one (first: %v)", path, matched, len(one), firstErrs))
		}
	}
	if cond, ok := sch["if"]; ok {
		var e []string
		s.check(cond, v, path, &e)
		if then, ok := sch["then"]; ok && len(e) == 0 {
			s.check(then, v, path, errs)
		}
	}
}

func kindOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if isInteger(x) {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func isInteger(n json.Number) bool {
	if _, err := n.Int64(); err == nil {
		return true
	}
	f, err := n.Float64()
	return err == nil && f == math.Trunc(f) && !strings.ContainsAny(string(n), ".eE")
}

func typeMatches(t any, v any) bool {
	switch tt := t.(type) {
	case string:
		k := kindOf(v)
		return k == tt || (tt == "number" && k == "integer")
	case []any:
		for _, x := range tt {
			if typeMatches(x, v) {
				return true
			}
		}
	}
	return false
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return math.NaN()
}

// equal compares a schema constant (decoded as float64) with a value
// (decoded with json.Number).
func equal(c, v any) bool {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		cf, isNum := c.(float64)
		return err == nil && isNum && f == cf
	}
	return reflect.DeepEqual(c, v)
}
