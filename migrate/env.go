package migrate

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Env holds the config's `env` variables: <key> in a migration is replaced
// by the value. Env is frozen in _sdbmigrate_env at the first apply; a later
// config with other values is refused unless --force-update-env.
type Env map[string]EnvVar

// EnvVar is one variable. Type is int, str (the default) or float, as in
// sdbmigrate.
type EnvVar struct {
	Type  string `yaml:"type"`
	Value any    `yaml:"value"`
}

// typeName is the stored type, defaulting to str.
func (v EnvVar) typeName() string {
	if v.Type == "" {
		return "str"
	}
	return v.Type
}

// Text is the value as sdbmigrate stores and substitutes it: Python's str()
// of the YAML value.
func (v EnvVar) Text() string {
	switch x := v.Value.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int:
		return strconv.Itoa(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			return strconv.FormatFloat(x, 'f', 1, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	default:
		return fmt.Sprint(x)
	}
}

// Validate checks types and values; errors name the key.
func (e Env) Validate() error {
	for _, k := range e.Keys() {
		v := e[k]
		switch v.typeName() {
		case "str":
		case "int":
			if _, err := strconv.ParseInt(v.Text(), 10, 64); err != nil {
				return fmt.Errorf("env.%s: value %q is not an int", k, v.Text())
			}
		case "float":
			if _, err := strconv.ParseFloat(v.Text(), 64); err != nil {
				return fmt.Errorf("env.%s: value %q is not a float", k, v.Text())
			}
		default:
			return fmt.Errorf("env.%s.type: must be int, str or float, got %q", k, v.Type)
		}
		if strings.ContainsAny(k, "<>") || k == "" {
			return fmt.Errorf("env: key %q cannot be used as <key> in SQL", k)
		}
		if k == "shard_id" || k == "db_schema" {
			return fmt.Errorf("env: key %q is reserved: <%s> is replaced by the migration engine itself; rename the key", k, k)
		}
	}
	return nil
}

// Keys lists the keys, sorted.
func (e Env) Keys() []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// equalStored tells whether a value stored as text with a type equals v,
// comparing as the type does (2 and "2" for an int).
func (v EnvVar) equalStored(text, typ string) bool {
	if typ != v.typeName() {
		return false
	}
	switch typ {
	case "int":
		a, err1 := strconv.ParseInt(text, 10, 64)
		b, err2 := strconv.ParseInt(v.Text(), 10, 64)
		return err1 == nil && err2 == nil && a == b
	case "float":
		a, err1 := strconv.ParseFloat(text, 64)
		b, err2 := strconv.ParseFloat(v.Text(), 64)
		return err1 == nil && err2 == nil && a == b
	default:
		return text == v.Text()
	}
}

// Substitute replaces every <key> of env in sql.
func (e Env) Substitute(sql string) string {
	for _, k := range e.Keys() {
		sql = strings.ReplaceAll(sql, "<"+k+">", e[k].Text())
	}
	return sql
}

// With returns env with defaults added for the keys it lacks.
func (e Env) With(defaults Env) Env {
	out := Env{}
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range e {
		out[k] = v
	}
	return out
}
