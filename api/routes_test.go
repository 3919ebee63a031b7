package api

import "testing"

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
