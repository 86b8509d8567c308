// Package javapartition is the partitioner of Apache Kafka's Java client
// (murmur2), for records this runner writes to topics that Java clients
// share (a kafkaio.Write, a Kafka sink stage).
//
// It imports only the standard library, no Kafka client, so that pure
// packages (the commit step) may use it; it lives under stage/kafkaclient,
// the runner's one Kafka package, as the Kafka-specific rule it is.
package javapartition

import "encoding/binary"

// ForKey is the partition that Apache Kafka's Java client gives a
// record with serialized key key on a topic of partitions partitions, so that
// a record keyed here lands where a Java producer, or Kafka Streams'
// default partitioner, would put the same key bytes:
//
//	ForKey(key, n) = toPositive(murmur2(key)) % n
//	toPositive(x)         = x & 0x7fffffff
//
// This is BuiltInPartitioner.partitionForKey in kafka-clients
// (org.apache.kafka.clients.producer.internals, Kafka 3.3 and later; the
// DefaultPartitioner before it computed the same), with Utils.murmur2 and
// Utils.toPositive from org.apache.kafka.common.utils. The result is in
// [0, partitions). TestJavaPartitionVectors checks it against vectors
// printed by the real Java client (stage/kafkaclient/javapartition/testdata/).
//
// key must be the bytes the Java side hashes: the serialized key (for a
// Java StringSerializer, the UTF-8 bytes of the string). A nil key is
// hashed as the empty key; the Java client instead never calls
// partitionForKey for a null key (it uses its sticky partitioner), so
// there is no Java partition to match for it.
//
// This is not the partition of a Beam keyed topic of the runner
// (step.KeyPartition, FNV-1a): it is for topics that Java clients share.
//
// partitions must be positive (a Kafka topic has at least one partition);
// ForKey panics otherwise, as the Java client divides by zero.
func ForKey(key []byte, partitions int32) int32 {
	if partitions <= 0 {
		panic("javapartition: ForKey: partitions must be positive")
	}
	return (murmur2(key) & 0x7fffffff) % partitions
}

// murmur2 is the 32-bit MurmurHash2 of data as Apache Kafka's
// Utils.murmur2 computes it: seed 0x9747b28c, multiplier m = 0x5bd1e995,
// shift r = 24, little-endian 4-byte blocks, and Java's int arithmetic
// (wrapping 32-bit multiplication, >>> as an unsigned shift). Written from
// Austin Appleby's definition of MurmurHash2:
//
//	h = seed ^ len(data)
//	for each block k:  k *= m; k ^= k >> r; k *= m; h *= m; h ^= k
//	tail t (1-3 bytes, little-endian):  h ^= t; h *= m
//	h ^= h >> 13; h *= m; h ^= h >> 15
//
// Java's int length is the byte count modulo 2^32; Kafka keys are far
// shorter than 2 GiB, where the two agree.
func murmur2(data []byte) int32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(data))
	blocks := len(data) &^ 3
	for i := 0; i < blocks; i += 4 {
		k := binary.LittleEndian.Uint32(data[i:])
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	if tail := data[blocks:]; len(tail) > 0 {
		var t uint32
		for i, b := range tail {
			t |= uint32(b) << (8 * i)
		}
		h ^= t
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}
