package envelope

// What a reader of an internal topic trusts (issue 23: records in internal
// topics that the runner did not write).
//
// The internal topics are the application's (DESIGN.md, Real components):
// only its principal may write them (the ACLs in the README), every
// stage writes them in transactions and every stage reader reads them
// read_committed. Within that, a reader trusts
//
//   - an element record that decodes as an Envelope (Decode): a value
//     that does not is skipped, counted and logged, never fatal;
//   - a record of watermark reports only if it carries the header
//     WriterHeader with its application id (FromApplication): a report
//     is what moves windows and ends a job, so a well-formed report
//     written by anything else (a plain producer, another application,
//     a tool) is skipped, counted and logged; and, within it, a report
//     only if it names a stage and source partition of the plan (the
//     reader's WatermarkManager takes it: ErrUnknownUpstream, a
//     partition out of range, a bad total are skipped the same way).
//
// The header is on report records only (a handful per commit): element
// records, the hot path, carry none. It is a Kafka header, not a field of
// the Envelope, so an SDK of another language reading or writing the
// topics needs nothing of Go's to follow the rule. It is not a signature:
// a principal that may write the topics can forge it, and only the ACLs
// keep such a principal out.

// WriterHeader is the key of the record header the runner writes on every
// record of watermark reports it produces (the report topic's records and
// the Envelope report batches on stage topics); its value is the
// application id (--application_id), as bytes.
const WriterHeader = "kafkastreams.application_id"

// FromApplication reports whether record headers hs (of any struct type
// shaped like confluent-kafka-go's kafka.Header: step.Header, kafka.Header)
// hold WriterHeader with value app. O(len(hs)); no allocation.
func FromApplication[H ~struct {
	Key   string
	Value []byte
}](hs []H, app string) bool {
	for _, h := range hs {
		if h := header(h); h.Key == WriterHeader && string(h.Value) == app {
			return true
		}
	}
	return false
}

// header is the shape of the headers FromApplication reads.
type header struct {
	Key   string
	Value []byte
}
