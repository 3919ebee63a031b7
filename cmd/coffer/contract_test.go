package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// contractCall is one request of an operation: its path and query
// parameters, and its body (nil for none).
type contractCall struct {
	path, query map[string]string
	body        any
}

// contractBases are requests the server accepts, per operation: a bound's
// probes change one field of them. Where the server's rules join fields
// (a consume takes no kind, an exchange's yield is bounded, a hold's TTL
// needs hold), an operation has several, and a value within a bound need
// pass with one of them only.
func contractBases() map[string][]contractCall {
	player := map[string]string{"namespace": "1", "player_id": "1"}
	trx := map[string]string{"namespace": "1", "player_id": "1", "idempotency_key": "k"}
	grant := map[string]any{"currency": "gold", "amount": 1}
	paid := map[string]any{"currency": "gold", "amount": 1, "kind": "paid",
		"purchase": map[string]any{"store": "steam", "order_id": "bounds-1", "price": 1, "fiat": "USD"}}
	change := func(op map[string]any, more ...any) map[string]any {
		b := map[string]any{"idempotency_key": "bounds", "ops": []any{op}, "reason": "r", "meta": map[string]any{}}
		for i := 0; i < len(more); i += 2 {
			b[more[i].(string)] = more[i+1]
		}
		return b
	}
	withPlayer := func(b map[string]any) map[string]any { b["player_id"] = 1; return b }
	return map[string][]contractCall{
		"GetBalances": {{path: player, query: map[string]string{}}},
		"Change": {{path: player, body: change(grant)}, {path: player, body: change(paid)},
			{path: player, body: change(grant, "hold", true)}, {path: player, body: change(grant, "hold", true, "hold_ttl_seconds", 60)}},
		"BatchChange": {{path: map[string]string{"namespace": "1"}, body: map[string]any{"changes": []any{withPlayer(change(grant))}}},
			{path: map[string]string{"namespace": "1"}, body: map[string]any{"changes": []any{withPlayer(change(paid))}}},
			{path: map[string]string{"namespace": "1"}, body: map[string]any{"changes": []any{withPlayer(change(grant, "hold", true))}}},
			{path: map[string]string{"namespace": "1"}, body: map[string]any{"changes": []any{withPlayer(change(grant, "hold", true, "hold_ttl_seconds", 60))}}}},
		"Commit":   {{path: trx}},
		"Rollback": {{path: trx}},
		"GetTrx":   {{path: trx}},
		"Exchange": {{path: player, body: map[string]any{"idempotency_key": "bounds", "from": "gold", "to": "silver", "amount": 1, "reason": "r"}},
			{path: player, body: map[string]any{"idempotency_key": "bounds", "from": "silver", "to": "credits", "amount": 10, "reason": "r"}}},
		"Refund": {{path: player, body: map[string]any{"idempotency_key": "bounds", "store": "steam", "order_id": "bounds-1", "kind": "refund", "reason": "r"}}},
		"Finlog": {{path: player, query: map[string]string{}}},
		"Revenue": {{path: map[string]string{"namespace": "1"},
			query: map[string]string{"from": "2026-01-01T00:00:00Z", "to": "2026-02-01T00:00:00Z"}}},
		"GetStatus": {{}},
		"GetOrder":  {{path: map[string]string{"namespace": "1", "store": "steam", "order_id": "bounds-1"}}},
		"GetClient": {{}},
	}
}

// stringProbes are the texts every pattern of the document is tried
// with: each matching one (within the field's lengths) must pass, each
// other must be refused.
var stringProbes = []string{"", "a", "steam", "google_play", "a-b_c", "Steam", "st eam", "st.eam", "USD", "usd", "US", "USDX",
	"7731", " 7731", "7731 ", "7\t731", "77\x0031", "x\u00a0", "\u00a0x", "x\u3000", "\u2028x", "a\u0085b", "a\u0080b", "é", "ÿ",
	"x\u1680y", "\u1680", "a/b", "a+b=", "MDox", "~", "\x7f", strings.Repeat("s", 64), strings.Repeat("s", 65)}

// fromName are fields whose values name what the deployment configured or
// the server wrote (a currency, a cursor): a value the bound allows may
// name nothing, so only the refusals of their bounds are probed.
var fromName = map[string]bool{"currency": true, "from": true, "to": true, "cursor": true}

