package coffer

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// JSONKind is the kind of a JSONValue.
type JSONKind uint8

// The kinds of JSON values.
const (
	JSONNull JSONKind = iota
	JSONBool
	JSONNumber
	JSONString
	JSONArray
	JSONObject
)

// JSONValue is one value of a JSON text as ParseJSON reads it.
type JSONValue struct {
	Kind JSONKind
	// Text is a string's value, a number as written, or true or false.
	Text string
	// Names are an object's member names, in the order written; Elems
	// are its member values, or an array's elements.
	Names []string
	Elems []*JSONValue
}

// ParseJSON reads raw as one JSON value (RFC 8259), refusing what makes a
// text ambiguous, so that two texts the reader takes for the same value
// are the same request: invalid UTF-8, an escaped surrogate that is not
// half of a pair (Go's encoding/json reads both as U+FFFD, so two
// different names would collide), a name twice in one object (which one
// counts differs between readers), nesting deeper than depthMax, a byte
// order mark, and anything but white space after the value. It is the one
// reader of request JSON: the domain reads meta with it, the HTTP
// transport its bodies. Errors say what and at which byte.
func ParseJSON(raw []byte, depthMax int) (*JSONValue, error) {
	p := &jsonParser{b: raw, depthMax: depthMax}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.b) {
		return nil, p.fail("data after the JSON value")
	}
	return v, nil
}

type jsonParser struct {
	b        []byte
	i        int
	depthMax int
}

func (p *jsonParser) fail(format string, args ...any) error {
	return fmt.Errorf("%s at byte %d", fmt.Sprintf(format, args...), p.i)
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (*JSONValue, error) {
	if p.i >= len(p.b) {
		return nil, p.fail("unexpected end of JSON")
	}
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		if depth >= p.depthMax {
			return nil, p.fail("nested deeper than %d levels", p.depthMax)
		}
		if c == '{' {
			return p.object(depth + 1)
		}
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		return &JSONValue{Kind: JSONString, Text: s}, err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", JSONBool)
	case c == 'f':
		return p.literal("false", JSONBool)
	case c == 'n':
		return p.literal("null", JSONNull)
	}
	return nil, p.fail("unexpected %q", p.b[p.i])
}

func (p *jsonParser) literal(word string, kind JSONKind) (*JSONValue, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.fail("unexpected %q", p.b[p.i])
	}
	p.i += len(word)
	return &JSONValue{Kind: kind, Text: word}, nil
}

func (p *jsonParser) object(depth int) (*JSONValue, error) {
	v := &JSONValue{Kind: JSONObject}
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return v, nil
	}
	seen := map[string]bool{}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.fail("a member name expected")
		}
		at := p.i
		name, err := p.str()
		if err != nil {
			return nil, err
		}
		if seen[name] {
			p.i = at
			return nil, p.fail("name %q given twice", name)
		}
		seen[name] = true
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.fail("':' expected")
		}
		p.i++
		p.space()
		elem, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		v.Names, v.Elems = append(v.Names, name), append(v.Elems, elem)
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return v, nil
		}
		return nil, p.fail("',' or '}' expected")
	}
}

func (p *jsonParser) array(depth int) (*JSONValue, error) {
	v := &JSONValue{Kind: JSONArray}
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return v, nil
	}
	for {
		p.space()
		elem, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		v.Elems = append(v.Elems, elem)
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return v, nil
		}
		return nil, p.fail("',' or ']' expected")
	}
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
func (p *jsonParser) number() (*JSONValue, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return nil, p.fail("a digit expected")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, p.fail("a digit expected")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, p.fail("a digit expected")
		}
	}
	return &JSONValue{Kind: JSONNumber, Text: string(p.b[start:p.i])}, nil
}

func (p *jsonParser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// str reads a string: valid UTF-8, control characters escaped, escapes
// well formed and surrogates in pairs.
func (p *jsonParser) str() (string, error) {
	p.i++ // "
	var out []byte
	for {
		if p.i >= len(p.b) {
			return "", p.fail("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c == '\\':
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			out = utf8.AppendRune(out, r)
		case c < 0x20:
			return "", p.fail("a control character in a string (escape it)")
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, n := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && n <= 1 {
				return "", p.fail("invalid UTF-8")
			}
			out = append(out, p.b[p.i:p.i+n]...)
			p.i += n
		}
	}
}

func (p *jsonParser) escape() (rune, error) {
	if p.i+1 >= len(p.b) {
		return 0, p.fail("unterminated string")
	}
	c := p.b[p.i+1]
	p.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := p.hex4()
		if err != nil {
			return 0, err
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r < 0xDC00 && p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
			p.i += 2
			lo, err := p.hex4()
			if err != nil {
				return 0, err
			}
			if pair := utf16.DecodeRune(r, lo); pair != utf8.RuneError {
				return pair, nil
			}
		}
		return 0, p.fail("an escaped surrogate that is not half of a pair")
	}
	p.i -= 2
	return 0, p.fail("invalid escape")
}

func (p *jsonParser) hex4() (rune, error) {
	if len(p.b)-p.i < 4 {
		return 0, p.fail("\\u needs 4 hex digits")
	}
	n, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, p.fail("\\u needs 4 hex digits")
	}
	p.i += 4
	return rune(n), nil
}
