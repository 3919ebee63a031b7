package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestRoutesCoverContract(t *testing.T) {
	routes := Routes()
	if len(routes) != 11 {
		t.Fatalf("%d routes, want the 11 rpcs of wallet.proto", len(routes))
	}
	for _, r := range routes {
		if r.Method == "POST" && r.Permission != "write" {
			t.Errorf("%s: a POST must need write, has %s", r.RPC, r.Permission)
		}
		if r.Method == "POST" && len(r.Query) > 0 {
			t.Errorf("%s: a POST takes no query parameter, has %v", r.RPC, r.Query)
		}
	}
}

// TestRoutesTakeTheDocumentedQuery: the server takes, on each route,
// exactly the query parameters the OpenAPI document publishes; both come
// from wallet.proto by one rule (a body-less route's fields outside its
// path), written twice because apigen runs before this package builds.
func TestRoutesTakeTheDocumentedQuery(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string }
		}
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range Routes() {
		op, ok := doc.Paths[r.Path][strings.ToLower(r.Method)]
		if !ok {
			t.Errorf("%s %s: not in the OpenAPI document", r.Method, r.Path)
			continue
		}
		var documented []string
		for _, p := range op.Parameters {
			if p.In == "query" {
				documented = append(documented, p.Name)
			}
		}
		if !slices.Equal(documented, r.Query) {
			t.Errorf("%s %s: takes query %v, the document publishes %v", r.Method, r.Path, r.Query, documented)
		}
	}
}
