package kafkaenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The KRaft quorum's leader is the cluster's active controller. A client
// cannot learn it from DescribeCluster or Metadata: a KRaft broker answers
// those with a random live broker as the "controller" (clients never talk
// to the controllers; KIP-590, KIP-919), and librdkafka has no
// DescribeQuorum (KIP-595's API 55, what kafka-metadata-quorum.sh describe
// --status sends, not in the jars kafkaenv fetches). So kafkaenv sends it
// itself: version 0, a flexible version (KIP-482: compact strings and
// arrays, tagged fields), to a node's controller listener, asking for
// partition 0 of __cluster_metadata.

const (
	apiDescribeQuorum = 55
	metadataTopic     = "__cluster_metadata"
)

// describeQuorumRequest is a DescribeQuorum v0 request with its request
// header v2 and its length prefix.
func describeQuorumRequest(correlation int32) []byte {
	var b bytes.Buffer
	w16 := func(v int16) { binary.Write(&b, binary.BigEndian, v) }
	w32 := func(v int32) { binary.Write(&b, binary.BigEndian, v) }
	uv := func(v uint64) { b.Write(binary.AppendUvarint(nil, v)) }
	w16(apiDescribeQuorum)
	w16(0) // version
	w32(correlation)
	w16(int16(len("kafkaenv")))
	b.WriteString("kafkaenv")
	uv(0)                              // header tagged fields
	uv(1 + 1)                          // topics: one
	uv(uint64(len(metadataTopic)) + 1) // compact string
	b.WriteString(metadataTopic)
	uv(1 + 1) // partitions: one
	w32(0)    // partition_index
	uv(0)     // partition tagged fields
	uv(0)     // topic tagged fields
	uv(0)     // body tagged fields
	out := binary.BigEndian.AppendUint32(nil, uint32(b.Len()))
	return append(out, b.Bytes()...)
}

// parseDescribeQuorumLeader reads a DescribeQuorum v0 response body (after
// the length prefix) down to the first partition's leader_id and
// leader_epoch. A non-zero error code, top-level or the partition's, is
// an error naming it (Kafka's error codes: 41 NOT_CONTROLLER, ...).
func parseDescribeQuorumLeader(body []byte, correlation int32) (leader, epoch int32, err error) {
	r := bytes.NewReader(body)
	var corr int32
	var code int16
	read := func(v any) {
		if err == nil {
			err = binary.Read(r, binary.BigEndian, v)
		}
	}
	uvarint := func() uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = binary.ReadUvarint(r)
		return v
	}
	skipTags := func() {
		for n := uvarint(); n > 0 && err == nil; n-- {
			uvarint() // tag
			size := uvarint()
			if err == nil {
				_, err = r.Seek(int64(size), io.SeekCurrent)
			}
		}
	}
	read(&corr)
	skipTags() // response header v1
	read(&code)
	if err == nil && corr != correlation {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum: correlation id %d, want %d", corr, correlation)
	}
	if err == nil && code != 0 {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum: error code %d", code)
	}
	if n := uvarint(); err == nil && n < 2 {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum: no topic in the answer")
	}
	if l := uvarint(); err == nil && l > 0 {
		_, err = r.Seek(int64(l-1), io.SeekCurrent) // topic_name
	}
	if n := uvarint(); err == nil && n < 2 {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum: no partition in the answer")
	}
	var part int32
	read(&part)
	read(&code)
	read(&leader)
	read(&epoch)
	if err != nil {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum: short answer: %w", err)
	}
	if code != 0 {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum: partition %d of %s: error code %d", part, metadataTopic, code)
	}
	return leader, epoch, nil
}

// describeQuorumLeader asks the node at addr (a controller listener) for
// the KRaft quorum's leader and epoch, within ctx and 5 s. A leader of -1
// means the quorum has none now (an election is under way).
func describeQuorumLeader(ctx context.Context, addr string) (leader, epoch int32, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum to %s: %w", addr, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	const correlation = 1
	if _, err := conn.Write(describeQuorumRequest(correlation)); err != nil {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum to %s: %w", addr, err)
	}
	br := bufio.NewReader(conn)
	var size int32
	if err := binary.Read(br, binary.BigEndian, &size); err != nil {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum to %s: no answer: %w", addr, err)
	}
	if size < 0 || size > 1<<20 {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum to %s: answer of %d bytes", addr, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, 0, fmt.Errorf("kafkaenv: DescribeQuorum to %s: %w", addr, err)
	}
	leader, epoch, err = parseDescribeQuorumLeader(body, correlation)
	if err != nil {
		return 0, 0, fmt.Errorf("%w (from %s)", err, addr)
	}
	return leader, epoch, nil
}

// errNoController: no live node named a quorum leader.
var errNoController = errors.New("kafkaenv: no node named the KRaft quorum's leader")
