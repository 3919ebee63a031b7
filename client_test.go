package coffer

import (
	"encoding/hex"
	"strings"
	"testing"
)

func TestClientsAuthenticateAndAllow(t *testing.T) {
	game := Client{Name: "game", Emitter: 1, KeyHashes: []KeyHash{HashKey("old"), HashKey("new")},
		Namespaces: []Namespace{1, 2}, Permissions: []Permission{PermRead, PermWrite}}
	cs, err := NewClients([]Client{game, {Name: "support", Emitter: 2, KeyHashes: []KeyHash{HashKey("s")}, Namespaces: []Namespace{1}, Permissions: []Permission{PermAdmin}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"old", "new"} {
		if c, err := cs.Authenticate(key); err != nil || c.Name != "game" {
			t.Fatalf("key %q: %v %v", key, c, err)
		}
	}
	for _, key := range []string{"", "ol", "old ", "s2"} {
		if _, err := cs.Authenticate(key); ErrorCode(err) != CodeUnauthenticated {
			t.Fatalf("key %q: %v", key, err)
		}
	}
	c, _ := cs.Authenticate("new")
	if c.Allow(2, PermWrite) != nil || ErrorCode(c.Allow(3, PermRead)) != CodePermissionDenied ||
		ErrorCode(c.Allow(1, PermAdmin)) != CodePermissionDenied || ErrorCode(c.AllowPermission(PermOps)) != CodePermissionDenied {
		t.Fatal("permissions of game are wrong")
	}
	s, _ := cs.Authenticate("s")
	if s.Allow(1, PermAdmin) != nil || ErrorCode(s.Allow(1, PermRead)) != CodePermissionDenied {
		t.Fatal("admin does not imply read")
	}
}

// TestOpsIsNotAdmin: the instance-wide calls need ops; an admin of a
// namespace is refused them, and a client with only ops needs no
// namespace and may touch none.
func TestOpsIsNotAdmin(t *testing.T) {
	cs, err := NewClients([]Client{
		{Name: "support", Emitter: 1, KeyHashes: []KeyHash{HashKey("s")}, Namespaces: []Namespace{1}, Permissions: []Permission{PermRead, PermAdmin}},
		{Name: "monitor", Emitter: 2, KeyHashes: []KeyHash{HashKey("m")}, Permissions: []Permission{PermOps}},
	})
	if err != nil {
		t.Fatal(err)
	}
	support, _ := cs.Authenticate("s")
	monitor, _ := cs.Authenticate("m")
	if ErrorCode(support.AllowPermission(PermOps)) != CodePermissionDenied {
		t.Error("an admin of namespace 1 passes for ops")
	}
	if monitor.AllowPermission(PermOps) != nil || ErrorCode(monitor.Allow(1, PermRead)) != CodePermissionDenied {
		t.Error("ops: wrong permissions")
	}
	if _, err := NewClients([]Client{{Name: "x", Emitter: 1, KeyHashes: []KeyHash{HashKey("x")}, Permissions: []Permission{PermOps, PermRead}}}); err == nil {
		t.Error("a client with read and no namespace was accepted")
	}
}

func TestNewClientsRejects(t *testing.T) {
	ok := Client{Name: "a", Emitter: 1, KeyHashes: []KeyHash{HashKey("a")}, Namespaces: []Namespace{1}, Permissions: []Permission{PermRead}}
	for name, c := range map[string]func(Client) []Client{
		"duplicate name": func(c Client) []Client {
			d := c
			d.Emitter, d.KeyHashes = 2, []KeyHash{HashKey("b")}
			return []Client{c, d}
		},
		"duplicate emitter": func(c Client) []Client {
			d := c
			d.Name, d.KeyHashes = "b", []KeyHash{HashKey("b")}
			return []Client{c, d}
		},
		"shared key":     func(c Client) []Client { d := c; d.Name, d.Emitter = "b", 2; return []Client{c, d} },
		"no key":         func(c Client) []Client { c.KeyHashes = nil; return []Client{c} },
		"bad permission": func(c Client) []Client { c.Permissions = []Permission{"root"}; return []Client{c} },
		"namespace 0":    func(c Client) []Client { c.Namespaces = []Namespace{0}; return []Client{c} },
		"emitter 0":      func(c Client) []Client { c.Emitter = 0; return []Client{c} },
	} {
		if _, err := NewClients(c(ok)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseKeyHash(strings.Repeat("ab", 31)); err == nil {
		t.Error("short hash accepted")
	}
	h := HashKey("x")
	if got, err := ParseKeyHash(hex.EncodeToString(h[:])); err != nil || got != h {
		t.Errorf("ParseKeyHash: %v", err)
	}
}
