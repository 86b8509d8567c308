package runner

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kafkastreams/kafkastreams/stage/kafkaclient"
)

// brokerCheckTimeout bounds checkBrokers when no broker answers: as long as
// createTopics waited for its answer before the check existed.
const brokerCheckTimeout = 30 * time.Second

// metadataAttempt bounds one metadata request of checkBrokers, and so how
// long a security failure waits for the request in flight to return.
const metadataAttempt = 500 * time.Millisecond

// checkBrokers asks the cluster at bootstrap for its broker list (a metadata
// request naming no topic, the cheapest a client can make) with a client
// configured like every other client of the job (props, the --kafka_property
// settings), and watches that client's error events while it waits. execute
// calls it before createTopics. It returns:
//
//   - nil as soon as a broker answers;
//   - at once (within about metadataAttempt), when the client reports that
//     SASL authentication failed or that the TLS handshake failed, an error
//     saying so with security.protocol, sasl.mechanism and sasl.username and
//     librdkafka's own words (securityFailure). librdkafka reports these only
//     as error events and keeps retrying: the admin calls that follow would
//     time out after 30 s with "context deadline exceeded" and no word of the
//     cause;
//   - when no broker has answered after brokerCheckTimeout, or ctx ends, an
//     error wrapping ctx's error (context.DeadlineExceeded: unreachable
//     reports it) with the last connection error the client reported.
//
// A set-up that cannot be right is never retried: a SASL client against a
// PLAINTEXT or SSL listener is reported as a failed SASL handshake naming the
// likely cause, a TLS client against a PLAINTEXT listener as a failed TLS
// handshake. No error or log line of checkBrokers contains the value of a
// secret property (kafkaclient.SecretProperty: sasl.password and the
// like): every one goes through kafkaclient.Redact.
func checkBrokers(ctx context.Context, bootstrap string, props map[string]string) error {
	log := runnerLogger(props)
	start := time.Now()
	cm := kafkaclient.LeanProducerConfig(bootstrap, props)
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return errors.New(kafkaclient.Redact(fmt.Sprintf("kafkastreams: Kafka client for %s: %v", bootstrap, err), props))
	}
	// Closed after the goroutines below are done with p (every return
	// waits for the metadata goroutine's answer), in the background.
	defer closeLater(p.Close)

	cctx, cancel := context.WithTimeout(ctx, brokerCheckTimeout)
	defer cancel()

	// The client's error events: a security failure ends the check, any other
	// error is kept to say why no broker answered.
	failed := make(chan error, 1)
	var mu sync.Mutex
	last := ""
	go func() {
		warned := false
		for ev := range p.Events() { // until p.Close
			ke, ok := ev.(kafka.Error)
			if !ok {
				continue
			}
			if err := securityFailure(ke, bootstrap, props); err != nil {
				select {
				case failed <- err:
				default:
				}
				continue
			}
			if ke.Code() == kafka.ErrAllBrokersDown {
				continue // "1/1 brokers are down": the transport error said why
			}
			mu.Lock()
			last = kafkaclient.Redact(ke.Error(), props)
			mu.Unlock()
			if !warned {
				warned = true
				log.Warn(fmt.Sprintf("kafkastreams: no broker at %s answers yet: retrying for up to %s", bootstrap, brokerCheckTimeout), "err", kafkaclient.Redact(ke.Error(), props))
			}
		}
	}()

	// The metadata requests, one at a time until one is answered or the check
	// ends (stop, or cctx): the client must not be closed while one is in
	// flight.
	stop := make(chan struct{})
	answered := make(chan error, 1)
	go func() {
		for {
			_, err := p.GetMetadata(nil, false, int(metadataAttempt/time.Millisecond))
			if err == nil {
				answered <- nil
				return
			}
			select {
			case <-stop:
				answered <- err
				return
			case <-cctx.Done():
				answered <- cctx.Err()
				return
			case <-time.After(50 * time.Millisecond): // should it fail at once
			}
		}
	}()

	select {
	case err := <-failed:
		close(stop)
		<-answered
		return err
	case err := <-answered:
		if err == nil {
			return nil
		}
		select {
		case err := <-failed: // reported while the last request waited
			return err
		default:
		}
		mu.Lock()
		why := last
		mu.Unlock()
		if why == "" {
			why = "none reported"
		}
		return fmt.Errorf("kafkastreams: no broker at %s answered a metadata request in %.1fs (the client's last error: %s): %w", bootstrap, time.Since(start).Seconds(), why, err)
	}
}

// brokerName is the "<protocol>://<host:port>/<id>: " prefix of librdkafka's
// broker errors: a host name may say anything, so it is not searched.
var brokerName = regexp.MustCompile(`^[a-z_]+://\S+: `)

// securityFailure returns the error checkBrokers reports for the client's
// error event ke when ke says that the client's security set-up failed, else
// nil:
//
//   - authentication failed: codes ErrAuthentication (librdkafka's local
//     "Authentication failure", what a failed SASL handshake or a rejected
//     password is reported as), ErrSaslAuthenticationFailed,
//     ErrUnsupportedSaslMechanism and ErrIllegalSaslState, or a transport
//     error about SASL;
//   - the TLS handshake failed: ErrSsl, or a transport error "SSL handshake
//     failed" (what a TLS client against a PLAINTEXT listener gets).
//
// The error names security.protocol, sasl.mechanism (for SASL) and
// sasl.username, each as set or as librdkafka's default, quotes librdkafka's
// text, and adds the likely cause when the broker said SASL was not expected
// there (a SASL client against a PLAINTEXT or SSL listener: "Request not
// valid in current SASL state"). No secret property's value is in it.
func securityFailure(ke kafka.Error, bootstrap string, props map[string]string) error {
	text := ke.Error()
	detail := brokerName.ReplaceAllString(text, "")
	var what string
	switch ke.Code() {
	case kafka.ErrAuthentication, kafka.ErrSaslAuthenticationFailed, kafka.ErrUnsupportedSaslMechanism, kafka.ErrIllegalSaslState:
		what = "authentication failed"
	case kafka.ErrSsl:
		what = "TLS handshake failed"
	case kafka.ErrTransport:
		switch {
		case strings.Contains(detail, "SASL"):
			what = "authentication failed"
		case strings.Contains(detail, "SSL handshake failed"):
			what = "TLS handshake failed"
		}
	}
	if what == "" {
		return nil
	}
	setting := func(key, def string) string {
		if v, ok := props[key]; ok {
			return key + "=" + v
		}
		return key + "=" + def + " (the default)"
	}
	settings := []string{setting("security.protocol", "PLAINTEXT")}
	if what == "authentication failed" {
		settings = append(settings, setting("sasl.mechanism", "GSSAPI"))
		if u, ok := props["sasl.username"]; ok {
			settings = append(settings, "sasl.username="+u)
		}
	}
	msg := fmt.Sprintf("kafkastreams: %s at %s (%s, from --kafka_property): %s", what, bootstrap, strings.Join(settings, ", "), text)
	if strings.Contains(detail, "Request not valid in current SASL state") {
		msg += ": the listener does not expect SASL (a PLAINTEXT or SSL listener?): check security.protocol against the broker's listeners"
	}
	return errors.New(kafkaclient.Redact(msg, props))
}
