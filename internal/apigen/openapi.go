package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/http/httpstatus"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// object is one JSON object of the document; encoding/json writes its keys
// sorted, so the output is deterministic.
type object = map[string]any

// openAPI builds the OpenAPI 3.0 document of the HTTP/JSON routes: one
// operation per rpc with a google.api.http rule, plus the operational
// routes that have no rpc.
func openAPI(file protoreflect.FileDescriptor) ([]byte, error) {
	svc := file.Services().Get(0)
	g := &generator{file: file, requests: requestMessages(svc)}
	schemas := object{"Problem": problemSchema()}
	paths := operationalPaths()
	for i := 0; i < svc.Methods().Len(); i++ {
		m := svc.Methods().Get(i)
		rule, err := httpRule(m)
		if err != nil {
			return nil, err
		}
		method, path := ruleRoute(rule)
		if method == "" {
			return nil, fmt.Errorf("%s: no google.api.http rule", m.Name())
		}
		op := g.operation(m, path, method, rule.GetBody() == "*")
		if paths[path] == nil {
			paths[path] = object{}
		}
		paths[path].(object)[strings.ToLower(method)] = op
	}
	for i := 0; i < file.Messages().Len(); i++ {
		msg := file.Messages().Get(i)
		schemas[string(msg.Name())] = g.messageSchema(msg, nil)
	}
	doc := object{
		"openapi": "3.0.3",
		"info": object{
			"title":       "coffer",
			"version":     "v1",
			"description": comment(file, svc),
		},
		"security": []any{object{"bearer": []any{}}},
		"paths":    paths,
		"components": object{
			"schemas":         schemas,
			"securitySchemes": object{"bearer": object{"type": "http", "scheme": "bearer"}},
			"headers": object{"Retry-After": object{
				"description": "Seconds to wait before retrying with the same idempotency key.",
				"required":    true,
				"schema":      object{"type": "integer", "minimum": 0},
			}},
		},
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	return append(raw, '\n'), err
}

// httpRule reads a method's google.api.http option. The compiler keeps
// extensions as raw bytes, so they are parsed again with the Go types.
func httpRule(m protoreflect.MethodDescriptor) (*annotations.HttpRule, error) {
	raw, err := proto.Marshal(m.Options())
	if err != nil {
		return nil, err
	}
	var opts descriptorpb.MethodOptions
	if err := (proto.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}).Unmarshal(raw, &opts); err != nil {
		return nil, err
	}
	rule, _ := proto.GetExtension(&opts, annotations.E_Http).(*annotations.HttpRule)
	return rule, nil
}

func ruleRoute(r *annotations.HttpRule) (method, path string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return "GET", p.Get
	case *annotations.HttpRule_Post:
		return "POST", p.Post
	}
	return "", ""
}

var pathVar = regexp.MustCompile(`\{([a-z_]+)\}`)

// generator writes the document of one contract file.
type generator struct {
	file protoreflect.FileDescriptor
	// requests are the messages requests carry, whose fields have bounds
	// (bounds.go).
	requests map[protoreflect.FullName]bool
}

func (g *generator) operation(m protoreflect.MethodDescriptor, path, method string, body bool) object {
	in := m.Input()
	inPath := map[string]bool{}
	var params []any
	for _, v := range pathVar.FindAllStringSubmatch(path, -1) {
		inPath[v[1]] = true
		params = append(params, g.parameter(in.Fields().ByName(protoreflect.Name(v[1])), "path"))
	}
	op := object{
		"operationId": string(m.Name()),
		"summary":     firstSentence(comment(g.file, m)),
		"description": comment(g.file, m),
		"tags":        []any{"wallet"},
	}
	if !body {
		for i := 0; i < in.Fields().Len(); i++ {
			if f := in.Fields().Get(i); !inPath[string(f.Name())] {
				params = append(params, g.parameter(f, "query"))
			}
		}
	}
	if params != nil {
		op["parameters"] = params
	}
	if body {
		op["requestBody"] = object{"required": true, "content": object{
			"application/json": object{"schema": g.messageSchema(in, inPath)},
		}}
	}
	op["responses"] = responses(m, method)
	return op
}

// responses are every answer of rpc m: its success, and a problem for
// each status its codes (rpcCodes) map to, naming those codes.
func responses(m protoreflect.MethodDescriptor, method string) object {
	rpc := string(m.Name())
	content := object{"application/json": object{"schema": ref(m.Output())}}
	ok := []object{{"description": "OK", "content": content}}
	if m.Output().Name() == "Trx" && method == "POST" {
		ok = []object{{"description": "A replay: the original result of the same key and payload.", "content": content},
			{"description": "Created: a new write.", "content": content}}
	}
	out := object{}
	for i, r := range ok {
		if l, found := links[rpc]; found {
			r["links"] = l.of()
		}
		out[strconv.Itoa(http.StatusOK+i)] = r
	}
	byStatus := map[int][]any{}
	for _, c := range codesOf(rpc, method) {
		status, ok := httpstatus.Of(c)
		if !ok {
			panic(fmt.Sprintf("apigen: code %s has no HTTP status", c))
		}
		byStatus[status] = append(byStatus[status], string(c))
	}
	for status, codes := range byStatus {
		r := object{
			"description": fmt.Sprintf("%s: %s.", http.StatusText(status), joinCodes(codes)),
			"content": object{"application/problem+json": object{"schema": object{"allOf": []any{
				object{"$ref": "#/components/schemas/Problem"},
				object{"properties": object{"code": object{"type": "string", "enum": codes}}},
			}}}},
		}
		if status == http.StatusServiceUnavailable {
			r["description"] = r["description"].(string) + " Nothing was done: retry after Retry-After seconds with the same key."
			r["headers"] = object{"Retry-After": object{"$ref": "#/components/headers/Retry-After"}}
		}
		out[strconv.Itoa(status)] = r
	}
	return out
}

