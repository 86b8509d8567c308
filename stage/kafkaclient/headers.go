package kafkaclient

import "github.com/confluentinc/confluent-kafka-go/v2/kafka"

// Headers converts record headers of any struct type shaped like
// confluent-kafka-go's (step.Header, kafkaio.Header) into kafka.Header, in
// order, a nil Value kept (a null header value); nil for none.
func Headers[H ~struct {
	Key   string
	Value []byte
}](hs []H) []kafka.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]kafka.Header, len(hs))
	for i, h := range hs {
		out[i] = kafka.Header(h)
	}
	return out
}
