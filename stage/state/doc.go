// Package state is the durable state store of a stage's tasks: one Pebble
// database per task (input partition), backed by a compacted changelog topic
// "<application_id>-<stage>-changelog" whose partition p holds task p's
// writes.
//
// The changelog is the source of truth; Pebble is a local cache of it:
//
//   - Writes of one transaction attempt are pending: reads see them (Task
//     overlays them on Pebble), Pebble does not have them.
//   - Prepare writes the pending writes of every task as changelog records
//     (key = store key, value = value; a nil value, a tombstone, for a
//     delete) into the open Kafka transaction, beside the attempt's outputs
//     and offsets.
//   - Committed applies them to Pebble; Aborted drops them.
//   - Restore (on assignment) rebuilds a task's Pebble database in a fresh
//     directory from its changelog partition, read_committed, from the
//     beginning to the end: nothing of an aborted or uncommitted transaction
//     survives a crash, an abort or a move to another instance.
//
// Invariant: after Committed, the task's Pebble database equals the
// changelog partition's committed records applied in offset order.
//
// It may import Pebble; it imports no Kafka client (the changelog reader
// is Options.Changelog, kafkaclient.ChangelogReader in the runner), so the
// heads that keep their state here (stage/gbk, userstate, splittable) stay
// pure; it must not import runner or stage (step.Head implementations use
// it). importrules_test.go checks it.
package state
