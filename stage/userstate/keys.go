package userstate

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
)

// Store key layout (one store per task; only this head writes it). lp(x) is
// x behind its uvarint length, so that a key is never a prefix of another
// key's field; numbers are big-endian, signed ones with the sign bit
// flipped, so that keys sort in numeric order.
//
//	user state   'u' | maxTs(window) | lp(window) | lp(state id) | lp(key) | part
//	  bag          part = 'b' | list
//	  multimap     part = 'm' | lp(map key) | list
//	  ordered list part = 'o' | 0x00                      -> next seq (uvarint)
//	                      'o' | 0x01 | sortKey | seq      -> entry
//	list         0x00 -> next seq (uvarint); 0x01 | seq -> chunk
//	timer        't' | lp(family) | lp(key) | lp(window) | lp(tag)
//	               -> domain (1) | fire (8) | hold (8) | encoded timer
//
// User state keys start with the window's max timestamp so that garbage
// collection is a scan from the front that stops at the first live window.
const (
	tagUser  = 'u'
	tagTimer = 't'

	partBag         = 'b'
	partMultimap    = 'm'
	partOrderedList = 'o'

	listCount = 0x00
	listEntry = 0x01
)

// errMalformedKey: a store key or value this package did not write.
var errMalformedKey = errors.New("userstate: malformed store record")

func appendLP(b, x []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(x)))
	return append(b, x...)
}

func readLP(b []byte) (x, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, errMalformedKey
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

func appendInt64(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
}

func readInt64(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)) }

// userBase is the prefix of one piece of user state: window (with its max
// timestamp), state id and key.
func userBase(maxTs mtime.Time, window []byte, stateID string, key []byte) []byte {
	b := []byte{tagUser}
	b = appendInt64(b, int64(maxTs))
	b = appendLP(b, window)
	b = appendLP(b, []byte(stateID))
	return appendLP(b, key)
}

// userMaxTs reads the window max timestamp of a user state key.
func userMaxTs(k []byte) (mtime.Time, error) {
	if len(k) < 9 || k[0] != tagUser {
		return 0, fmt.Errorf("%w: user state key %x", errMalformedKey, k)
	}
	return mtime.Time(readInt64(k[1:])), nil
}

// timerKey is the store key of the timer (family, key, window, tag).
func timerKey(family string, key, window []byte, tag string) []byte {
	b := []byte{tagTimer}
	b = appendLP(b, []byte(family))
	b = appendLP(b, key)
	b = appendLP(b, window)
	return appendLP(b, []byte(tag))
}

// timerFamilyWindowOf reads the family and the window of a timer key.
func timerFamilyWindowOf(k []byte) (family string, window []byte, err error) {
	if len(k) < 1 || k[0] != tagTimer {
		return "", nil, fmt.Errorf("%w: timer key %x", errMalformedKey, k)
	}
	f, rest, err := readLP(k[1:])
	if err != nil {
		return "", nil, err
	}
	if _, rest, err = readLP(rest); err != nil { // the key
		return "", nil, err
	}
	w, _, err := readLP(rest)
	return string(f), w, err
}

// timerValue is the stored form of a timer.
func timerValue(domain byte, fire, hold mtime.Time, encoded []byte) []byte {
	b := []byte{domain}
	b = appendInt64(b, int64(fire))
	b = appendInt64(b, int64(hold))
	return append(b, encoded...)
}

func parseTimerValue(v []byte) (domain byte, fire, hold mtime.Time, encoded []byte, err error) {
	if len(v) < 17 {
		return 0, 0, 0, nil, fmt.Errorf("%w: timer value of %d bytes", errMalformedKey, len(v))
	}
	return v[0], mtime.Time(readInt64(v[1:])), mtime.Time(readInt64(v[9:])), v[17:], nil
}
