package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
)

func TestRoutesCoverContract(t *testing.T) {
	routes := Routes()
	if len(routes) != 13 {
		t.Fatalf("%d routes, want the 13 rpcs of wallet.proto", len(routes))
	}
	for _, r := range routes {
		if r.Method == "POST" && !slices.Contains(r.Permissions, coffer.PermWrite) {
			t.Errorf("%s: a POST must be allowed by write, has %v", r.RPC, r.Permissions)
		}
		// A hold's commit or rollback may name the client that began it
		// (emitter), never ignored: refused without support_write.
		if r.Method == "POST" && !slices.Equal(r.Query, nil) && !slices.Equal(r.Query, []string{"emitter"}) {
			t.Errorf("%s: a POST takes no query parameter but emitter, has %v", r.RPC, r.Query)
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
