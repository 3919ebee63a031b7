package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"gopkg.in/yaml.v3"
)

// Config is coffer's configuration file. Its shard and env keys are those
// of an sdbmigrate config, so one file serves both tools.
type Config struct {
	shard.Config `yaml:",inline"`
	Env          migrate.Env      `yaml:"env,omitempty"`
	Pool         shard.PoolConfig `yaml:"pool"`
}

// loadConfig reads and validates a config file. Unknown keys are errors:
// a misspelt key silently ignored is a misconfigured money service.
func loadConfig(path string) (*Config, *shard.Map, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	cfg := &Config{Pool: shard.DefaultPoolConfig()}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("config %s: the file is empty", path)
		}
		return nil, nil, fmt.Errorf("config %s: %s", path, yamlMessage(err))
	}
	if err := cfg.Env.Validate(); err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	m, err := shard.NewMap(cfg.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, m, nil
}

var notFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlMessage rewords the YAML decoder's errors for people.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = notFound.ReplaceAllString(msg, "unknown key $1")
	return strings.ReplaceAll(msg, "\n  ", "; ")
}
