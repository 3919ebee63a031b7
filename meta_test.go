package coffer

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMetaCanonical(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"b": 1, "a": {"d": [1, 2.50], "c": null}}`, `{"a":{"c":null,"d":[1,2.5]},"b":1}`},
		{`null`, ``},
		{`{}`, ``},
		{` { } `, ``},
		{`{"n": [1e2, 25e-1, -0, -0.0, 0.10000000000000001, 1E3, 1e-400, 100.000]}`, `{"n":[100,2.5,0,0,0.1,1000,0,100]}`},
		{`{"n": [1e-7, 0.000001, 1.5e-300, 123456.789e3, 9007199254740991, -9007199254740991]}`,
			`{"n":[1e-7,0.000001,1.5e-300,123456789,9007199254740991,-9007199254740991]}`},
		{`{"s": "<&>\u00e9\/\n\u001f\u2028\ud83d\ude00\""}`, "{\"s\":\"<&>\u00e9/\\n\\u001f\u2028\U0001F600\\\"\"}"},
		// RFC 8785 orders names by UTF-16 code units: U+1F600 (D83D DE00)
		// before U+FFFF, where UTF-8 bytes put it after.
		{`{"\uffff": 2, "\ud83d\ude00": 1, "a": 0, "": 3}`, "{\"\":3,\"a\":0,\"\U0001F600\":1,\"\uffff\":2}"},
	} {
		got, err := canonicalMeta([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: got %s %v, want %s", c.in, got, err, c.want)
		}
	}
}

func TestMetaRefused(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MetaDepthMax) + "1" + strings.Repeat("}", MetaDepthMax)
	if _, err := canonicalMeta([]byte(deep)); err != nil {
		t.Fatalf("%d levels refused: %v", MetaDepthMax, err)
	}
	for name, in := range map[string]string{
		"an array":                       `[1]`,
		"a string":                       `"x"`,
		"two values":                     `{"a":1} {}`,
		"truncated":                      `{`,
		"a name twice":                   `{"a":1,"a":2}`,
		"a name twice, spelled two ways": `{"a":1,"\u0061":2}`,
		"a name twice, nested":           `{"x":[{"b":1,"b":2}]}`,
		"a number jsonb prints long":     `{"a":1e131071}`,
		"beyond 2^53 - 1":                `{"a":9007199254740993}`,
		"a large id":                     `{"a":12345678901234567890123}`,
		"beyond the doubles":             `{"a":-1e400}`,
		"a lone surrogate":               `{"a":"\ud800"}`,
		"a reversed pair":                `{"a":"\udc00\ud800"}`,
		"invalid UTF-8":                  "{\"a\":\"\xff\"}",
		"invalid UTF-8 in a name":        "{\"\xc3\":1}",
		"a raw control character":        "{\"a\":\"\x01\"}",
		"a byte order mark":              "\xef\xbb\xbf{}",
		"a leading zero":                 `{"a":01}`,
		"NaN":                            `{"a":NaN}`,
		"nested too deep":                strings.Repeat(`{"a":`, MetaDepthMax+1) + "1" + strings.Repeat("}", MetaDepthMax+1),
		"over the size":                  `{"a":"` + strings.Repeat("x", MetaLenMax) + `"}`,
		"over the size once canonical":   `{"a":[` + strings.Repeat("1e15,", MetaLenMax/5-2) + `1]}`,
	} {
		if _, err := canonicalMeta([]byte(in)); ErrorCode(err) != CodeInvalid {
			t.Errorf("%s: %.60s accepted", name, in)
		}
	}
}

// FuzzCanonicalMeta: what canonicalMeta accepts is bounded, canonical
// again as it is and read the same by encoding/json; what ParseJSON
// accepts encoding/json accepts.
func FuzzCanonicalMeta(f *testing.F) {
	for _, seed := range []string{
		`{"b": 1, "a": {"d": [1, 2.50], "c": null}}`, `{"n": [1e2, -0, 1e-7, 0.000001, 9007199254740991]}`,
		`{"s": "<&>\u00e9\/\n\u001f\u2028\ud83d\ude00"}`, `{"a":1,"a":2}`, `{"a":"\ud800"}`, `{"a":1e400}`,
		`{"\uffff": 2, "\ud83d\ude00": 1}`, `[]`, `{}`, `null`, `{"a":[true,false,null,{}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if v, err := ParseJSON(raw, MetaDepthMax); err == nil {
			if !json.Valid(raw) || !utf8.Valid(raw) {
				t.Fatalf("ParseJSON accepted what encoding/json refuses: %q", raw)
			}
			if v.Kind == JSONObject && len(v.Names) != len(v.Elems) {
				t.Fatalf("names and members differ: %q", raw)
			}
		}
		canon, err := canonicalMeta(raw)
		if err != nil {
			if ErrorCode(err) != CodeInvalid {
				t.Fatalf("error with code %q: %v", ErrorCode(err), err)
			}
			return
		}
		if canon == nil {
			return
		}
		if len(canon) > MetaLenMax {
			t.Fatalf("canonical meta of %d bytes", len(canon))
		}
		again, err := canonicalMeta(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("canonical %s is not canonical again: %s %v", canon, again, err)
		}
		var decoded map[string]any
		if err := json.Unmarshal(canon, &decoded); err != nil {
			t.Fatalf("encoding/json refuses %s: %v", canon, err)
		}
		reencoded, _ := json.Marshal(decoded)
		if viaGo, err := canonicalMeta(reencoded); err != nil || !bytes.Equal(viaGo, canon) {
			t.Fatalf("%s through encoding/json is %s, canonical %s (%v)", canon, reencoded, viaGo, err)
		}
	})
}
