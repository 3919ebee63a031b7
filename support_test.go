package coffer

import (
	"encoding/json"
	"testing"
)

func supportClients(t *testing.T) (game, agent, reader *Client) {
	t.Helper()
	cs, err := NewClients([]Client{
		{Name: "game", Emitter: 1, KeyHashes: []KeyHash{HashKey("g")}, Namespaces: []Namespace{1}, Permissions: []Permission{PermRead, PermWrite}},
		{Name: "alice", Emitter: 7, KeyHashes: []KeyHash{HashKey("a")}, Namespaces: []Namespace{1}, Permissions: []Permission{PermSupport, PermSupportWrite}},
		{Name: "viewer", Emitter: 8, KeyHashes: []KeyHash{HashKey("v")}, Namespaces: []Namespace{1}, Permissions: []Permission{PermSupport}},
	})
	if err != nil {
		t.Fatal(err)
	}
	game, _ = cs.Authenticate("g")
	agent, _ = cs.Authenticate("a")
	reader, _ = cs.Authenticate("v")
	if got := cs.Names(); len(got) != 3 || got[1] != (ClientName{Emitter: 7, Name: "alice", Support: true}) || got[2].Support {
		t.Fatalf("names: %+v", got)
	}
	return game, agent, reader
}

// TestSupportChange: a support agent's change must say why, and its meta
// names the agent; any other client's change is left as sent.
func TestSupportChange(t *testing.T) {
	game, agent, _ := supportClients(t)
	cases := []struct {
		name   string
		c      *Client
		reason string
		meta   string
		want   string // the meta after, or the error's code
	}{
		{"a game's change", game, "", `{"support":{"client":"x"}}`, `{"support":{"client":"x"}}`},
		{"no meta", agent, "ticket 12", ``, `{"support":{"client":"alice"}}`},
		{"null meta", agent, "ticket 12", `null`, `{"support":{"client":"alice"}}`},
		{"empty meta", agent, "ticket 12", ` { } `, `{"support":{"client":"alice"} }`},
		{"meta kept", agent, "ticket 12", ` {"ticket": 12}`, `{"support":{"client":"alice"},"ticket": 12}`},
		{"no reason", agent, " ", `{}`, "invalid_argument"},
		{"meta naming an agent", agent, "ticket 12", `{"support": "bob"}`, "invalid_argument"},
		{"meta not an object", agent, "ticket 12", `[1]`, `[1]`},
	}
	for _, tc := range cases {
		req, err := tc.c.SupportChange(ChangeRequest{Reason: tc.reason, Meta: json.RawMessage(tc.meta)})
		got := string(req.Meta)
		if err != nil {
			got = string(ErrorCode(err))
		}
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := agent.SupportChange(ChangeRequest{Reason: "x", Meta: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := agent.SupportRefund(RefundRequest{}); ErrorCode(err) != CodeInvalid {
		t.Errorf("an agent's refund without a reason: %v", err)
	}
	if game.SupportRefund(RefundRequest{}) != nil || agent.SupportRefund(RefundRequest{Reason: "chargeback 5"}) != nil {
		t.Error("a refund with a reason, or a game's, was refused")
	}
}

// TestTrxEmitter: a client names its own trx; another client's only with
// the permission the call asks for, in its namespaces; a negative emitter
// is no client's, for any client.
func TestTrxEmitter(t *testing.T) {
	game, agent, viewer := supportClients(t)
	const denied, invalid = -1, -2
	cases := []struct {
		name  string
		c     *Client
		ns    Namespace
		other Emitter
		p     Permission
		want  Emitter // denied: permission_denied; invalid: invalid_argument
	}{
		{"own, by default", game, 1, 0, PermSupport, 1},
		{"own, named", game, 1, 1, PermSupport, 1},
		{"a game names another's", game, 1, 7, PermSupport, denied},
		{"a game names a negative one", game, 1, -1, PermSupport, invalid},
		{"an agent reads a game's", agent, 1, 1, PermSupport, 1},
		{"an agent finishes a game's hold", agent, 1, 1, PermSupportWrite, 1},
		{"an agent names a negative one", agent, 1, -1, PermSupportWrite, invalid},
		{"an agent outside its namespaces", agent, 2, 1, PermSupport, denied},
		{"a viewer reads a game's", viewer, 1, 1, PermSupport, 1},
		{"a viewer finishes a game's hold", viewer, 1, 1, PermSupportWrite, denied},
	}
	for _, tc := range cases {
		got, err := tc.c.TrxEmitter(tc.ns, tc.other, tc.p)
		var ok bool
		switch tc.want {
		case denied:
			ok = ErrorCode(err) == CodePermissionDenied
		case invalid:
			ok = ErrorCode(err) == CodeInvalid
		default:
			ok = err == nil && got == tc.want
		}
		if !ok {
			t.Errorf("%s: got %d %v, want %d", tc.name, got, err, tc.want)
		}
	}
}

// TestSupportClientIsNotABackend: a client with support_write and write
// is refused: every write of a support client is a correction.
func TestSupportClientIsNotABackend(t *testing.T) {
	_, err := NewClients([]Client{{Name: "x", Emitter: 1, KeyHashes: []KeyHash{HashKey("x")}, Namespaces: []Namespace{1},
		Permissions: []Permission{PermWrite, PermSupportWrite}}})
	if err == nil {
		t.Fatal("support_write with write was accepted")
	}
	if _, err := NewClients([]Client{{Name: "x", Emitter: 1, KeyHashes: []KeyHash{HashKey("x")}, Namespaces: []Namespace{1},
		Permissions: []Permission{"suport"}}}); err == nil {
		t.Fatal("an unknown permission was accepted")
	}
}
