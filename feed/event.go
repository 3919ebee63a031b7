// Package feed is coffer's change feed: a relay per shard database reads
// what PostgreSQL committed to the trx_N and op_N tables through logical
// decoding (pgoutput, a replication slot and a publication), makes one
// event of each committed change of a trx, and delivers the events to
// NATS JetStream and to webhooks, confirming the slot's position only
// once every event up to it is delivered (docs/events.md,
// docs/adr/0016-change-feed.md).
//
// The relay's few statements (the publication, the slot, the slot's
// retained WAL) live here, not in postgres/: they are about the
// replication protocol, not the ledger.
package feed

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/cofferhq/coffer"
)

// Kind is what an event tells of its trx. It is the last token of the
// event's subject (coffer.events.<ns>.<kind>) and what webhooks filter on.
type Kind string

// Event kinds: one per committed change of a trx. A hold makes two
// events, its begin and its finish.
const (
	KindChange       Kind = "change"
	KindHoldBegin    Kind = "hold_begin"
	KindHoldCommit   Kind = "hold_commit"
	KindHoldRollback Kind = "hold_rollback"
	KindHoldExpire   Kind = "hold_expire"
	KindExchange     Kind = "exchange"
	KindRefund       Kind = "refund"
	KindExpire       Kind = "expire"
)

// Kinds lists every event kind.
var Kinds = []Kind{KindChange, KindHoldBegin, KindHoldCommit, KindHoldRollback, KindHoldExpire, KindExchange, KindRefund, KindExpire}

// Event is one committed change of a trx: a trx written (a change, an
// exchange, a refund, the record of expired lots, a hold's begin) or a
// hold finished (commit, rollback, expiry). Events of one player are
// ordered by (Version, Seq): every write of a player takes the next
// version, and a write that records expiries besides its own trx makes
// several events of one version, Seq telling their order.
type Event struct {
	// ID names the event for ever: namespace/player/trx id/status. A
	// relay that decodes the same WAL again makes the same id, which
	// JetStream's duplicate detection and webhook receivers key on.
	ID        string           `json:"id"`
	Kind      Kind             `json:"kind"`
	Namespace coffer.Namespace `json:"namespace"`
	PlayerID  coffer.PlayerID  `json:"player_id"`
	Version   int64            `json:"version"`
	Seq       int              `json:"seq"`
	Trx       EventTrx         `json:"trx"`
	// Ops are the ops this change wrote: a hold's begin its consumes, its
	// commit its grants, its rollback or expiry what it returned.
	Ops []coffer.Op `json:"ops"`
	// Balances are the player's, right after the ops, in each currency
	// they touch (none for a change without ops: a hold that reserved
	// nothing rolled back, a commit of a hold without grants).
	Balances []coffer.Balance `json:"balances,omitempty"`
	// At is the time of the write; CommittedAt that of the PostgreSQL
	// transaction that committed it.
	At          time.Time `json:"at"`
	CommittedAt time.Time `json:"committed_at"`
}

// EventTrx is the trx an event is about. Reason and Meta come with the
// events of a trx's insert; a hold's finish leaves them out (its begin's
// event has them), since the WAL of an update omits unchanged values
// stored out of line.
type EventTrx struct {
	ID             int64            `json:"id"`
	IdempotencyKey string           `json:"idempotency_key"`
	Emitter        coffer.Emitter   `json:"emitter"`
	Kind           coffer.TrxKind   `json:"kind"`
	Status         coffer.TrxStatus `json:"status"`
	Reason         string           `json:"reason,omitempty"`
	Meta           json.RawMessage  `json:"meta,omitempty"`
	CreatedAt      time.Time        `json:"created_at"`
	HoldExpiresAt  *time.Time       `json:"hold_expires_at,omitempty"`
	Refund         *coffer.Refund   `json:"refund,omitempty"`
	// FinishedBy is who committed or rolled back a hold, as the trx's
	// (coffer.Trx.FinishedBy): in a hold's finish only, and not in an
	// expiry.
	FinishedBy coffer.Emitter `json:"finished_by,omitempty"`
}

// EventID is the id of the event of a trx change: the trx (with its
// namespace and player) at the status the change left it in; a hold's
// begin is at StatusPending.
func EventID(ns coffer.Namespace, player coffer.PlayerID, trx int64, status coffer.TrxStatus) string {
	return fmt.Sprintf("%d/%d/%d/%s", ns, player, trx, status)
}

// Subject is the event's NATS subject under prefix: prefix.<ns>.<kind>.
func (e *Event) Subject(prefix string) string {
	return prefix + "." + strconv.Itoa(int(e.Namespace)) + "." + string(e.Kind)
}

// playerKey is a player in a namespace: the unit of the feed's order.
type playerKey struct {
	ns     coffer.Namespace
	player coffer.PlayerID
}

func (e *Event) player() playerKey { return playerKey{e.Namespace, e.PlayerID} }

// trxRow is a trx_N row as the WAL carries it, inserted or updated.
// Reason and Meta are nil when NULL or, in an update, left out as
// unchanged.
type trxRow struct {
	update         bool
	ns             coffer.Namespace
	player         coffer.PlayerID
	id             int64
	emitter        coffer.Emitter
	idempotencyKey string
	kind           coffer.TrxKind
	status         coffer.TrxStatus
	reason         *string
	meta           *string
	createdAt      time.Time
	holdExpiresAt  *time.Time
	finishedAt     *time.Time
	finishedBy     *int64
	version        int64
	beginVersion   *int64
	pos            int64
	refund         *coffer.RefundRow
}

// opRow is an op_N row as the WAL carries it (op rows are only inserted).
type opRow struct {
	coffer.BookOp
	trxID     int64
	seq       int32
	createdAt time.Time
	pos       int64
}

