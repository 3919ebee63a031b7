package main

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cofferhq/coffer"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// bound is what the document states of a request field beyond its type:
// the server refuses a value outside it with invalid_argument. Each value
// comes from the domain's constant or rule, so that the two cannot drift
// (cmd/coffer's TestDocumentBoundsAreTheServers sends values just inside
// and just outside each).
type bound struct {
	schema object
	// required: the server refuses a request without the field.
	required bool
}

// noNUL is a text of UTF-8 without NUL (coffer's checkText).
const noNUL = `^[^\x00]*$`

// bounds are the request fields' bounds, by "Message.field", or
// "*.field" for that field of every request message that has no entry of
// its own.
var bounds = map[string]bound{
	"*.namespace":       {object{"minimum": 1, "maximum": math.MaxInt32}, true},
	"*.player_id":       {object{"minimum": 1, "maximum": int64(math.MaxInt64)}, true},
	"*.idempotency_key": {object{"minLength": 1, "maxLength": coffer.IdempotencyKeyLenMax, "pattern": noNUL}, true},
	// A reason counts bytes; maxLength counts characters, so a text of
	// many-byte characters may be refused within it (said in its text).
	"*.reason":             {object{"maxLength": coffer.ReasonLenMax, "pattern": noNUL}, false},
	"FinlogRequest.reason": {object{"pattern": noNUL}, false},

	"ChangeRequest.ops":              {object{"minItems": 1, "maxItems": coffer.OpsMax}, true},
	"BatchChange.ops":                {object{"minItems": 1, "maxItems": coffer.OpsMax}, true},
	"ChangeRequest.hold_ttl_seconds": {object{"minimum": 0, "maximum": coffer.HoldTTLSecondsMax}, false},
	"BatchChange.hold_ttl_seconds":   {object{"minimum": 0, "maximum": coffer.HoldTTLSecondsMax}, false},
	"BatchChangeRequest.changes":     {object{"minItems": 1, "maxItems": coffer.BatchChangesMax}, true},

	"OpRequest.currency": {object{"minLength": 1}, true},
	"OpRequest.amount": {object{"minimum": -coffer.OpAmountMax, "maximum": coffer.OpAmountMax,
		"not": object{"enum": []any{0}}}, true},
	"OpRequest.kind": {object{"enum": []any{"", coffer.GrantFree, coffer.GrantPaid}}, false},

	"Purchase.store":         storeBound,
	"Purchase.order_id":      orderIDBound,
	"Purchase.price":         {object{"minimum": 0, "maximum": coffer.PriceMax}, false},
	"Purchase.fiat":          {object{"pattern": "^[" + charClass(coffer.FiatChars) + "]{" + strconv.Itoa(coffer.FiatLen) + "}$"}, true},
	"RefundRequest.store":    storeBound,
	"RefundRequest.order_id": orderIDBound,
	"RefundRequest.kind":     {object{"enum": []any{string(coffer.RefundRefund), string(coffer.RefundChargeback)}}, true},

	"ExchangeRequest.from":   {object{"minLength": 1}, true},
	"ExchangeRequest.to":     {object{"minLength": 1}, true},
	"ExchangeRequest.amount": {object{"minimum": 1, "maximum": coffer.OpAmountMax}, true},

	"FinlogRequest.limit":  {object{"minimum": 0, "maximum": coffer.FinlogLimitMax}, false},
	"FinlogRequest.order":  {object{"enum": []any{"", coffer.FinlogAsc, coffer.FinlogDesc}}, false},
	"FinlogRequest.kind":   {object{"enum": withEmpty(coffer.TrxKinds)}, false},
	"FinlogRequest.status": {object{"enum": withEmpty(coffer.TrxStatuses)}, false},
	// A filter: any key a client may give, none for every trx.
	"FinlogRequest.idempotency_key": {object{"maxLength": coffer.IdempotencyKeyLenMax, "pattern": noNUL}, false},
	// A cursor is opaque: base64url without padding (postgres'
	// encodeCursor), and only one a page gave is taken.
	"FinlogRequest.cursor": {object{"pattern": "^[A-Za-z0-9_-]*$"}, false},
	"RevenueRequest.from":  {object{}, true},
	"RevenueRequest.to":    {object{}, true},

	// 0 (or none) names the calling client's trx (coffer.Client.TrxEmitter).
	"TrxRequest.emitter":    {object{"minimum": 0, "maximum": math.MaxInt32}, false},
	"OrderRequest.store":    storeBound,
	"OrderRequest.order_id": orderIDBound,
}

