package shard

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestJumpVectors checks Jump against results of the PyPI package
// jump-consistent-hash (see the header of the vector file).
func TestJumpVectors(t *testing.T) {
	f, err := os.Open("testdata/jump_vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		fields := strings.Fields(line)
		key, _ := strconv.ParseUint(fields[0], 10, 64)
		buckets, _ := strconv.ParseInt(fields[1], 10, 64)
		want, _ := strconv.ParseInt(fields[2], 10, 64)
		if got := Jump(key, buckets); got != want {
			t.Errorf("Jump(%d, %d) = %d, want %d", key, buckets, got, want)
		}
		n++
	}
	if n < 900 {
		t.Fatalf("only %d vectors read", n)
	}
}

// TestJumpProperties checks the range and the consistency property: when the
// bucket count grows from n to n+1, a key either stays or moves to bucket n.
func TestJumpProperties(t *testing.T) {
	for key := uint64(0); key < 20000; key++ {
		k := key * 0x9E3779B97F4A7C15
		prev := Jump(k, 1)
		if prev != 0 {
			t.Fatalf("Jump(%d, 1) = %d", k, prev)
		}
		for n := int64(2); n <= 300; n++ {
			got := Jump(k, n)
			if got < 0 || got >= n {
				t.Fatalf("Jump(%d, %d) = %d out of range", k, n, got)
			}
			if got != prev && got != n-1 {
				t.Fatalf("Jump(%d, %d) moved from %d to %d", k, n, prev, got)
			}
			prev = got
		}
	}
}

func TestJumpBalance(t *testing.T) {
	const buckets, keys = 16, 160000
	var counts [buckets]int
	for k := uint64(1); k <= keys; k++ {
		counts[Jump(k, buckets)]++
	}
	for b, c := range counts {
		if c < keys/buckets*9/10 || c > keys/buckets*11/10 {
			t.Errorf("bucket %d holds %d of %d keys", b, c, keys)
		}
	}
}

func TestJumpPanicsOutOfRange(t *testing.T) {
	for _, n := range []int64{0, -1, 1<<31 + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Jump(1, %d) did not panic", n)
				}
			}()
			Jump(1, n)
		}()
	}
}