// txn is what one committed PostgreSQL transaction wrote to the shard
// tables of a database, in WAL order.
type txn struct {
	trx []trxRow
	ops []opRow
	// tables are the relations (pgoutput's ids) of the trx rows: which
	// shards the events are of, and which stay of each shard here.
	tables     []uint32
	commitTime time.Time
}

// step is one event in the making: the trx row, which of its changes
// (a hold inserted finished is its begin and its finish), its version and
// the time of its write.
type step struct {
	row     *trxRow
	begin   bool
	version int64
	at      time.Time
	// first orders the steps of one write: the position of the step's
	// trx (inserted) or of its first op (a finish); a finish without ops
	// comes last, as no expiry follows it.
	first int64
}

// opsKey finds the ops of a step: its trx and the time of its write.
type opsKey struct {
	trx int64
	at  int64
}

// events makes the events of a committed transaction, in the order a
// player's events are delivered: by player, version and then the order
// of the write. The ops of a step are those of its trx at the time of its
// write, so a hold begun and finished in one transaction splits in two.
func events(cat *coffer.Catalog, t *txn) ([]Event, error) {
	opsOf := map[opsKey][]opRow{}
	for _, o := range t.ops {
		k := opsKey{o.trxID, o.createdAt.UnixMicro()}
		opsOf[k] = append(opsOf[k], o)
	}
	var steps []step
	for i := range t.trx {
		r := &t.trx[i]
		switch {
		case r.kind == coffer.TrxHold && r.status != coffer.StatusPending && r.finishedAt == nil:
			return nil, fmt.Errorf("trx %d: a finished hold without finished_at", r.id)
		case r.kind == coffer.TrxHold && !r.update && r.finishedAt != nil:
			if r.beginVersion == nil {
				return nil, fmt.Errorf("trx %d: a finished hold without begin_version", r.id)
			}
			steps = append(steps, step{row: r, begin: true, version: *r.beginVersion, at: r.createdAt, first: r.pos},
				step{row: r, version: r.version, at: *r.finishedAt})
		case r.update:
			if r.finishedAt == nil {
				return nil, fmt.Errorf("trx %d: an update that finishes no hold", r.id)
			}
			steps = append(steps, step{row: r, version: r.version, at: *r.finishedAt})
		default:
			steps = append(steps, step{row: r, begin: r.status == coffer.StatusPending, version: r.version, at: r.createdAt, first: r.pos})
		}
	}
	used := 0
	for i := range steps {
		s := &steps[i]
		ops := opsOf[opsKey{s.row.id, s.at.UnixMicro()}]
		used += len(ops)
		if s.first == 0 {
			s.first = math.MaxInt64
			if len(ops) > 0 {
				s.first = ops[0].pos
			}
		}
	}
	if used != len(t.ops) {
		return nil, fmt.Errorf("%d of the transaction's %d ops belong to no trx change", len(t.ops)-used, len(t.ops))
	}
	sort.SliceStable(steps, func(i, j int) bool {
		a, b := steps[i], steps[j]
		if a.row.ns != b.row.ns {
			return a.row.ns < b.row.ns
		}
		if a.row.player != b.row.player {
			return a.row.player < b.row.player
		}
		if a.version != b.version {
			return a.version < b.version
		}
		return a.first < b.first
	})
	out := make([]Event, len(steps))
	for i, s := range steps {
		out[i] = event(cat, s, opsOf[opsKey{s.row.id, s.at.UnixMicro()}], t.commitTime)
		if i > 0 && out[i-1].player() == out[i].player() && out[i-1].Version == s.version {
			out[i].Seq = out[i-1].Seq + 1
		}
	}
	return out, nil
}

// event is the event of step s, whose ops are ops.
func event(cat *coffer.Catalog, s step, ops []opRow, committed time.Time) Event {
	r := s.row
	status := r.status
	if s.begin {
		status = coffer.StatusPending
	}
	book := make([]coffer.BookOp, len(ops))
	for i, o := range ops {
		book[i] = o.BookOp
	}
	e := Event{
		ID:        EventID(r.ns, r.player, r.id, status),
		Kind:      kindOf(r.kind, status),
		Namespace: r.ns, PlayerID: r.player, Version: s.version,
		Trx: EventTrx{ID: r.id, IdempotencyKey: r.idempotencyKey, Emitter: r.emitter, Kind: r.kind, Status: status,
			CreatedAt: r.createdAt.UTC(), HoldExpiresAt: r.holdExpiresAt, Refund: cat.Refund(r.refund)},
		Ops: cat.Ops(book), Balances: cat.BalancesAfter(book),
		At: s.at.UTC(), CommittedAt: committed.UTC(),
	}
	if !r.update {
		if r.reason != nil {
			e.Trx.Reason = *r.reason
		}
		if r.meta != nil {
			e.Trx.Meta = json.RawMessage(*r.meta)
		}
	}
	if r.finishedBy != nil {
		e.Trx.FinishedBy = coffer.Emitter(*r.finishedBy)
	}
	if e.Trx.HoldExpiresAt != nil {
		utc := e.Trx.HoldExpiresAt.UTC()
		e.Trx.HoldExpiresAt = &utc
	}
	return e
}

// kindOf is the event kind of a trx of kind k at status.
func kindOf(k coffer.TrxKind, status coffer.TrxStatus) Kind {
	if k != coffer.TrxHold {
		return Kind(k)
	}
	switch status {
	case coffer.StatusPending:
		return KindHoldBegin
	case coffer.StatusCommitted:
		return KindHoldCommit
	case coffer.StatusRolledBack:
		return KindHoldRollback
	default:
		return KindHoldExpire
	}
}
