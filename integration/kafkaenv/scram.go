package kafkaenv

import (
	"fmt"
	"net"
	"sort"
	"strconv"
)

// SCRAM makes Start's broker one with authentication and authorization
// (Options.SCRAM), as a secured production cluster is: beside its
// PLAINTEXT listener, a SASL_PLAINTEXT listener on 127.0.0.1 whose clients
// log in with SCRAM-SHA-256 (KIP-84), Kafka's StandardAuthorizer (KRaft's
// ACL authorizer, KIP-801) and allow.everyone.if.no.acl.found=false: a
// principal of the SASL listener may do only what an ACL grants it.
//
// The PLAINTEXT listener (Broker.BootstrapServers) is the operator's: its
// clients are User:ANONYMOUS, a super user (super.users), so Start's
// readiness check and warm-up, the broker's own requests to its
// controller, and a test's admin client (which grants the ACLs) need no
// credentials. Only ModeProcess runs it (Start returns ErrBadOptions for
// the other modes).
type SCRAM struct {
	// Users are the SCRAM-SHA-256 credentials to create, user name to
	// password: written into the metadata log by the storage format step
	// (kafka-storage format --add-scram, KIP-900), so they exist before
	// the broker answers. Their principals are User:<name>. Required:
	// at least one.
	Users map[string]string
	// Port is the SASL_PLAINTEXT listener's port on 127.0.0.1. Default 0:
	// a free one.
	Port int
}

// scramMechanism is the one SASL mechanism of a SCRAM broker.
const scramMechanism = "SCRAM-SHA-256"

// overrides are the server.properties entries of a SCRAM broker whose
// listeners are PLAINTEXT on brokerPort, SASL_PLAINTEXT on saslPort and
// CONTROLLER on controllerPort.
func (s *SCRAM) overrides(brokerPort, saslPort, controllerPort int) map[string]string {
	hp := func(port int) string { return net.JoinHostPort(loopback, strconv.Itoa(port)) }
	return map[string]string{
		"listeners":                      "PLAINTEXT://" + hp(brokerPort) + ",SASL_PLAINTEXT://" + hp(saslPort) + ",CONTROLLER://" + hp(controllerPort),
		"advertised.listeners":           "PLAINTEXT://" + hp(brokerPort) + ",SASL_PLAINTEXT://" + hp(saslPort),
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
		"sasl.enabled.mechanisms":        scramMechanism,
		// The broker's side of SCRAM: the credentials are in the metadata
		// log, the login module needs no options.
		"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
		"authorizer.class.name":          "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":                    "User:ANONYMOUS",
		"allow.everyone.if.no.acl.found": "false",
	}
}

// credentials are the storage format step's --add-scram values, one per
// user, sorted by name: SCRAM-SHA-256=[name=<user>,password=<password>].
func (s *SCRAM) credentials() []string {
	names := make([]string, 0, len(s.Users))
	for n := range s.Users {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%s=[name=%s,password=%s]", scramMechanism, n, s.Users[n])
	}
	return out
}

// ClientProperties are the librdkafka properties of a client that logs in
// to a SCRAM broker's SASL listener as user with password (the runner's
// --kafka_property pairs).
func ClientProperties(user, password string) map[string]string {
	return map[string]string{
		"security.protocol": "SASL_PLAINTEXT",
		"sasl.mechanism":    scramMechanism,
		"sasl.username":     user,
		"sasl.password":     password,
	}
}