// TestDocumentBoundsAreTheServers walks /openapi.json with the server: for
// every bound the document states on a request's field (a parameter, or a
// body's field at any depth) a value just inside is not refused as
// invalid_argument and one just outside is; so is a required field left
// out, and an unknown field where an object is closed. Each bound's value
// comes from the domain's constants (internal/apigen); this holds the
// document and the server's checks together.
func TestDocumentBoundsAreTheServers(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) { c.Holds.TTLMax = coffer.HoldTTLSecondsMax * time.Second })
	dec := json.NewDecoder(bytes.NewReader(api.OpenAPI))
	dec.UseNumber()
	var doc map[string]any
	must(t, dec.Decode(&doc))
	w := &boundWalker{t: t, s: s, doc: doc}
	bases := contractBases()
	for path, item := range doc["paths"].(map[string]any) {
		for method, raw := range item.(map[string]any) {
			op := raw.(map[string]any)
			id := op["operationId"].(string)
			calls, ok := bases[id]
			if !ok {
				if strings.HasPrefix(path, "/v1/") {
					t.Errorf("%s: no base request", id)
				}
				continue
			}
			w.op, w.method, w.pathTmpl, w.calls = id, strings.ToUpper(method), path, calls
			for _, c := range calls {
				if status, body := w.send(c); status == http.StatusBadRequest {
					t.Fatalf("%s: a base request is refused: %s", id, body)
				}
			}
			for _, p := range asList(op["parameters"]) {
				w.parameter(p.(map[string]any))
			}
			if rb, ok := op["requestBody"].(map[string]any); ok {
				schema := rb["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
				w.body(schema, nil)
			}
		}
	}
	if w.probes < 100 {
		t.Fatalf("only %d probes: the walk missed the bounds", w.probes)
	}
	t.Logf("%d probes", w.probes)
}

type boundWalker struct {
	t        *testing.T
	s        *service
	doc      map[string]any
	op       string
	method   string
	pathTmpl string
	calls    []contractCall
	probes   int
	seq      int
}

// probe is one value tried at a field: inside tells whether the document
// allows it. A nil value leaves the field out.
type probe struct {
	value  any
	inside bool
	what   string
}

func (w *boundWalker) parameter(p map[string]any) {
	name, in := p["name"].(string), p["in"].(string)
	schema := w.resolve(p["schema"].(map[string]any))
	probes := w.probesOf(name, schema)
	if in == "query" {
		probes = append(probes, probe{nil, p["required"] != true, "left out"})
	}
	for _, pr := range probes {
		if v, _ := pr.value.(string); in == "path" && (v == "" || strings.Contains(v, "/")) {
			// An empty segment is no path of the API; an escaped slash
			// is served (TestHTTPBadInput), but the document's router
			// in call reads it as two segments.
			continue
		}
		w.try(fmt.Sprintf("%s %s=%v", in, name, pr.what), pr.inside, func(c contractCall) (contractCall, bool) {
			if in == "path" {
				c.path = withParam(c.path, name, pr.value)
			} else {
				c.query = withParam(c.query, name, pr.value)
			}
			return c, true
		})
	}
}

// body walks a body's schema: at (a path of names and indexes into the
// body), the field's own probes, then its fields' or items'.
func (w *boundWalker) body(schema map[string]any, at []any) {
	schema = w.resolve(schema)
	if len(at) > 0 {
		name, _ := at[len(at)-1].(string)
		for _, pr := range w.probesOf(name, schema) {
			w.tryAt(at, pr)
		}
	}
	switch schema["type"] {
	case "object":
		props, _ := schema["properties"].(map[string]any)
		required := asList(schema["required"])
		w.tryAt(append(slices.Clip(at), "x_unknown"), probe{1, schema["additionalProperties"] != false, "an unknown field"})
		for name, sub := range props {
			w.tryAt(append(slices.Clip(at), name), probe{nil, !slices.Contains(required, any(name)), "left out"})
			w.body(sub.(map[string]any), append(slices.Clip(at), name))
		}
	case "array":
		w.body(schema["items"].(map[string]any), append(slices.Clip(at), 0))
	}
}

