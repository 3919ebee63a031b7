package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The modes of this test binary that TestChildrenRunTheirParentsBuild
// runs (TestMain dispatches them).
const (
	ownImageReplace = "own-image-replace"
	ownImageChild   = "own-image-child"
)

// TestChildrenRunTheirParentsBuild: a child started from ownImage runs
// its parent's build even once the file at the parent's path was
// replaced, as a rebuild during a long fault run replaces bin/coffer.
func TestChildrenRunTheirParentsBuild(t *testing.T) {
	exe, err := os.Executable()
	must(t, err)
	raw, err := os.ReadFile(exe)
	must(t, err)
	parent := filepath.Join(t.TempDir(), "coffer")
	must(t, os.WriteFile(parent, raw, 0o755))
	out, err := exec.Command(parent, ownImageReplace).CombinedOutput()
	if err != nil || string(out) != "the parent's build\n" {
		t.Fatalf("the child answered %q (%v), want the parent's build", out, err)
	}
}

// replaceOwnFile is the parent of TestChildrenRunTheirParentsBuild: it
// replaces the file at its own path with another program, then starts a
// child from ownImage and prints what the child said.
func replaceOwnFile() int {
	out, err := func() ([]byte, error) {
		path, err := os.Executable()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path+".new", []byte("#!/bin/sh\necho another build\n"), 0o755); err != nil {
			return nil, err
		}
		if err := os.Rename(path+".new", path); err != nil {
			return nil, err
		}
		exe, err := ownImage()
		if err != nil {
			return nil, err
		}
		return exec.Command(exe, ownImageChild).Output()
	}()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Print(string(out))
	return 0
}
