package shard

// Jump returns the bucket in [0, buckets) that key falls into, by the jump
// consistent hash of Lamping & Veach ("A Fast, Minimal Memory, Consistent Hash
// Algorithm", 2014). The arithmetic is bit-for-bit that of the PyPI package
// jump-consistent-hash, which placed the players of existing deployments:
// a 64-bit linear congruential step and an IEEE double division. buckets must
// be in 1 … 2^31; Jump panics otherwise, since a wrong bucket would misplace
// money.
func Jump(key uint64, buckets int64) int64 {
	if buckets < 1 || buckets > 1<<31 {
		panic("shard: jump hash bucket count out of range")
	}
	b, j := int64(-1), int64(0)
	for j < buckets {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return b
}
