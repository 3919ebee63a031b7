package coffer

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// A store order is credited at most once per namespace, whoever presents
// it: before a change that credits a purchase reaches the player's write,
// the order is claimed for the request's Scope, in a transaction of its
// own on the shard the order's key hashes to, and only the claimant may
// credit it (docs/adr/0011-purchase-claims.md). This file holds the
// rule; postgres/claim.go stores the claims.

// PurchaseKey identifies a store order in a namespace: what is credited
// at most once.
type PurchaseKey struct {
	Namespace Namespace
	Store     string
	OrderID   string
}

// The names of a store order are compared exactly, byte for byte, so
// that no order has two spellings. A store is a code the deployment
// picks: lowercase ASCII, so "steam" and "Steam" cannot name one store
// twice. An order id is the store's own, as it issued it, and is never
// folded or trimmed (ids such as Stripe's tell cases apart); it may not
// carry what no store issues and a client adds by mistake: white space at
// either end, control characters. A store's length is one byte of
// PurchaseKey.Hash.
const (
	// StoreLenMax bounds a store's code, in bytes (characters of
	// StoreChars).
	StoreLenMax = 64
	// OrderIDLenMax bounds an order id, in bytes.
	OrderIDLenMax = 128
	// StoreChars are the characters a store's code may have.
	StoreChars = "abcdefghijklmnopqrstuvwxyz0123456789_-"
)

// OrderIDRune tells whether an order id may hold r: any character but a
// control character.
func OrderIDRune(r rune) bool { return !unicode.IsControl(r) }

// OrderIDEdgeRune tells whether an order id may start or end with r: an
// OrderIDRune that is not white space.
func OrderIDEdgeRune(r rune) bool { return OrderIDRune(r) && !unicode.IsSpace(r) }

// checkOrder checks the names of a store order; field prefixes the
// fields' names in the error ("ops[0].purchase."). Errors are CodeInvalid.
func checkOrder(field, store, orderID string) error {
	if len(store) < 1 || len(store) > StoreLenMax || strings.TrimLeft(store, StoreChars) != "" {
		return Errorf(CodeInvalid, "%sstore: must be 1–%d characters of a–z, 0–9, _ and - (a code, such as steam)", field, StoreLenMax)
	}
	first, _ := utf8.DecodeRuneInString(orderID)
	last, _ := utf8.DecodeLastRuneInString(orderID)
	if len(orderID) < 1 || len(orderID) > OrderIDLenMax || !utf8.ValidString(orderID) ||
		strings.ContainsFunc(orderID, func(r rune) bool { return !OrderIDRune(r) }) || !OrderIDEdgeRune(first) || !OrderIDEdgeRune(last) {
		return Errorf(CodeInvalid, "%sorder_id: must be 1–%d bytes of UTF-8, without control characters or white space at either end, as the store issued it",
			field, OrderIDLenMax)
	}
	return nil
}

// Key is the order p credits in namespace ns.
func (p *Purchase) Key(ns Namespace) PurchaseKey {
	return PurchaseKey{Namespace: ns, Store: p.Store, OrderID: p.OrderID}
}

// Hash is the 64-bit key that places the order's claim on a shard (the
// jump hash of shard.Map.ShardOfPurchase): the first 8 bytes, big-endian,
// of the SHA-256 of the namespace (4 bytes, big-endian), the store's
// length (1 byte; a store is at most 64 bytes) and the store and the
// order id. It is part of the stored data's layout, like the players'
// jump hash: changed, it would send every request to a shard that does
// not hold the order's claim, so TestPurchaseKeyHash freezes it.
func (k PurchaseKey) Hash() uint64 {
	h := sha256.New()
	var head [5]byte
	binary.BigEndian.PutUint32(head[:4], uint32(k.Namespace))
	head[4] = byte(len(k.Store))
	h.Write(head[:])
	h.Write([]byte(k.Store))
	h.Write([]byte(k.OrderID))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// Purchases lists the distinct store orders a validated change's paid
// grants credit, ordered by store and order id. Several paid grants of one
// order in one change (a bundle: gold and gems for one payment) are one
// order, claimed once. Every request claims its orders in this order, so
// that two requests claiming the same orders on one database never wait
// on each other's claims in a cycle.
func (v ValidChange) Purchases() []PurchaseKey {
	var keys []PurchaseKey
	for _, op := range v.Ops {
		if op.Purchase == nil {
			continue
		}
		k := op.Purchase.Key(v.Namespace)
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b PurchaseKey) int {
		return cmp.Or(cmp.Compare(a.Store, b.Store), cmp.Compare(a.OrderID, b.OrderID))
	})
	return keys
}

// Credit decides whether the request of claimant may credit order k,
// whose claim names owner: only the claimant's own requests may. The
// claimant is the request's Scope, not its payload: a scope has at most
// one trx, so the order is credited at most once whatever payload its
// claimant sends, and the player's write decides, as for any key, whether
// a request is a replay, an idempotency_conflict or (its first attempt
// having failed) a new write. A claim is never released, not even by a
// request that failed after it claimed (ADR 0011 says why). Errors:
// purchase_already_credited, whose message names nothing of the owner.
func (k PurchaseKey) Credit(claimant, owner Scope) error {
	if claimant == owner {
		return nil
	}
	return Errorf(CodePurchaseAlreadyCredited, "store %q order %q was presented by another request; an order is credited at most once", k.Store, k.OrderID)
}

// OrderClaim is who presented a store order first: the player it was
// credited to (or is to be, by that request), and the request's client
// and idempotency key. Support finds a player by an order with it.
type OrderClaim struct {
	Namespace      Namespace `json:"namespace"`
	Store          string    `json:"store"`
	OrderID        string    `json:"order_id"`
	PlayerID       PlayerID  `json:"player_id"`
	Emitter        Emitter   `json:"emitter"`
	IdempotencyKey string    `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
}

// Validate checks the key's namespace and names. Errors: invalid_argument.
func (k PurchaseKey) Validate() error {
	if k.Namespace <= 0 {
		return Errorf(CodeInvalid, "namespace must be > 0")
	}
	return checkOrder("", k.Store, k.OrderID)
}