func joinCodes(codes []any) string {
	s := make([]string, len(codes))
	for i, c := range codes {
		s[i] = c.(string)
	}
	return strings.Join(s, ", ")
}

// rpcCodes are the codes each rpc's coffer.Ledger method returns besides
// invalid_argument and internal (its comment in ledger.go); codesOf adds
// what the transport answers itself.
var rpcCodes = map[string][]coffer.Code{
	"GetBalances": {coffer.CodeUnavailable},
	"Change": {coffer.CodeInsufficientFunds, coffer.CodeTooManyLots, coffer.CodeIdempotencyConflict,
		coffer.CodePurchaseAlreadyCredited, coffer.CodeUnavailable},
	"BatchChange": {},
	"Commit":      {coffer.CodeNotFound, coffer.CodeHoldNotPending, coffer.CodeHoldExpired, coffer.CodeTooManyLots, coffer.CodeUnavailable},
	"Rollback":    {coffer.CodeNotFound, coffer.CodeHoldNotPending, coffer.CodeUnavailable},
	"GetTrx":      {coffer.CodeNotFound, coffer.CodeUnavailable},
	"Exchange":    {coffer.CodeInsufficientFunds, coffer.CodeTooManyLots, coffer.CodeIdempotencyConflict, coffer.CodeUnavailable},
	"Refund":      {coffer.CodeNotFound, coffer.CodeAlreadyRefunded, coffer.CodeIdempotencyConflict, coffer.CodeUnavailable},
	"Finlog":      {coffer.CodeUnavailable},
	"Revenue":     {coffer.CodeUnavailable},
	"GetStatus":   {},
	"GetOrder":    {coffer.CodeNotFound, coffer.CodeUnavailable},
	"GetClient":   {},
}

// codesOf are the codes of every answer of rpc: the ledger's (rpcCodes)
// and the transport's: a malformed path, query or body, the API key and
// its permission, a body too large (every POST reads one), a full
// instance, a bug.
func codesOf(rpc, method string) []coffer.Code {
	own, ok := rpcCodes[rpc]
	if !ok {
		panic("apigen: rpcCodes lacks rpc " + rpc)
	}
	out := []coffer.Code{coffer.CodeInvalid, coffer.CodeUnauthenticated, coffer.CodePermissionDenied}
	if method == "POST" {
		out = append(out, coffer.CodePayloadTooLarge)
	}
	out = append(out, own...)
	return append(out, coffer.CodeOverloaded, coffer.CodeInternal)
}

// trxRef names a trx to the calls a link leads to: its parameters are
// OpenAPI runtime expressions.
type trxRef struct {
	what       string
	parameters object
}

var (
	// writtenTrx is the trx a write just wrote: the request's namespace
	// and player, the trx's key, the calling client's.
	writtenTrx = trxRef{"The trx just written, by its idempotency key.", object{
		"namespace":       "$request.path.namespace",
		"player_id":       "$request.path.player_id",
		"idempotency_key": "$response.body#/idempotency_key",
	}}
	// presentingTrx is the trx whose request presented a store order
	// first: its player, its client's emitter, its key.
	presentingTrx = trxRef{"The trx whose request presented the order, by its client's emitter and its key.", object{
		"namespace":       "$request.path.namespace",
		"player_id":       "$response.body#/player_id",
		"emitter":         "$response.body#/emitter",
		"idempotency_key": "$response.body#/idempotency_key",
	}}
)

// link is where an rpc's answer leads: the calls to, on the trx ref.
// A stateful tester or a client generator follows them.
type link struct {
	ref trxRef
	to  []string
}

var links = map[string]link{
	"Change":   {writtenTrx, []string{"GetTrx", "Commit", "Rollback"}},
	"Exchange": {writtenTrx, []string{"GetTrx"}},
	"Refund":   {writtenTrx, []string{"GetTrx"}},
	"Commit":   {writtenTrx, []string{"GetTrx"}},
	"Rollback": {writtenTrx, []string{"GetTrx"}},
	"GetOrder": {presentingTrx, []string{"GetTrx"}},
}

// of is l as the OpenAPI links of a response.
func (l link) of() object {
	out := object{}
	for _, to := range l.to {
		out[to] = object{"operationId": to, "description": l.ref.what, "parameters": l.ref.parameters}
	}
	return out
}

