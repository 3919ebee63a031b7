package feed

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
)

// decoder turns pgoutput's messages into committed transactions of the
// shard tables. It keeps the relations pgoutput described and the
// transaction being received. A decoder is used by one goroutine.
type decoder struct {
	relations map[uint32]*relation
	types     *pgtype.Map
	// cur is the transaction being received; skip tells it carries a
	// replication origin: rows a subscription applied (a shard move's
	// copy), which were events where they were first written.
	cur  *txn
	skip bool
}

func newDecoder() *decoder {
	return &decoder{relations: map[uint32]*relation{}, types: pgtype.NewMap()}
}

// relation is a table pgoutput described: which shard table it is, of
// which shard, and where its columns are.
type relation struct {
	table   string // "trx" or "op"; "" for a table the feed ignores
	shard   coffer.ShardID
	columns map[string]int
}

var shardTable = regexp.MustCompile(`^(trx|op)_([0-9]+)$`)

// decoded is what a message completed: a committed transaction (nil
// otherwise), with the WAL position of its commit and the end of its
// WAL, the position the slot may confirm once its events are delivered.
type decoded struct {
	txn         *txn
	commit, end pglogrepl.LSN
}

// message takes one pgoutput message. It returns the transaction a commit
// completes; one that carried an origin, or wrote no trx, completes as
// an empty transaction, so that its end may still be confirmed.
func (d *decoder) message(m pglogrepl.Message) (decoded, error) {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		r := &relation{columns: map[string]int{}}
		if match := shardTable.FindStringSubmatch(m.RelationName); match != nil {
			id, err := strconv.ParseInt(match[2], 10, 32)
			if err != nil {
				return decoded{}, fmt.Errorf("table %s: %w", m.RelationName, err)
			}
			r.table, r.shard = match[1], coffer.ShardID(id)
		}
		for i, c := range m.Columns {
			r.columns[c.Name] = i
		}
		d.relations[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		d.cur, d.skip = &txn{commitTime: m.CommitTime}, false
	case *pglogrepl.OriginMessage:
		d.skip = true
	case *pglogrepl.InsertMessage:
		return decoded{}, d.row(m.RelationID, m.Tuple, false)
	case *pglogrepl.UpdateMessage:
		return decoded{}, d.row(m.RelationID, m.NewTuple, true)
	case *pglogrepl.CommitMessage:
		t := d.cur
		if t == nil {
			return decoded{}, fmt.Errorf("a commit at %s without its begin", m.CommitLSN)
		}
		if d.skip {
			t = &txn{commitTime: t.commitTime}
		}
		d.cur = nil
		return decoded{txn: t, commit: m.CommitLSN, end: m.TransactionEndLSN}, nil
	}
	return decoded{}, nil
}

// row takes an inserted or updated row of relation id.
func (d *decoder) row(id uint32, tuple *pglogrepl.TupleData, update bool) error {
	r, ok := d.relations[id]
	if !ok {
		return fmt.Errorf("a row of relation %d, which pgoutput did not describe", id)
	}
	if d.cur == nil {
		return fmt.Errorf("a row outside a transaction")
	}
	if d.skip || r.table == "" {
		return nil
	}
	t := tupleReader{rel: r, tuple: tuple, types: d.types}
	if r.table == "trx" {
		row := t.trx()
		row.update = update
		if t.err != nil {
			return fmt.Errorf("trx row: %w", t.err)
		}
		d.cur.trx = append(d.cur.trx, row)
		if !slices.Contains(d.cur.tables, id) {
			d.cur.tables = append(d.cur.tables, id)
		}
		return nil
	}
	if update {
		return fmt.Errorf("an op row updated: ops are only inserted")
	}
	op := t.op()
	if t.err != nil {
		return fmt.Errorf("op row: %w", t.err)
	}
	d.cur.ops = append(d.cur.ops, op)
	return nil
}

// tupleReader reads columns of a row by name, in pgoutput's text format;
// the first error sticks in err.
type tupleReader struct {
	rel   *relation
	tuple *pglogrepl.TupleData
	types *pgtype.Map
	err   error
}

