package kafkaenv

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// The DescribeQuorum v0 request as the protocol lays it out (KIP-482's
// flexible versions: request header v2 with a classic client id, then
// compact arrays and strings and an empty tagged-field section after each
// struct).
func TestDescribeQuorumRequestBytes(t *testing.T) {
	got := describeQuorumRequest(7)
	var want bytes.Buffer
	want.Write([]byte{0, 55, 0, 0, 0, 0, 0, 7}) // api key, version, correlation id
	want.Write([]byte{0, 8})
	want.WriteString("kafkaenv")
	want.WriteByte(0)                            // header tags
	want.WriteByte(2)                            // one topic
	want.WriteByte(byte(len(metadataTopic) + 1)) // compact string
	want.WriteString(metadataTopic)
	want.WriteByte(2)              // one partition
	want.Write([]byte{0, 0, 0, 0}) // partition 0
	want.Write([]byte{0, 0, 0})    // partition, topic and body tags
	size := binary.BigEndian.Uint32(got[:4])
	if int(size) != len(got)-4 || !bytes.Equal(got[4:], want.Bytes()) {
		t.Fatalf("request\n got % x (size %d)\nwant % x", got[4:], size, want.Bytes())
	}
}

// describeQuorumBody builds a DescribeQuorum v0 response body down to the
// first partition's leader, with a tagged field in the header to skip.
func describeQuorumBody(corr int32, top, part int16, leader, epoch int32) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, corr)
	b.Write([]byte{1, 3, 2, 0xaa, 0xbb}) // one tagged field: tag 3, 2 bytes
	binary.Write(&b, binary.BigEndian, top)
	b.WriteByte(2)
	b.WriteByte(byte(len(metadataTopic) + 1))
	b.WriteString(metadataTopic)
	b.WriteByte(2)
	binary.Write(&b, binary.BigEndian, int32(0))
	binary.Write(&b, binary.BigEndian, part)
	binary.Write(&b, binary.BigEndian, leader)
	binary.Write(&b, binary.BigEndian, epoch)
	binary.Write(&b, binary.BigEndian, int64(42)) // high watermark, not read
	return b.Bytes()
}

func TestParseDescribeQuorumLeader(t *testing.T) {
	leader, epoch, err := parseDescribeQuorumLeader(describeQuorumBody(1, 0, 0, 3, 9), 1)
	if err != nil || leader != 3 || epoch != 9 {
		t.Fatalf("got leader %d epoch %d err %v, want 3, 9, nil", leader, epoch, err)
	}
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"top-level error", describeQuorumBody(1, 41, 0, 3, 9), "error code 41"},
		{"partition error", describeQuorumBody(1, 0, 6, 3, 9), "error code 6"},
		{"other correlation id", describeQuorumBody(2, 0, 0, 3, 9), "correlation id 2"},
		{"short", describeQuorumBody(1, 0, 0, 3, 9)[:30], "short answer"},
	} {
		if _, _, err := parseDescribeQuorumLeader(c.body, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.want)
		}
	}
}
