package postgres

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/cofferhq/coffer"
)

// columns gathers rows column by column, for a statement that unnests
// one array per column: the first row fixes each column's type. A column
// is a typed slice (col), appended to by a type assertion: appending by
// reflection cost 6–8 % of coffer serve's CPU on writes.
type columns struct {
	cols []column
}

func (c *columns) add(values ...any) {
	if c.cols == nil {
		c.cols = make([]column, len(values))
		for i, v := range values {
			c.cols[i] = newColumn(v)
		}
	}
	for i, v := range values {
		c.cols[i].append(v)
	}
}

// args are the columns as the statement's parameters: an array each.
func (c *columns) args() []any {
	out := make([]any, len(c.cols))
	for i, col := range c.cols {
		out[i] = col.values()
	}
	return out
}

// rows is how many rows the columns hold.
func (c *columns) rows() int {
	if len(c.cols) == 0 {
		return 0
	}
	return c.cols[0].len()
}

// row is the columns' first row as the parameters of a statement's
// one-row form (oneRow): a value each.
func (c *columns) row() []any {
	out := make([]any, len(c.cols))
	for i, col := range c.cols {
		out[i] = col.first()
	}
	return out
}

// column is one column's values, as a slice of its type.
type column interface {
	append(v any)
	values() any
	len() int
	first() any
}

type col[T any] []T

func (c *col[T]) append(v any) { *c = append(*c, v.(T)) }
func (c *col[T]) values() any  { return []T(*c) }
func (c *col[T]) len() int     { return len(*c) }
func (c *col[T]) first() any   { return (*c)[0] }

// unnested is a column's array unnested in a statement's select list,
// unnest($n::type[]), its parameter and type the first group.
var unnested = regexp.MustCompile(`unnest\((\$\d+::\w+)\[\]\)`)

// oneRow is a batch statement for one row: each column's array unnested
// in sql (unnest($n::type[]) AS name) a value instead ($n::type AS
// name). The rows' subquery then has no set-returning function, so
// PostgreSQL pulls it up into the statement: no ProjectSet and no
// subquery scan to set up per part, and no arrays to decode: a lone
// write, every write's batch at low load, costs PostgreSQL clearly less
// CPU so (docs/adr/0024-one-row-statements.md).
func oneRow(sql string) string { return unnested.ReplaceAllString(sql, "$1") }

// newColumn makes the column for values of v's type: the types the batch
// statements bind.
func newColumn(v any) column {
	switch v.(type) {
	case int32:
		return newCol[int32]()
	case int64:
		return newCol[int64]()
	case bool:
		return newCol[bool]()
	case string:
		return newCol[string]()
	case []byte:
		return newCol[[]byte]()
	case time.Time:
		return newCol[time.Time]()
	case *time.Time:
		return newCol[*time.Time]()
	case *int32:
		return newCol[*int32]()
	case *int64:
		return newCol[*int64]()
	case *string:
		return newCol[*string]()
	}
	panic(fmt.Sprintf("postgres: no column for %T", v))
}

func newCol[T any]() column {
	c := make(col[T], 0, 8)
	return &c
}

// perShard gathers the rows of one statement per shard.
type perShard map[coffer.ShardID]*columns

func (p perShard) add(id coffer.ShardID, values ...any) { p.of(id).add(values...) }

// of is shard id's rows, made empty at its first.
func (p perShard) of(id coffer.ShardID) *columns {
	c := p[id]
	if c == nil {
		c = &columns{}
		p[id] = c
	}
	return c
}

// shards are the shards with rows, in ascending order.
func (p perShard) shards() []coffer.ShardID {
	ids := make([]coffer.ShardID, 0, len(p))
	for id := range p {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
