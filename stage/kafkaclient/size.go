package kafkaclient

import (
	"strconv"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Record sizes (issue 23). A user's topic holds record batches of up to
// its max.message.bytes (the broker's message.max.bytes by default,
// 1 048 588), and a stage forwards each record in an Envelope a few bytes
// larger, in internal topics the runner creates; a GroupByKey stores each
// value in a changelog record, and a DoFn may emit an element larger than
// any it read. The rule: every topic the runner creates gets
// max.message.bytes InternalTopicMaxMessageBytes (64 MiB), far above any
// user topic's default, so every record a user's topic can hold crosses
// every stage; every producer the runner creates may send a request that
// large (ProducerMessageMaxBytes); every consumer may receive it
// (FitLargestRecord). A record larger than its topic takes is refused
// before it is produced where the runner knows the topic's limit
// (BatchOfOneBytes against the limit: the stage's RecordTooLargeError),
// else by librdkafka or the broker, and fails its stage once, naming the
// input record it came from (stage.ErrRecordTooLarge).
//
// The broker's own limits stay in force: socket.request.max.bytes
// (default 104 857 600) bounds a produce request, so an internal topic's
// limit stays under it; replica.fetch.max.bytes (default 1 MiB) does not
// stop replication of a larger batch (KIP-74: a fetch returns its first
// batch whatever its size).

// InternalTopicMaxMessageBytes is the max.message.bytes of every topic the
// runner creates (the stages' data topics, side input topics, changelogs,
// the report, plan, metrics and control topics): 64 MiB, 67 108 864 bytes.
// The largest record batch a stage can write there; a user's topic holding
// larger batches (possible only with a broker whose
// socket.request.max.bytes was raised past its default 100 MB) cannot
// cross a stage whole: such a record fails its stage with
// stage.ErrRecordTooLarge.
const InternalTopicMaxMessageBytes = 64 << 20

// ProducerMessageMaxBytes is every producer's message.max.bytes (librdkafka's
// "maximum Kafka protocol request message size", default 1 000 000, at
// most 1 000 000 000): a request holding one batch of
// InternalTopicMaxMessageBytes and the request's framing (topic name,
// transactional id: well under the 64 KiB added). librdkafka refuses a
// record whose key, value and headers exceed it when it is produced
// (kafka.ErrMsgSizeTooLarge) and cuts batches at the smaller of it and
// batch.size (default 1 000 000), so raising it changes no batch of small
// records.
const ProducerMessageMaxBytes = InternalTopicMaxMessageBytes + 64<<10

// minReceiveMessageMaxBytes is what FitLargestFetch gives a consumer's
// receive.message.max.bytes at least: librdkafka's default, 100 000 000,
// which is more than a fetch answer holding one batch of
// InternalTopicMaxMessageBytes and its framing (a fetch returns its first
// record batch whatever fetch.max.bytes says, KIP-74) and than the
// broker's default socket.request.max.bytes, so also the largest batch a
// user's topic can hold on a broker left at its defaults.
const minReceiveMessageMaxBytes = 100_000_000

// FitLargestRecord sets cm's producer settings for the largest record an
// internal topic holds: message.max.bytes ProducerMessageMaxBytes, unless
// cm (the user's properties) asks for more. cm is changed in place.
func FitLargestRecord(cm kafka.ConfigMap) {
	if intSetting(cm, "message.max.bytes") < ProducerMessageMaxBytes {
		cm["message.max.bytes"] = ProducerMessageMaxBytes
	}
}

// FitLargestFetch sets cm's consumer settings so that a fetch answer
// holding the largest batch an internal topic takes is received:
// receive.message.max.bytes at least minReceiveMessageMaxBytes and at
// least the fetch.max.bytes librdkafka will use + 512 (it refuses a
// configuration with less: the answer's framing; unset, fetch.max.bytes
// is raised to a user's message.max.bytes), the larger of the user's and
// these. cm is changed in place. fetch.max.bytes (default 52 428 800)
// and max.partition.fetch.bytes (default 1 048 576) are left alone: the
// broker returns a larger first batch anyway, and raising them would let
// every fetch hold that much.
func FitLargestFetch(cm kafka.ConfigMap) {
	want := minReceiveMessageMaxBytes
	fetch := intSetting(cm, "fetch.max.bytes")
	if _, set := cm["fetch.max.bytes"]; !set {
		fetch = max(fetch, intSetting(cm, "message.max.bytes"))
	}
	if fetch+512 > want {
		want = fetch + 512
	}
	if intSetting(cm, "receive.message.max.bytes") < want {
		cm["receive.message.max.bytes"] = want
	}
}

// intSetting is cm[key] as an int (a user's property is a string, the
// runner's own an int), 0 if unset or not a number.
func intSetting(cm kafka.ConfigMap, key string) int {
	switch v := cm[key].(type) {
	case int:
		return v
	case string:
		n, err := strconv.Atoi(v)
		if err == nil {
			return n
		}
	}
	return 0
}

// BatchOfOneBytes is the size in bytes of a record batch (magic 2, not
// compressed) holding one record with a key of k bytes, a value of v
// bytes and headers h (each key and value, as the record encodes them),
// as the broker compares it with a topic's max.message.bytes: the batch
// header's 61 bytes (the log's offset and length included), then the
// record's length, attributes, timestamp and offset deltas (at most 1
// byte each for the first record), key and value with their lengths, and
// the headers with their count. A record larger than that limit is one the
// broker refuses alone (MESSAGE_TOO_LARGE); a compressed batch can be
// smaller, so this errs on the refusing side only for a topic that
// compresses.
func BatchOfOneBytes(k, v int, h []kafka.Header) int {
	body := 1 + 1 + 1 + varintLen(k) + k + varintLen(v) + v + varintLen(len(h))
	for _, x := range h {
		body += varintLen(len(x.Key)) + len(x.Key) + varintLen(len(x.Value)) + len(x.Value)
	}
	return 61 + varintLen(body) + body
}

// varintLen is the size of n as a zigzag varint (Kafka's record fields).
func varintLen(n int) int {
	u, s := uint64(n)<<1, 1
	if n < 0 {
		u = uint64(^(n << 1))
	}
	for ; u >= 0x80; u >>= 7 {
		s++
	}
	return s
}
