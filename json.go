package coffer

import (
	"fmt"
	"slices"
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
	// nodes are handed out by node, a block at a time; names and elems
	// hold the members of the objects and arrays being read, each copied
	// out at its end: a few allocations per text, not several per value.
	nodes []JSONValue
	names []string
	elems []*JSONValue
}

// node is a new value of kind with text.
func (p *jsonParser) node(kind JSONKind, text string) *JSONValue {
	if len(p.nodes) == 0 {
		p.nodes = make([]JSONValue, 32)
	}
	v := &p.nodes[0]
	p.nodes = p.nodes[1:]
	v.Kind, v.Text = kind, text
	return v
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
		return p.node(JSONString, s), err
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
	return p.node(kind, word), nil
}

func (p *jsonParser) object(depth int) (*JSONValue, error) {
	v := p.node(JSONObject, "")
	p.i++ // {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return v, nil
	}
	names, elems := len(p.names), len(p.elems)
	var seen map[string]bool // past a few names; a scan of them before
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
		if p.seen(p.names[names:], &seen, name) {
			p.i = at
			return nil, p.fail("name %q given twice", name)
		}
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
		p.names, p.elems = append(p.names, name), append(p.elems, elem)
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			v.Names, v.Elems = slices.Clone(p.names[names:]), slices.Clone(p.elems[elems:])
			p.names, p.elems = p.names[:names], p.elems[:elems]
			return v, nil
		}
		return nil, p.fail("',' or '}' expected")
	}
}

// seen tells whether name is among names, and adds it to the set. A few
// names are scanned; past them a set is kept, so that an object of many
// names costs no more than linear time.
func (p *jsonParser) seen(names []string, set *map[string]bool, name string) bool {
	const scanMax = 8
	if len(names) < scanMax {
		for _, n := range names {
			if n == name {
				return true
			}
		}
		return false
	}
	if *set == nil {
		*set = make(map[string]bool, 2*len(names))
		for _, n := range names {
			(*set)[n] = true
		}
	}
	if (*set)[name] {
		return true
	}
	(*set)[name] = true
	return false
}

func (p *jsonParser) array(depth int) (*JSONValue, error) {
	v := p.node(JSONArray, "")
	p.i++ // [
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return v, nil
	}
	elems := len(p.elems)
	for {
		p.space()
		elem, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		p.elems = append(p.elems, elem)
		p.space()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			v.Elems = slices.Clone(p.elems[elems:])
			p.elems = p.elems[:elems]
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
	return p.node(JSONNumber, string(p.b[start:p.i])), nil
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
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= 0x20 && p.b[p.i] < utf8.RuneSelf && p.b[p.i] != '"' && p.b[p.i] != '\\' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '"' {
		p.i++
		return string(p.b[start : p.i-1]), nil
	}
	out := append([]byte(nil), p.b[start:p.i]...)
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
