package schemacheck

import "testing"

func TestKeywords(t *testing.T) {
	s, err := Parse([]byte(`{
		"type": "object", "required": ["k"], "additionalProperties": false,
		"properties": {
			"k": {"enum": ["a", "b"]},
			"n": {"type": "integer", "minimum": 0},
			"x": {"oneOf": [{"type": "null"}, {"$ref": "#/$defs/pt"}]},
			"l": {"type": "array", "items": {"type": "number"}}
		},
		"allOf": [{"if": {"properties": {"k": {"const": "b"}}}, "then": {"required": ["n"]}}],
		"$defs": {"pt": {"type": "object", "required": ["y"]}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for doc, ok := range map[string]bool{
		`{"k":"a"}`:                            true,
		`{"k":"b","n":3,"x":null,"l":[1.5,2]}`: true,
		`{"k":"a","x":{"y":1}}`:                true,
		`{"k":"c"}`:                            false, // enum
		`{"k":"b"}`:                            false, // if/then
		`{"k":"a","n":1.5}`:                    false, // integer
		`{"k":"a","n":-1}`:                     false, // minimum
		`{"k":"a","x":{}}`:                     false, // $ref's required
		`{"k":"a","l":["1"]}`:                  false, // items
		`{"k":"a","z":1}`:                      false, // additionalProperties
		`{}`:                                   false, // required
		`[]`:                                   false, // type
		`{"k":"a"`:                             false, // not JSON
	} {
		if err := s.Validate([]byte(doc), ""); (err == nil) != ok {
			t.Errorf("%s: %v, want valid=%v", doc, err, ok)
		}
	}
	u, _ := Parse([]byte(`{"pattern": "^a"}`))
	if err := u.Validate([]byte(`"b"`), ""); err == nil {
		t.Error("an unsupported keyword passes")
	}
}