// probesOf are the values tried at field name: just inside and just
// outside each bound of schema, and values a server's bound would refuse
// (out of a type's range, long, empty, odd characters, a length of an
// array); each is inside as the document's schema judges it (allows).
func (w *boundWalker) probesOf(name string, schema map[string]any) []probe {
	var values []any
	switch schema["type"] {
	case "integer":
		for _, k := range []string{"minimum", "maximum"} {
			if n, ok := schema[k].(json.Number); ok {
				v, _ := new(big.Int).SetString(string(n), 10)
				for _, d := range []int64{-1, 0, 1} {
					values = append(values, json.Number(new(big.Int).Add(v, big.NewInt(d)).String()))
				}
			}
		}
		if not, ok := schema["not"].(map[string]any); ok {
			values = append(values, asList(not["enum"])...)
		}
		for _, n := range []string{"-1", "0", "1", "2147483648", "-2147483649", "9007199254740993", "9223372036854775808", "-9223372036854775809", "1180591620717411303424"} {
			values = append(values, json.Number(n))
		}
	case "string":
		if schema["format"] == "date-time" {
			return nil // a time's bounds are in its text (docs/api.md)
		}
		for _, v := range asList(schema["enum"]) {
			values = append(values, v, fmt.Sprint(v)+"x")
		}
		for _, k := range []string{"minLength", "maxLength"} {
			if n, ok := schema[k].(json.Number); ok {
				l, _ := n.Int64()
				for _, d := range []int64{-1, 0, 1} {
					if l+d >= 0 {
						values = append(values, w.text(int(l+d)))
					}
				}
			}
		}
		values = append(values, w.text(1000))
		for _, v := range stringProbes {
			values = append(values, v)
		}
	case "array":
		for _, k := range []string{"minItems", "maxItems"} {
			if n, ok := schema[k].(json.Number); ok {
				l, _ := n.Int64()
				for _, d := range []int64{-1, 0, 1} {
					if l+d >= 0 {
						values = append(values, repeatItems(l+d))
					}
				}
			}
		}
		values = append(values, repeatItems(0), repeatItems(1001))
	}
	var out []probe
	for _, v := range values {
		inside := w.allows(name, schema, v)
		if inside && fromName[name] {
			continue
		}
		out = append(out, probe{v, inside, fmt.Sprintf("%.40q", fmt.Sprint(v))})
	}
	return out
}

// allows tells whether schema allows v: the bounds keywords the document
// uses on requests.
func (w *boundWalker) allows(name string, schema map[string]any, v any) bool {
	num := func(k string) (*big.Int, bool) {
		n, ok := schema[k].(json.Number)
		if !ok {
			return nil, false
		}
		b, _ := new(big.Int).SetString(string(n), 10)
		return b, true
	}
	if not, ok := schema["not"].(map[string]any); ok && slices.Contains(asList(not["enum"]), v) {
		return false
	}
	if e := asList(schema["enum"]); e != nil && !slices.Contains(e, v) {
		return false
	}
	switch x := v.(type) {
	case json.Number:
		n, _ := new(big.Int).SetString(string(x), 10)
		if m, ok := num("minimum"); ok && n.Cmp(m) < 0 {
			return false
		}
		if m, ok := num("maximum"); ok && n.Cmp(m) > 0 {
			return false
		}
		if not, ok := schema["not"].(map[string]any); ok {
			for _, e := range asList(not["enum"]) {
				if fmt.Sprint(e) == string(x) {
					return false
				}
			}
		}
	case string:
		l := big.NewInt(int64(len([]rune(x))))
		if m, ok := num("minLength"); ok && l.Cmp(m) < 0 {
			return false
		}
		if m, ok := num("maxLength"); ok && l.Cmp(m) > 0 {
			return false
		}
		if p, ok := schema["pattern"].(string); ok {
			re, err := regexp.Compile(p)
			if err != nil {
				w.t.Fatalf("%s: pattern %q: %v", name, p, err)
			}
			return re.MatchString(x)
		}
	case repeatItems:
		l := big.NewInt(int64(x))
		if m, ok := num("minItems"); ok && l.Cmp(m) < 0 {
			return false
		}
		if m, ok := num("maxItems"); ok && l.Cmp(m) > 0 {
			return false
		}
	}
	return true
}

// repeatItems marks a probe of an array's length: n copies of the base's
// first item.
type repeatItems int

// text is a new text of n characters, so that a key within bounds makes a
// new trx.
func (w *boundWalker) text(n int) string {
	w.seq++
	s := fmt.Sprintf("t%d-", w.seq)
	if n <= len(s) {
		return strings.Repeat("a", n)
	}
	return s + strings.Repeat("a", n-len(s))
}

// tryAt tries pr at the body's field at.
func (w *boundWalker) tryAt(at []any, pr probe) {
	w.try(fmt.Sprintf("body %s=%s", pathString(at), pr.what), pr.inside, func(c contractCall) (contractCall, bool) {
		body, ok := setAt(deepCopy(c.body), at, pr.value)
		c.body = body
		return c, ok
	})
}

