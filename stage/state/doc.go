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
//   - Restore (on assignment) rebuilds a task's Pebble database from its
//     changelog partition, read_committed, to the end: nothing of an
//     aborted or uncommitted transaction survives a crash, an abort or a
//     move to another instance. It reads from the beginning ("full"), or
//     only the tail from a kept store's meta offset (keep.go): Drop keeps
//     the store on disk with a meta record (changelog topic id, offset S,
//     time), and a standby follower (stage/standby) keeps copies of tasks
//     owned elsewhere current through Follow and Copy.Apply ("kept",
//     "standby"). keep.go states the kept-store invariant that makes a
//     tail restore equal a full one.
//
// Invariant: after Committed, the task's Pebble database equals the
// changelog partition's committed records applied in offset order.
//
// It may import Pebble; it imports no Kafka client (the changelog reader
// is Options.Changelog, kafkaclient.ChangelogReader in the runner), so the
// heads that keep their state here (stage/gbk, userstate, splittable) stay
// pure; it must not import runner or stage (step.Head implementations use
// it). stage/archtest checks it.
package state
