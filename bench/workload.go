// Package bench is coffer's benchmark: workload generators with the
// distributions of production-like pgbench scripts, closed- and open-loop
// runners, HDR latency histograms, and the reports (terminal table, JSON,
// Markdown with PNG charts). It drives a Target: coffer over HTTP or gRPC,
// or the raw-SQL baseline.
package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Workload names what a run does.
type Workload string

// The workloads.
const (
	// Write grants 1–10000 of a currency to a random player.
	Write Workload = "write"
	// Spend alternates grants and consumes: each consume takes 1–5000
	// from the player and currency of the grant before it, and fails for
	// lack of funds when they hold less (about a quarter of them on
	// players the run has not met before).
	Spend Workload = "spend"
	// Read reads a random player's balances.
	Read Workload = "read"
	// Mix is 80 % Write, 20 % Read.
	Mix Workload = "mix"
	// Hold begins a hold that grants, then commits it (1 in 10 is rolled
	// back instead): one operation, two calls.
	Hold Workload = "hold"
	// Exchange alternates grants and exchanges of a tenth of as much,
	// from the player and currency of the grant before, into the next
	// currency.
	Exchange Workload = "exchange"
	// Batch sends grants drawn as Write's, BatchSize of them in one
	// call of the batch API, all in the call's namespace. Its ops are the
	// grants, not the calls.
	Batch Workload = "batch"
)

// Workloads lists them in the order of the docs.
var Workloads = []Workload{Write, Spend, Read, Mix, Hold, Exchange, Batch}

// BatchSizeMax is the most grants a Batch call may carry: the API's bound.
const BatchSizeMax = 1000

// Bench deployment shape: the namespaces and currencies of the bench
// config, and the players per unit of scale.
const (
	Namespaces      = 10
	Currencies      = 50
	PlayersPerScale = 100_000
	// zipfS is the skew of namespaces and currencies (s≈1.1).
	zipfS = 1.1
)

// CurrencyCode is the code of bench currency i (1-based).
func CurrencyCode(i int) string { return "c" + strconv.Itoa(i) }

// Call is one request a Target performs.
type Call int

// The calls.
const (
	CallGrant Call = iota
	CallConsume
	CallRead
	CallHold // begin a hold, then commit or roll back
	CallExchange
	CallBatch // Batch's grants in one call
)

func (c Call) String() string {
	return [...]string{"grant", "consume", "read", "hold", "exchange", "batch"}[c]
}

// Op is one operation of a workload.
type Op struct {
	Call      Call
	Namespace int32
	Player    int64
	// Currency is 1-based; an exchange goes from Currency to Currency+1
	// (50 wraps to 1).
	Currency int
	Amount   int64
	// Key is a fresh idempotency key.
	Key string
	// Rollback ends a hold with a rollback instead of a commit.
	Rollback bool
	// Batch are the grants of a CallBatch, each in Namespace.
	Batch []Op
	// Acked is set by the Target of a CallBatch: how many of its grants
	// were applied.
	Acked int
}

// size is how many of a run's ops op counts for: a batch's grants, or 1.
func (op *Op) size() int {
	if op.Call == CallBatch {
		return len(op.Batch)
	}
	return 1
}

// Generator makes the ops of one client. It is not safe for concurrent
// use: each client has its own, seeded from the run's seed and its index.
type Generator struct {
	workload Workload
	players  int64
	rng      *rand.Rand
	ns, cur  *rand.Zipf
	// keyPrefix makes the keys unique: to the bench run, this seed (each
	// round has its own) and this client.
	keyPrefix string
	n         uint64
	flip      bool
	// granted is the last grant of a Spend or Exchange client: the next
	// op spends from its player and currency.
	granted   Op
	batchSize int
}

// NewGenerator returns the generator of client number client. Its
// idempotency keys start with keys (see RunConfig.Keys). batchSize is the
// grants of a Batch op.
func NewGenerator(w Workload, scale float64, seed uint64, client int, keys string, batchSize int) (*Generator, error) {
	known := false
	for _, k := range Workloads {
		known = known || k == w
	}
	if !known {
		return nil, fmt.Errorf("unknown workload %q (want one of %v)", w, Workloads)
	}
	if w == Batch && (batchSize < 1 || batchSize > BatchSizeMax) {
		return nil, fmt.Errorf("batch size %d: must be 1–%d", batchSize, BatchSizeMax)
	}
	players := int64(PlayersPerScale * scale)
	if players < 1 {
		return nil, fmt.Errorf("scale %g leaves no players", scale)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(client)))
	return &Generator{
		workload: w, players: players, rng: rng,
		keyPrefix: "b" + keys + "-" + strconv.FormatUint(seed, 36) + "-" + strconv.Itoa(client) + "-",
		ns:        rand.NewZipf(rng, zipfS, 1, Namespaces-1),
		cur:       rand.NewZipf(rng, zipfS, 1, Currencies-1),
		batchSize: batchSize,
	}, nil
}

// draw is a grant with a fresh key.
func (g *Generator) draw() Op {
	g.n++
	return Op{
		Namespace: int32(g.ns.Uint64() + 1),
		Player:    g.rng.Int64N(g.players) + 1,
		Currency:  int(g.cur.Uint64() + 1),
		Amount:    g.rng.Int64N(10000) + 1,
		Key:       g.keyPrefix + strconv.FormatUint(g.n, 36),
	}
}

// Next is the next op.
func (g *Generator) Next() Op {
	op := g.draw()
	g.flip = !g.flip
	switch g.workload {
	case Batch:
		op = Op{Call: CallBatch, Namespace: op.Namespace, Batch: make([]Op, g.batchSize)}
		for i := range op.Batch {
			grant := g.draw()
			grant.Call, grant.Namespace = CallGrant, op.Namespace
			op.Batch[i] = grant
		}
	case Write:
		op.Call = CallGrant
	case Read:
		op.Call = CallRead
	case Mix:
		op.Call = CallGrant
		if g.rng.IntN(5) == 0 {
			op.Call = CallRead
		}
	case Spend:
		op.Call = CallGrant
		if !g.flip {
			op.Call, op.Amount = CallConsume, (op.Amount+1)/2
		}
	case Hold:
		op.Call, op.Rollback = CallHold, g.rng.IntN(10) == 0
	case Exchange:
		op.Call = CallGrant
		if !g.flip {
			op.Call, op.Amount = CallExchange, op.Amount/10+1
		}
	}
	switch op.Call {
	case CallGrant:
		g.granted = op
	case CallConsume, CallExchange:
		op.Namespace, op.Player, op.Currency = g.granted.Namespace, g.granted.Player, g.granted.Currency
	}
	return op
}
