package main

import "os"

// ownImage is the executable to start this process's children with
// (coffer serve, coffer feed, coffer shard move, in the bench and the
// fault suite): on Linux /proc/self/exe, which runs this process's own
// image even once the file at its path was replaced, so that a long run
// whose binary is rebuilt meanwhile keeps running one build throughout.
func ownImage() (string, error) {
	const self = "/proc/self/exe"
	if _, err := os.Stat(self); err == nil {
		return self, nil
	}
	return os.Executable()
}