func (g *generator) parameter(f protoreflect.FieldDescriptor, in string) object {
	s := g.fieldSchema(f)
	p := object{"name": string(f.Name()), "in": in, "schema": s}
	if d := comment(g.file, f); d != "" {
		p["description"] = d
	}
	b, _ := boundOf(f)
	if in == "path" || b.required {
		p["required"] = true
	}
	return p
}

// messageSchema is a closed object: a field the contract does not name is
// an error both ways. Fields in skip (path parameters) are left out. A
// request message's fields have their bounds, and those the server
// refuses a request without are required.
func (g *generator) messageSchema(msg protoreflect.MessageDescriptor, skip map[string]bool) object {
	props := object{}
	var required []any
	for i := 0; i < msg.Fields().Len(); i++ {
		f := msg.Fields().Get(i)
		if skip[string(f.Name())] {
			continue
		}
		s := g.fieldSchema(f)
		if d := comment(g.file, f); d != "" && s["$ref"] == nil {
			s["description"] = d
		}
		props[string(f.Name())] = s
		if b, _ := boundOf(f); b.required && g.requests[msg.FullName()] {
			required = append(required, string(f.Name()))
		}
	}
	s := object{"type": "object", "properties": props, "additionalProperties": false}
	if required != nil {
		s["required"] = required
	}
	if d := comment(g.file, msg); d != "" && skip == nil {
		s["description"] = d
	}
	return s
}

// fieldSchema is f's schema: its type and, in a request message, its
// bound.
func (g *generator) fieldSchema(f protoreflect.FieldDescriptor) object {
	s := typeSchema(f)
	if g.requests[f.ContainingMessage().FullName()] {
		s = bounded(s, f)
	}
	return s
}

// typeSchema is f's JSON type.
func typeSchema(f protoreflect.FieldDescriptor) object {
	var s object
	switch f.Kind() {
	case protoreflect.Int32Kind:
		s = object{"type": "integer", "format": "int32"}
	case protoreflect.Int64Kind:
		s = object{"type": "integer", "format": "int64"}
	case protoreflect.BoolKind:
		s = object{"type": "boolean"}
	case protoreflect.StringKind:
		s = object{"type": "string"}
	case protoreflect.MessageKind:
		switch f.Message().FullName() {
		case "google.protobuf.Timestamp":
			s = object{"type": "string", "format": "date-time"}
		case "google.protobuf.Struct":
			s = object{"type": "object", "additionalProperties": true}
		case "google.rpc.Status":
			// An error inside an answer: over HTTP it is what a call's
			// error is, a problem details body.
			s = object{"$ref": "#/components/schemas/Problem"}
		default:
			s = ref(f.Message())
		}
	default:
		panic(fmt.Sprintf("apigen: field %s: kind %s has no JSON mapping here", f.FullName(), f.Kind()))
	}
	if f.IsList() {
		return object{"type": "array", "items": s}
	}
	return s
}

func ref(msg protoreflect.MessageDescriptor) object {
	return object{"$ref": "#/components/schemas/" + string(msg.Name())}
}

func problemSchema() object {
	str := object{"type": "string"}
	return object{
		"type":        "object",
		"description": "An error (RFC 9457 problem details) with coffer's stable code.",
		"properties": object{
			"type":       str,
			"title":      str,
			"status":     object{"type": "integer"},
			"detail":     str,
			"code":       object{"type": "string", "enum": codes()},
			"request_id": str,
		},
		"required": []any{"code", "status", "title"},
	}
}

// codes are the stable error codes of the contract (docs/api.md, Errors).
func codes() []any {
	out := make([]any, len(coffer.Codes))
	for i, c := range coffer.Codes {
		out[i] = string(c)
	}
	return out
}

// operationalPaths are the routes without an rpc: probes and this
// document. They need no key. Metrics are on the operations listener, not
// the API's port.
func operationalPaths() object {
	plain := func(id, desc, typ string) object {
		return object{"get": object{
			"operationId": id, "summary": desc, "tags": []any{"operations"}, "security": []any{},
			"responses": object{"200": object{"description": "OK", "content": object{typ: object{"schema": object{"type": "string"}}}}},
		}}
	}
	ready := plain("Ready", "Readiness: the config is valid and every reachable database's schema was found compatible. A shard database going down later does not make the instance unready.", "text/plain")
	ready["get"].(object)["responses"].(object)["503"] = object{"description": "Not ready yet, or shutting down."}
	openapi := plain("OpenAPI", "This document.", "application/json")
	openapi["get"].(object)["responses"].(object)["200"].(object)["content"] = object{"application/json": object{"schema": object{"type": "object"}}}
	return object{
		"/healthz":      plain("Health", "Liveness: the process serves HTTP.", "text/plain"),
		"/readyz":       ready,
		"/openapi.json": openapi,
	}
}

func comment(file protoreflect.FileDescriptor, d protoreflect.Descriptor) string {
	c := file.SourceLocations().ByDescriptor(d).LeadingComments
	return strings.Join(strings.Fields(c), " ")
}

func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}
