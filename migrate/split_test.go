package migrate

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		name string
		sql  string
		want []string
	}{
		{"plain", "CREATE TABLE a (x int);\nCREATE TABLE b (y int);", []string{"CREATE TABLE a (x int)", "CREATE TABLE b (y int)"}},
		{"no trailing semicolon", "SELECT 1", []string{"SELECT 1"}},
		{"semicolon in string", "INSERT INTO t VALUES ('a;b', 'it''s;');SELECT 2;", []string{"INSERT INTO t VALUES ('a;b', 'it''s;')", "SELECT 2"}},
		{"escape string", `SELECT E'\';';SELECT 3`, []string{`SELECT E'\';'`, "SELECT 3"}},
		{"backslash in plain string", `SELECT 'a\';SELECT 4`, []string{`SELECT 'a\'`, "SELECT 4"}},
		{"identifier", `CREATE TABLE "we;ird" (x int); SELECT 5`, []string{`CREATE TABLE "we;ird" (x int)`, "SELECT 5"}},
		{"line comment", "SELECT 1; -- a; b\nSELECT 2;", []string{"SELECT 1", "-- a; b\nSELECT 2"}},
		{"block comment nested", "SELECT /* a; /* b; */ c; */ 1; SELECT 2", []string{"SELECT /* a; /* b; */ c; */ 1", "SELECT 2"}},
		{"comment only dropped", "SELECT 1;\n-- the end;\n/* really; */\n", []string{"SELECT 1"}},
		{"dollar body", "CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END; $$ LANGUAGE plpgsql;\nSELECT f();",
			[]string{"CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END; $$ LANGUAGE plpgsql", "SELECT f()"}},
		{"tagged dollar with inner $$", "DO $body$ BEGIN PERFORM $$;$$; END $body$; SELECT 6",
			[]string{"DO $body$ BEGIN PERFORM $$;$$; END $body$", "SELECT 6"}},
		{"parameter is not a quote", "PREPARE p AS SELECT $1; EXECUTE p(1)", []string{"PREPARE p AS SELECT $1", "EXECUTE p(1)"}},
		{"identifier with dollar", "SELECT a$b; SELECT 7", []string{"SELECT a$b", "SELECT 7"}},
		{"empty", " \n ;; ", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, s := range Split(c.sql) {
				got = append(got, s.SQL)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Split(%q)\n got %q\nwant %q", c.sql, got, c.want)
			}
		})
	}
}

func TestSplitLines(t *testing.T) {
	got := Split("SELECT 1;\n\n-- c\nSELECT\n'a\nb';\n  SELECT 3;")
	lines := []int{got[0].Line, got[1].Line, got[2].Line}
	if !reflect.DeepEqual(lines, []int{1, 3, 7}) {
		t.Fatalf("lines = %v, want [1 3 7]", lines)
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"SELECT 1; SELECT 2", "$$;$$;", "'a;'", "/* ; */", "E'\\';'", "$a$ $b$ ; $a$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		total := 0
		for _, s := range Split(sql) {
			if s.SQL == "" || s.Line < 1 {
				t.Fatalf("bad statement %+v", s)
			}
			total += len(s.SQL)
		}
		if total > len(sql) {
			t.Fatalf("statements longer than input")
		}
	})
}
