package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// testRoot is the module's root, as go generate finds it.
func testRoot(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestGeneratedIsFresh fails when the committed code or OpenAPI document
// differs from what the contract generates: run `go generate ./api`.
func TestGeneratedIsFresh(t *testing.T) {
	root := testRoot(t)
	files, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 {
		t.Fatalf("generated %d files, want 4 (two Go files, two copies of openapi.json)", len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatalf("%s: %v (run go generate ./api)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./api", name)
		}
	}
}

// TestOpenAPIValid validates the document against the OpenAPI 3 rules.
func TestOpenAPIValid(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := doc.Paths.Len(); n != 16 {
		t.Errorf("%d paths, want 16 (13 of the API, 3 operational: the probes and this document)", n)
	}
}

// TestQueryOfABodylessPost: a route without a body takes its fields
// outside the path as query parameters, whatever its method, as the
// server does (api.Route.Query); api's TestRoutesTakeTheDocumentedQuery
// holds the two together on the contract's routes (Commit and Rollback
// are such POSTs: their emitter).
func TestQueryOfABodylessPost(t *testing.T) {
	file, err := compile(testRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	svc := file.Services().Get(0)
	m := svc.Methods().ByName("GetBalances")
	g := &generator{file: file, requests: requestMessages(svc)}
	op := g.operation(m, "/v1/namespaces/{namespace}/players/{player_id}/balances", "POST", false)
	var query []string
	for _, p := range op["parameters"].([]any) {
		if p := p.(object); p["in"] == "query" {
			query = append(query, p["name"].(string))
		}
	}
	if want := []string{"currency", "at", "lots"}; !slices.Equal(query, want) {
		t.Fatalf("query parameters of a body-less POST: %v, want %v", query, want)
	}
}
