package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestGeneratedIsFresh fails when the committed code or OpenAPI document
// differs from what the contract generates: run `go generate ./api`.
func TestGeneratedIsFresh(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
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
	if n := doc.Paths.Len(); n != 14 {
		t.Errorf("%d paths, want 14 (11 of the API, 3 operational: the probes and this document)", n)
	}
}