// text is column name's text, nil when NULL or left out as unchanged.
func (t *tupleReader) text(name string) *string {
	i, ok := t.rel.columns[name]
	if !ok || i >= len(t.tuple.Columns) {
		t.fail(fmt.Errorf("no column %s", name))
		return nil
	}
	c := t.tuple.Columns[i]
	if c.DataType != pglogrepl.TupleDataTypeText {
		return nil
	}
	s := string(c.Data)
	return &s
}

func (t *tupleReader) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

func (t *tupleReader) str(name string) string {
	s := t.text(name)
	if s == nil {
		t.fail(fmt.Errorf("%s is NULL", name))
		return ""
	}
	return *s
}

func (t *tupleReader) int(name string) int64 {
	n, err := strconv.ParseInt(t.str(name), 10, 64)
	if err != nil {
		t.fail(fmt.Errorf("%s: %w", name, err))
	}
	return n
}

func (t *tupleReader) intOrNil(name string) *int64 {
	if t.text(name) == nil {
		return nil
	}
	n := t.int(name)
	return &n
}

// intIfAny is intOrNil of a column a table may lack: one a later
// migration added (a database not migrated yet).
func (t *tupleReader) intIfAny(name string) *int64 {
	if _, ok := t.rel.columns[name]; !ok {
		return nil
	}
	return t.intOrNil(name)
}

func (t *tupleReader) bool(name string) bool { return t.str(name) == "t" }

func (t *tupleReader) time(name string) time.Time {
	var at time.Time
	if err := t.types.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, []byte(t.str(name)), &at); err != nil {
		t.fail(fmt.Errorf("%s: %w", name, err))
	}
	return at
}

func (t *tupleReader) timeOrNil(name string) *time.Time {
	if t.text(name) == nil {
		return nil
	}
	at := t.time(name)
	return &at
}

// json decodes column name into v; a NULL leaves v as it is.
func (t *tupleReader) json(name string, v any) bool {
	s := t.text(name)
	if s == nil {
		return false
	}
	if err := json.Unmarshal([]byte(*s), v); err != nil {
		t.fail(fmt.Errorf("%s: %w", name, err))
	}
	return true
}

func (t *tupleReader) trx() trxRow {
	r := trxRow{
		ns: coffer.Namespace(t.int("ns")), player: coffer.PlayerID(t.int("player_id")), id: t.int("trx_id"),
		emitter: coffer.Emitter(t.int("emitter")), idempotencyKey: t.str("idempotency_key"),
		kind: coffer.TrxKind(t.str("kind")), status: coffer.TrxStatus(t.str("status")),
		reason: t.text("reason"), meta: t.text("meta"), createdAt: t.time("created_at"),
		holdExpiresAt: t.timeOrNil("hold_expires_at"), finishedAt: t.timeOrNil("finished_at"), finishedBy: t.intIfAny("finished_by"),
		version: t.int("version"), beginVersion: t.intOrNil("begin_version"), pos: t.int("pos"),
	}
	var refund coffer.RefundRow
	if t.json("refund", &refund) {
		r.refund = &refund
	}
	return r
}

func (t *tupleReader) op() opRow {
	o := opRow{trxID: t.int("trx_id"), seq: int32(t.int("seq")), createdAt: t.time("created_at"), pos: t.int("pos")}
	o.Currency = coffer.CurrencyID(t.int("currency"))
	o.LotID = t.int("lot_id")
	o.Kind = coffer.OpKind(t.str("kind"))
	o.Cause = coffer.OpCause(t.str("cause"))
	o.Amount = coffer.Amount(t.int("amount"))
	o.Paid = t.bool("paid")
	o.BalanceAfter = coffer.Amount(t.int("balance_after"))
	o.PaidAfter = coffer.Amount(t.int("paid_after"))
	var p coffer.Purchase
	if t.json("purchase", &p) {
		o.Purchase = &p
	}
	if fiat := t.text("fiat"); fiat != nil {
		o.Fiat = *fiat
		o.Value = coffer.Amount(t.int("value"))
	}
	return o
}
