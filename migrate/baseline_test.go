package migrate

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// preBaseline is the chain of migrations that built coffer's schema
// before 1.0, kept only to hold the baseline to it.
func preBaseline(t *testing.T) []Migration {
	t.Helper()
	ms, err := Load(os.DirFS("testdata/prebaseline"), "testdata/prebaseline")
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// baselineLeavesOut are the objects of the old chain that the baseline
// leaves out, each with why: what served only data no release wrote.
var baselineLeavesOut = map[*regexp.Regexp]string{
	regexp.MustCompile(`^column trx_[0-9]+\.meta_jsonb$`): "meta stored as jsonb before it was canonical text",
}

// TestBaselineIsTheOldChain: a database migrated by the 1.0 baseline and
// one migrated by the chain it replaced have the same schema — types,
// tables and their options, columns (position, type, nullability,
// default, collation), indexes, constraints, sequences and functions —
// but for what served only pre-1.0 data (baselineLeavesOut). Migrations
// after the baseline are not the old chain's business.
func TestBaselineIsTheOldChain(t *testing.T) {
	schema, err := Load(Schema(), "embedded")
	if err != nil {
		t.Fatal(err)
	}
	var baseline []Migration
	for _, m := range schema {
		if strings.HasSuffix(m.Name, "__baseline.sql") {
			baseline = append(baseline, m)
		}
	}
	if len(baseline) != 2 {
		t.Fatalf("%d baseline files, want V0001 and V0002", len(baseline))
	}
	old := catalogOf(t, migratedDB(t, 0, preBaseline(t)))
	base := catalogOf(t, migratedDB(t, 1, baseline))
	for object, why := range leftOut(old) {
		if _, ok := base[object]; ok {
			t.Errorf("%s is in the baseline, which leaves it out (%s)", object, why)
		}
		delete(old, object)
	}
	if len(old) < 100 {
		t.Fatalf("the old chain's catalog has %d objects: the query missed them", len(old))
	}
	var diffs []string
	for object, def := range old {
		if def != base[object] {
			diffs = append(diffs, fmt.Sprintf("%s\n    old chain: %s\n    baseline:  %s", object, def, base[object]))
		}
	}
	for object, def := range base {
		if _, ok := old[object]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s\n    old chain: (none)\n    baseline:  %s", object, def))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("the baseline differs from the old chain in %d objects:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
}

// TestPreBaselineDatabaseIsRefused: a database that ran the chain before
// the baseline (a developer's coffer dev stack) is refused, before any
// change, by apply, status and a server's check, saying what it holds.
func TestPreBaselineDatabaseIsRefused(t *testing.T) {
	db := migratedDB(t, 0, preBaseline(t))
	m, err := shard.NewMap(oneDBConfig(db))
	if err != nil {
		t.Fatal(err)
	}
	e, err := SchemaEngine(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	const want = "this database holds a pre-1.0 schema of coffer"
	err = e.Apply(context.Background(), all)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("apply: %v", err)
	}
	statuses, err := e.Status(context.Background())
	if err != nil || len(statuses) != 1 || !strings.Contains(statuses[0].Problem, want) {
		t.Fatalf("status: %+v %v", statuses, err)
	}
	if err := e.Verify(context.Background(), m.Databases()[0]); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("verify: %v", err)
	}
	var n int
	if err := db.Conn(t).QueryRow(context.Background(), "SELECT count(*) FROM _sdbmigrate_migrations").Scan(&n); err != nil || n != 23 {
		t.Fatalf("%d migrations recorded (%v), want the old chain's 23", n, err)
	}
}

// oneDBConfig places two shards on db.
func oneDBConfig(db pgtest.DB) shard.Config {
	return shard.Config{ShardCount: 2, DistributionMode: "auto", ShardOnDB: 2, Databases: []shard.DatabaseConfig{{
		Name: db.Name, Host: "127.0.0.1", Port: db.Server.Port(), Type: "postgres", User: pgserver.Superuser, Password: pgserver.Password}}}
}

// migratedDB is a new database on server i holding two shards, migrated
// by ms with coffer's schema env.
func migratedDB(t *testing.T, i int, ms []Migration) pgtest.DB {
	t.Helper()
	db := pgtest.NewDB(t, i)
	m, err := shard.NewMap(oneDBConfig(db))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&Engine{Map: m, Env: SchemaEnv, Migrations: ms}).Apply(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	return db
}

// leftOut are the objects of catalog that the baseline leaves out, with
// why.
func leftOut(catalog map[string]string) map[string]string {
	out := map[string]string{}
	for object := range catalog {
		for re, why := range baselineLeavesOut {
			if re.MatchString(object) {
				out[object] = why
			}
		}
	}
	return out
}

// catalogQueries describe a database's schema as (object, definition)
// rows; columns come in their tables' order, and are numbered by
// catalogOf, once what the baseline leaves out is set aside.
var catalogQueries = []string{
	`SELECT 'type ' || t.typname, 'enum ' || string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
	FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace JOIN pg_enum e ON e.enumtypid = t.oid
	WHERE n.nspname = 'public' GROUP BY t.typname`,
	`SELECT 'relation ' || c.relname, concat_ws(' ', 'kind', c.relkind::text, 'persistence', c.relpersistence::text,
		'access method', COALESCE(am.amname, '-'), 'options', COALESCE(array_to_string(c.reloptions, ','), '-'))
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_am am ON am.oid = c.relam
	WHERE n.nspname = 'public'`,
	`SELECT 'index ' || c.relname, pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid THEN '' ELSE ' INVALID' END
	FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'public'`,
	`SELECT 'constraint ' || r.relname || '.' || k.conname, k.contype::text || ' ' || pg_get_constraintdef(k.oid)
	FROM pg_constraint k JOIN pg_class r ON r.oid = k.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace
	WHERE n.nspname = 'public'`,
	`SELECT 'sequence ' || sequencename, concat_ws(' ', data_type, 'start', start_value, 'min', min_value, 'max', max_value,
		'increment', increment_by, 'cycle', cycle, 'cache', cache_size)
	FROM pg_sequences WHERE schemaname = 'public'`,
	`SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', pg_get_functiondef(p.oid)
	FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'`,
	`SELECT 'column ' || c.relname || '.' || a.attname, concat_ws(' ', format_type(a.atttypid, a.atttypmod),
		CASE WHEN a.attnotnull THEN 'NOT NULL' END, 'DEFAULT ' || pg_get_expr(d.adbin, d.adrelid),
		'COLLATE ' || co.collname, 'storage', a.attstorage::text, NULLIF(a.attidentity::text, ''), NULLIF(a.attgenerated::text, ''))
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
	WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
	ORDER BY c.relname, a.attnum`,
}

// catalogOf is db's schema: each object's definition by its name, a
// column's led by its position in its table.
func catalogOf(t *testing.T, db pgtest.DB) map[string]string {
	t.Helper()
	conn := db.Conn(t)
	catalog := map[string]string{}
	position := map[string]int{} // a table's columns so far
	for _, q := range catalogQueries {
		rows, err := conn.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var object, def string
		if _, err := pgx.ForEachRow(rows, []any{&object, &def}, func() error {
			if table, ok := strings.CutPrefix(object, "column "); ok && len(leftOut(map[string]string{object: ""})) == 0 {
				table, _, _ = strings.Cut(table, ".")
				position[table]++
				def = fmt.Sprintf("#%d %s", position[table], def)
			}
			catalog[object] = def
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return catalog
}
