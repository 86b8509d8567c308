package kafkaclient

import (
	"testing"
	"time"
)

// TestTransactionalProducerKeepsTheUsersTuning (issue 23: "nothing may
// quietly override a user's transaction.timeout.ms"): a user's
// transaction.timeout.ms and linger.ms reach the stage producers; without
// them the runner's defaults (TransactionTimeout, 5 ms) apply; the
// transactional.id is always the runner's.
func TestTransactionalProducerKeepsTheUsersTuning(t *testing.T) {
	pc := TransactionalProducerConfig("b:9092", map[string]string{"transaction.timeout.ms": "60000", "linger.ms": "20"}, "app.s1.0")
	if pc["transaction.timeout.ms"] != "60000" || pc["linger.ms"] != "20" || pc["transactional.id"] != "app.s1.0" {
		t.Fatalf("with the user's settings: transaction.timeout.ms %v, linger.ms %v, transactional.id %v; want 60000, 20, app.s1.0", pc["transaction.timeout.ms"], pc["linger.ms"], pc["transactional.id"])
	}
	pc = TransactionalProducerConfig("b:9092", nil, "app.s1.0")
	if pc["transaction.timeout.ms"] != int(TransactionTimeout.Milliseconds()) || pc["linger.ms"] != 5 {
		t.Fatalf("defaults: transaction.timeout.ms %v, linger.ms %v; want %d, 5", pc["transaction.timeout.ms"], pc["linger.ms"], TransactionTimeout.Milliseconds())
	}
	if d, err := TransactionTimeoutOf(map[string]string{"transaction.timeout.ms": "60000"}); err != nil || d != time.Minute {
		t.Fatalf("TransactionTimeoutOf(60000) = %v, %v", d, err)
	}
	if d, err := TransactionTimeoutOf(nil); err != nil || d != TransactionTimeout {
		t.Fatalf("TransactionTimeoutOf(nil) = %v, %v", d, err)
	}
	for _, bad := range []string{"0", "-1", "1m", ""} {
		if _, err := TransactionTimeoutOf(map[string]string{"transaction.timeout.ms": bad}); err == nil {
			t.Errorf("TransactionTimeoutOf(%q): no error", bad)
		}
	}
}

// TestOwnedProperty: the properties the runner sets on its clients are
// named as its own, whatever their case; a tuning or security property is
// not.
func TestOwnedProperty(t *testing.T) {
	for _, k := range []string{"group.id", "GROUP.ID", " isolation.level ", "enable.auto.commit", "transactional.id", "auto.offset.reset", "partition.assignment.strategy"} {
		if why, owned := OwnedProperty(k); !owned || why == "" {
			t.Errorf("OwnedProperty(%q) = %q, %v; want owned, with why", k, why, owned)
		}
	}
	for _, k := range []string{"linger.ms", "transaction.timeout.ms", "security.protocol", "sasl.password", "fetch.min.bytes", "session.timeout.ms", "client.id"} {
		if _, owned := OwnedProperty(k); owned {
			t.Errorf("OwnedProperty(%q): owned, want not", k)
		}
	}
}