var (
	storeBound = bound{object{"pattern": "^[" + charClass(coffer.StoreChars) + "]{1," + strconv.Itoa(coffer.StoreLenMax) + "}$"}, true}
	// An order id counts bytes, as a reason does.
	orderIDBound = bound{object{"minLength": 1, "maxLength": coffer.OrderIDLenMax,
		"pattern": "^" + runeClass(coffer.OrderIDEdgeRune) + "(" + runeClass(coffer.OrderIDRune) + "*" + runeClass(coffer.OrderIDEdgeRune) + ")?$"}, true}
)

// withEmpty is the enum of a filter: each of values, or "" for none.
func withEmpty[T ~string](values []T) []any {
	out := []any{""}
	for _, v := range values {
		out = append(out, string(v))
	}
	return out
}

// boundOf is f's bound in a request message: its own entry, else the
// entry of its name in every message, else, for an integer, the range of
// its type (a larger number does not decode).
func boundOf(f protoreflect.FieldDescriptor) (bound, bool) {
	msg, name := string(f.ContainingMessage().Name()), string(f.Name())
	if b, ok := bounds[msg+"."+name]; ok {
		return b, true
	}
	if b, ok := bounds["*."+name]; ok {
		return b, true
	}
	switch f.Kind() {
	case protoreflect.Int32Kind:
		return bound{schema: object{"minimum": math.MinInt32, "maximum": math.MaxInt32}}, true
	case protoreflect.Int64Kind:
		return bound{schema: object{"minimum": int64(math.MinInt64), "maximum": int64(math.MaxInt64)}}, true
	}
	return bound{}, false
}

// bounded is s, f's schema, with f's bound. A list's bound is on the list.
func bounded(s object, f protoreflect.FieldDescriptor) object {
	b, ok := boundOf(f)
	if !ok {
		return s
	}
	for k, v := range b.schema {
		s[k] = v
	}
	return s
}

// requestMessages are the messages a request carries: the rpcs' inputs
// and the messages their fields hold, the well-known types aside.
func requestMessages(svc protoreflect.ServiceDescriptor) map[protoreflect.FullName]bool {
	out := map[protoreflect.FullName]bool{}
	var visit func(m protoreflect.MessageDescriptor)
	visit = func(m protoreflect.MessageDescriptor) {
		if out[m.FullName()] || m.ParentFile().Package() != svc.ParentFile().Package() {
			return
		}
		out[m.FullName()] = true
		for i := 0; i < m.Fields().Len(); i++ {
			if f := m.Fields().Get(i); f.Message() != nil {
				visit(f.Message())
			}
		}
	}
	for i := 0; i < svc.Methods().Len(); i++ {
		visit(svc.Methods().Get(i).Input())
	}
	return out
}

// charClass is chars as the inside of a regular expression's class.
func charClass(chars string) string {
	var b strings.Builder
	for _, r := range chars {
		if strings.ContainsRune(`\]^-`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// runeClass is the class of the characters ok allows, written as the
// negation of those it refuses: a character up to U+00FF as \xHH, one
// above as itself, which every regular expression dialect reads alike
// (ECMA 262, Python's re, Go's regexp).
func runeClass(ok func(rune) bool) string {
	var b strings.Builder
	b.WriteString("[^")
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if ok(r) || !utf8.ValidRune(r) {
			continue
		}
		end := r
		for end+1 <= utf8.MaxRune && !ok(end+1) && utf8.ValidRune(end+1) {
			end++
		}
		b.WriteString(classRune(r))
		if end > r {
			b.WriteString("-" + classRune(end))
		}
		r = end
	}
	b.WriteString("]")
	return b.String()
}

func classRune(r rune) string {
	if r <= 0xff {
		const hex = "0123456789abcdef"
		return `\x` + string(hex[r>>4]) + string(hex[r&0xf])
	}
	return string(r)
}
