package stage

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/kafkastreams/kafkastreams/stage/state"
	"github.com/kafkastreams/kafkastreams/stage/step"
)

// spillFile holds an attempt's spilled records (StepConfig.Spill) on local
// disk until its transaction produces them (Loop.commit), in order. One
// file per Loop, created at the first spill, emptied at every attempt
// (reset) and removed when the Loop's Run returns (close); one a killed
// instance leaves goes with its slot's stores (the runner's SpillDir is
// the instance's stores directory, cleared when the slot is claimed).
// Only the loop's goroutine uses it.
//
// Each record is
//
//	uvarint topic (index into topics) | varint partition |
//	uvarint len(key)+1 (0: nil key) | key | uvarint len(value)+1 | value |
//	varint timestamp (Unix ns; 0: none) | uvarint header count |
//	per header: uvarint len(key)+1 | key | uvarint len(value)+1 (0: nil) | value
type spillFile struct {
	dir    string
	f      *os.File
	w      *bufio.Writer
	topics []string
	index  map[string]uint64
	n      int
	buf    []byte
}

// add appends records.
func (s *spillFile) add(records []step.Record) error {
	if s.f == nil {
		if s.dir != "" {
			if err := os.MkdirAll(s.dir, 0o755); err != nil {
				return spillErr(s.dir, err)
			}
		}
		f, err := os.CreateTemp(s.dir, "kafkastreams-spill-*")
		if err != nil {
			return spillErr(s.dir, err)
		}
		s.f, s.w, s.index = f, bufio.NewWriterSize(f, 1<<20), map[string]uint64{}
	}
	for i := range records {
		r := &records[i]
		t, ok := s.index[r.Topic]
		if !ok {
			t = uint64(len(s.topics))
			s.index[r.Topic] = t
			s.topics = append(s.topics, r.Topic)
		}
		b := binary.AppendUvarint(s.buf[:0], t)
		b = binary.AppendVarint(b, int64(r.Partition))
		b = appendSpillBytes(b, r.Key)
		b = appendSpillBytes(b, r.Value)
		var ts int64
		if !r.Timestamp.IsZero() {
			ts = r.Timestamp.UnixNano()
		}
		b = binary.AppendVarint(b, ts)
		b = binary.AppendUvarint(b, uint64(len(r.Headers)))
		for _, h := range r.Headers {
			b = appendSpillBytes(b, []byte(h.Key))
			b = appendSpillBytes(b, h.Value)
		}
		s.buf = b
		if _, err := s.w.Write(b); err != nil {
			return spillErr(s.f.Name(), err)
		}
	}
	s.n += len(records)
	return nil
}

func appendSpillBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendUvarint(b, 0)
	}
	return append(binary.AppendUvarint(b, uint64(len(v))+1), v...)
}

// replay calls produce for every record added since the last reset, in
// order. The record and its bytes are valid only during the call.
func (s *spillFile) replay(produce func(*step.Record) error) error {
	if s.n == 0 {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return spillErr(s.f.Name(), err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return spillErr(s.f.Name(), err)
	}
	rd := bufio.NewReaderSize(s.f, 1<<20)
	var key, value []byte
	for i := 0; i < s.n; i++ {
		t, err := binary.ReadUvarint(rd)
		if err != nil || t >= uint64(len(s.topics)) {
			return s.corrupt(i, err)
		}
		p, err := binary.ReadVarint(rd)
		if err != nil {
			return s.corrupt(i, err)
		}
		r := step.Record{Topic: s.topics[t], Partition: int32(p)}
		if r.Key, key, err = readSpillBytes(rd, key); err != nil {
			return s.corrupt(i, err)
		}
		if r.Value, value, err = readSpillBytes(rd, value); err != nil {
			return s.corrupt(i, err)
		}
		ts, err := binary.ReadVarint(rd)
		if err != nil {
			return s.corrupt(i, err)
		}
		if ts != 0 {
			r.Timestamp = time.Unix(0, ts)
		}
		nh, err := binary.ReadUvarint(rd)
		if err != nil {
			return s.corrupt(i, err)
		}
		for j := uint64(0); j < nh; j++ {
			// Headers are rare (a sink's): each read into new memory (a
			// nil buffer), not a reused one.
			hk, _, err := readSpillBytes(rd, nil)
			if err != nil {
				return s.corrupt(i, err)
			}
			hv, _, err := readSpillBytes(rd, nil)
			if err != nil {
				return s.corrupt(i, err)
			}
			r.Headers = append(r.Headers, step.Header{Key: string(hk), Value: hv})
		}
		if err := produce(&r); err != nil {
			return err
		}
	}
	return nil
}

// readSpillBytes reads one length-prefixed byte string into buf's memory
// (grown if needed): the string (nil for a nil one) and the buffer.
func readSpillBytes(rd *bufio.Reader, buf []byte) (v, grown []byte, err error) {
	n, err := binary.ReadUvarint(rd)
	if err != nil {
		return nil, buf, err
	}
	if n == 0 {
		return nil, buf, nil
	}
	n--
	if n == 0 {
		return []byte{}, buf, nil
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	v = buf[:n]
	if _, err := io.ReadFull(rd, v); err != nil {
		return nil, buf, err
	}
	return v, buf, nil
}

func (s *spillFile) corrupt(i int, err error) error {
	if err == nil {
		err = errors.New("unknown topic index")
	}
	return fmt.Errorf("spill file %s: record %d of %d unreadable: %w", s.f.Name(), i, s.n, err)
}

// reset empties the file for the next attempt.
func (s *spillFile) reset() error {
	if s.f == nil || s.n == 0 {
		return nil
	}
	s.n = 0
	s.w.Reset(s.f)
	if err := s.f.Truncate(0); err != nil {
		return spillErr(s.f.Name(), err)
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return spillErr(s.f.Name(), err)
	}
	return nil
}

// close removes the file.
func (s *spillFile) close() {
	if s.f != nil {
		s.f.Close()
		os.Remove(s.f.Name())
		s.f = nil
	}
}

// spillErr is the error of the spill file (or its directory) at path: it
// wraps state.ErrStateDir too when the file system refused (a full disk, a
// quota, a read-only file system): the spill file lives in --state_dir,
// beside the task stores, and the stage fails naming it, as a task store
// that cannot flush does.
func spillErr(path string, err error) error {
	var pe *fs.PathError
	var errno syscall.Errno
	if errors.As(err, &pe) || errors.As(err, &errno) {
		return fmt.Errorf("%w: spill file %s (an attempt's records beyond the spill size wait there for its transaction): %w", state.ErrStateDir, path, err)
	}
	return fmt.Errorf("spill file %s: %w", path, err)
}
