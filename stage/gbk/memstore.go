package gbk

import (
	"bytes"
	"sort"
)

// This file is MemStore, the in-memory Store.

// MemStore is an in-memory Store (tests, and the reference for state.Task).
type MemStore struct{ m map[string][]byte }

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{m: map[string][]byte{}} }

// Get implements Store.
func (s *MemStore) Get(key []byte) ([]byte, bool, error) {
	v, ok := s.m[string(key)]
	return append([]byte{}, v...), ok, nil
}

// Set implements Store.
func (s *MemStore) Set(key, value []byte) error {
	s.m[string(key)] = append([]byte{}, value...)
	return nil
}

// Delete implements Store.
func (s *MemStore) Delete(key []byte) error {
	delete(s.m, string(key))
	return nil
}

// Scan implements Store.
func (s *MemStore) Scan(prefix []byte, fn func(key, value []byte) error) error {
	var keys []string
	for k := range s.m {
		if bytes.HasPrefix([]byte(k), prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn([]byte(k), s.m[k]); err != nil {
			return err
		}
	}
	return nil
}

// Len is the number of keys stored.
func (s *MemStore) Len() int { return len(s.m) }

// Clone copies the store.
func (s *MemStore) Clone() *MemStore {
	o := NewMemStore()
	for k, v := range s.m {
		o.m[k] = append([]byte{}, v...)
	}
	return o
}