// try sends each base request, changed by change (false: the base lacks
// the field): a value inside must pass with one of them, one outside be
// refused by each, as invalid_argument.
func (w *boundWalker) try(what string, inside bool, change func(contractCall) (contractCall, bool)) {
	w.t.Helper()
	w.probes++
	passed, tried := false, 0
	for _, base := range w.calls {
		c, ok := change(base)
		if !ok {
			// A base without the field passes with it left out.
			passed = passed || strings.HasSuffix(what, "=left out")
			continue
		}
		tried++
		status, body := w.send(c)
		// A body far past a bound may be too large before it is read.
		refused := status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge
		if status == http.StatusBadRequest && !strings.Contains(body, `"code":"invalid_argument"`) {
			w.t.Errorf("%s %s: HTTP 400 without invalid_argument: %s", w.op, what, body)
		}
		if !inside && !refused {
			w.t.Errorf("%s %s: outside the document's bound, yet HTTP %d: %s", w.op, what, status, body)
		}
		passed = passed || !refused
	}
	if inside && tried > 0 && !passed {
		w.t.Errorf("%s %s: within the document's bound, yet refused by every base request", w.op, what)
	}
}

// send sends c; a batch answers a change's status in its result.
func (w *boundWalker) send(c contractCall) (int, string) {
	path := w.pathTmpl
	for k, v := range c.path {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	if len(c.query) > 0 {
		q := url.Values{}
		for k, v := range c.query {
			q.Set(k, v)
		}
		path += "?" + q.Encode()
	}
	body := ""
	if c.body != nil {
		raw, err := json.Marshal(c.body)
		must(w.t, err)
		body = string(raw)
	}
	r := w.s.call(w.method, path, devKey, body)
	if w.op == "BatchChange" && r.status == http.StatusOK {
		var out struct{ Results []struct{ Status int } }
		must(w.t, json.Unmarshal(r.body, &out))
		return out.Results[0].Status, r.String()
	}
	return r.status, r.String()
}

func (w *boundWalker) resolve(schema map[string]any) map[string]any {
	ref, ok := schema["$ref"].(string)
	if !ok {
		return schema
	}
	name := strings.TrimPrefix(ref, "#/components/schemas/")
	return w.doc["components"].(map[string]any)["schemas"].(map[string]any)[name].(map[string]any)
}

// withParam is params with name set to v (a string, or a JSON number), or
// left out for nil.
func withParam(params map[string]string, name string, v any) map[string]string {
	out := map[string]string{}
	for k, x := range params {
		out[k] = x
	}
	if v == nil {
		delete(out, name)
	} else {
		out[name] = fmt.Sprint(v)
	}
	return out
}

// setAt sets the field at (names and indexes) of body to v (nil: leaves
// it out; repeatItems: the array of that many copies of its first item),
// and false where body has no such field's parent.
func setAt(body any, at []any, v any) (any, bool) {
	if len(at) == 0 {
		if n, ok := v.(repeatItems); ok {
			list, _ := body.([]any)
			if len(list) == 0 {
				return body, false
			}
			out := make([]any, int(n))
			for i := range out {
				out[i] = list[0]
			}
			return out, true
		}
		return v, true
	}
	switch step := at[0].(type) {
	case string:
		obj, ok := body.(map[string]any)
		if !ok {
			return body, false
		}
		if len(at) == 1 && v == nil {
			_, had := obj[step]
			delete(obj, step)
			return obj, had
		}
		cur, had := obj[step]
		if !had && len(at) > 1 {
			return body, false
		}
		if _, isRepeat := v.(repeatItems); !had && isRepeat {
			return body, false
		}
		next, ok := setAt(cur, at[1:], v)
		obj[step] = next
		return obj, ok
	case int:
		list, ok := body.([]any)
		if !ok || step >= len(list) {
			return body, false
		}
		next, ok := setAt(list[step], at[1:], v)
		list[step] = next
		return list, ok
	}
	return body, false
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

func pathString(at []any) string {
	var b strings.Builder
	for _, step := range at {
		if i, ok := step.(int); ok {
			fmt.Fprintf(&b, "[%d]", i)
		} else {
			fmt.Fprintf(&b, ".%s", step)
		}
	}
	return strings.TrimPrefix(b.String(), ".")
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}
