package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/cofferhq/coffer"
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
		op := operation(file, m, path, method, rule.GetBody() == "*")
		if paths[path] == nil {
			paths[path] = object{}
		}
		paths[path].(object)[strings.ToLower(method)] = op
	}
	for i := 0; i < file.Messages().Len(); i++ {
		msg := file.Messages().Get(i)
		schemas[string(msg.Name())] = messageSchema(file, msg, nil)
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
				"schema":      object{"type": "integer"},
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

func operation(file protoreflect.FileDescriptor, m protoreflect.MethodDescriptor, path, method string, body bool) object {
	in := m.Input()
	inPath := map[string]bool{}
	var params []any
	for _, v := range pathVar.FindAllStringSubmatch(path, -1) {
		inPath[v[1]] = true
		params = append(params, parameter(file, in.Fields().ByName(protoreflect.Name(v[1])), "path"))
	}
	op := object{
		"operationId": string(m.Name()),
		"summary":     firstSentence(comment(file, m)),
		"description": comment(file, m),
		"tags":        []any{"wallet"},
	}
	if !body {
		for i := 0; i < in.Fields().Len(); i++ {
			if f := in.Fields().Get(i); !inPath[string(f.Name())] {
				params = append(params, parameter(file, f, "query"))
			}
		}
	}
	if params != nil {
		op["parameters"] = params
	}
	if body {
		op["requestBody"] = object{"required": true, "content": object{
			"application/json": object{"schema": messageSchema(file, in, inPath)},
		}}
	}
	ok := object{"description": "OK", "content": object{
		"application/json": object{"schema": ref(m.Output())},
	}}
	responses := object{"200": ok, "default": problemResponse("An error; code says which.")}
	if m.Output().Name() == "Trx" && method == "POST" {
		ok["description"] = "A replay: the original result of the same key and payload."
		responses["201"] = object{"description": "Created: a new write.", "content": ok["content"]}
	}
	unavailable := problemResponse("shard_unavailable: the player's database is unreachable; or overloaded: the instance serves as many calls as it may. Nothing was done: retry after Retry-After seconds with the same key.")
	unavailable["headers"] = object{"Retry-After": object{"$ref": "#/components/headers/Retry-After"}}
	responses["503"] = unavailable
	op["responses"] = responses
	return op
}

func parameter(file protoreflect.FileDescriptor, f protoreflect.FieldDescriptor, in string) object {
	p := object{"name": string(f.Name()), "in": in, "schema": fieldSchema(f)}
	if d := comment(file, f); d != "" {
		p["description"] = d
	}
	if in == "path" {
		p["required"] = true
	}
	return p
}

// messageSchema is a closed object: a field the contract does not name is
// an error both ways. Fields in skip (path parameters) are left out.
func messageSchema(file protoreflect.FileDescriptor, msg protoreflect.MessageDescriptor, skip map[string]bool) object {
	props := object{}
	for i := 0; i < msg.Fields().Len(); i++ {
		f := msg.Fields().Get(i)
		if skip[string(f.Name())] {
			continue
		}
		s := fieldSchema(f)
		if d := comment(file, f); d != "" && s["$ref"] == nil {
			s["description"] = d
		}
		props[string(f.Name())] = s
	}
	s := object{"type": "object", "properties": props, "additionalProperties": false}
	if d := comment(file, msg); d != "" && skip == nil {
		s["description"] = d
	}
	return s
}

func fieldSchema(f protoreflect.FieldDescriptor) object {
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

func problemResponse(desc string) object {
	return object{"description": desc, "content": object{
		"application/problem+json": object{"schema": object{"$ref": "#/components/schemas/Problem"}},
	}}
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
