package coffer

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Limits of meta, the JSON object a client attaches to a trx.
const (
	// MetaLenMax bounds meta in bytes, both as sent and in canonical form
	// (as stored and served).
	MetaLenMax = 4096
	// MetaDepthMax bounds the nesting of meta: the object itself is
	// level 1.
	MetaDepthMax = 32
	// MetaNumberMax bounds the magnitude of a number in meta: 2^53 − 1,
	// the largest integer a double (gRPC's google.protobuf.Value, and
	// JavaScript's numbers) holds along with all the integers below it.
	MetaNumberMax = 1<<53 - 1
)

// canonicalMeta checks a request's meta and returns its canonical form,
// the one form that is hashed, stored and served (docs/api.md): the JSON
// Canonicalization Scheme (RFC 8785), over strict JSON (ParseJSON), with
// every number rounded to the nearest double and at most MetaNumberMax in
// magnitude. Meta that is absent, null or {} is none (nil). Errors are
// invalid_argument.
func canonicalMeta(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if len(raw) > MetaLenMax {
		return nil, Errorf(CodeInvalid, "meta: at most %d bytes", MetaLenMax)
	}
	v, err := ParseJSON(raw, MetaDepthMax)
	if err != nil {
		return nil, Errorf(CodeInvalid, "meta: %v", err)
	}
	if v.Kind == JSONNull || (v.Kind == JSONObject && len(v.Names) == 0) {
		return nil, nil
	}
	if v.Kind != JSONObject {
		return nil, Errorf(CodeInvalid, "meta: must be a JSON object")
	}
	out, err := appendCanonical(nil, v)
	if err != nil {
		return nil, Errorf(CodeInvalid, "meta: %v", err)
	}
	if len(out) > MetaLenMax {
		return nil, Errorf(CodeInvalid, "meta: at most %d bytes in canonical form (docs/api.md), %d here", MetaLenMax, len(out))
	}
	return out, nil
}

// metaNumber is a meta number in canonical form: the nearest double, in
// the form of ECMAScript's Number.prototype.toString (RFC 8785 §3.2.2.3),
// so 2.50, 25e-1 and 2.5 are one number. Numbers beyond MetaNumberMax are
// refused rather than rounded: an id that changed silently would be worse.
func metaNumber(text string) (string, error) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.Abs(f) > MetaNumberMax {
		return "", Errorf(CodeInvalid, "number %.40s is beyond ±%d (2^53 − 1); send larger numbers as strings", text, int64(MetaNumberMax))
	}
	if f == 0 {
		return "0", nil // and not -0
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±xx
	neg := e[0] == '-'
	e = strings.TrimPrefix(e, "-")
	mant, exp, _ := strings.Cut(e, "e")
	n, _ := strconv.Atoi(exp)
	return layoutNumber(neg, strings.Replace(mant, ".", "", 1), n+1), nil
}

// layoutNumber writes the number 0.digits × 10^n as ECMAScript's
// Number.prototype.toString does (ECMA-262 Number::toString, where k is
// len(digits)): digits has no leading or trailing zeros.
func layoutNumber(neg bool, digits string, n int) string {
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		b.WriteString(digits[:n])
		b.WriteByte('.')
		b.WriteString(digits[n:])
	case -6 < n && n <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -n))
		b.WriteString(digits)
	default:
		b.WriteString(digits[:1])
		if k > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if n-1 >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(n - 1))
	}
	return b.String()
}

// appendCanonical writes v as RFC 8785 does: members sorted by their
// names' UTF-16 code units, no white space, strings with only the escapes
// JSON requires, numbers as metaNumber makes them.
func appendCanonical(out []byte, v *JSONValue) ([]byte, error) {
	switch v.Kind {
	case JSONObject:
		order := make([]int, len(v.Names))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return compareUTF16(v.Names[a], v.Names[b]) })
		out = append(out, '{')
		for j, i := range order {
			if j > 0 {
				out = append(out, ',')
			}
			out = appendString(out, v.Names[i])
			out = append(out, ':')
			var err error
			if out, err = appendCanonical(out, v.Elems[i]); err != nil {
				return nil, err
			}
		}
		return append(out, '}'), nil
	case JSONArray:
		out = append(out, '[')
		for i, e := range v.Elems {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = appendCanonical(out, e); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case JSONString:
		return appendString(out, v.Text), nil
	case JSONNumber:
		s, err := metaNumber(v.Text)
		if err != nil {
			return nil, err
		}
		return append(out, s...), nil
	}
	return append(out, v.Text...), nil // true, false, null
}

// appendString quotes s as RFC 8785 §3.2.2.2 does.
func appendString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			out = append(out, '\\', c)
		case '\b':
			out = append(out, '\\', 'b')
		case '\f':
			out = append(out, '\\', 'f')
		case '\n':
			out = append(out, '\\', 'n')
		case '\r':
			out = append(out, '\\', 'r')
		case '\t':
			out = append(out, '\\', 't')
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, '"')
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// sorts names (Go's < compares UTF-8 bytes, which differs above U+FFFF).
func compareUTF16(a, b string) int {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}
