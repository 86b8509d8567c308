package fnapi

import (
	"fmt"
	"math"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"
)

// UserStateKind is the kind of a user state key (beam_fn_api.proto,
// StateKey), as the Go SDK uses them:
//
//	ValueState, BagState, CombiningState -> UserStateBag
//	MapState, SetState                   -> UserStateMultimap (one map key)
//	                                        and UserStateMultimapKeys (all keys)
//	OrderedListState                     -> UserStateOrderedList
type UserStateKind int

// User state kinds.
const (
	// UserStateBag (StateKey.BagUserState): Get returns every appended
	// chunk in append order; Append adds a chunk; Clear removes all.
	UserStateBag UserStateKind = iota + 1
	// UserStateMultimap (StateKey.MultimapUserState): the values of one
	// map key (MapKey). Get, Append, Clear as for a bag of that map key.
	UserStateMultimap
	// UserStateMultimapKeys (StateKey.MultimapKeysUserState): Get returns
	// the map keys that have values, each as the SDK encoded it; Clear
	// removes every map key.
	UserStateMultimapKeys
	// UserStateOrderedList (StateKey.OrderedListUserState): entries
	// varint(sort key) || encoded value, one per Append. Get returns the
	// entries with Start <= sort key < End in sort key order (appends
	// with equal sort keys in append order); Clear removes them.
	UserStateOrderedList
)

func (k UserStateKind) String() string {
	switch k {
	case UserStateBag:
		return "bag"
	case UserStateMultimap:
		return "multimap"
	case UserStateMultimapKeys:
		return "multimap_keys"
	case UserStateOrderedList:
		return "ordered_list"
	}
	return fmt.Sprintf("UserStateKind(%d)", int(k))
}

// UserStateKey names one piece of user state of a transform: a state id of
// the ParDo (its StateSpec's local name), the element key (encoded with the
// stage input's wire-safe key coder: the bytes of the Kafka record key of
// the keyed input topic) and the window (encoded with the input's window
// coder, without a count: empty for the global window).
type UserStateKey struct {
	Kind    UserStateKind
	StateID string
	Key     []byte
	Window  []byte
	// MapKey is the encoded map key (UserStateMultimap only).
	MapKey []byte
	// Start and End bound the sort keys [Start, End) of UserStateOrderedList
	// Gets and Clears; the whole int64 range when the request has none.
	Start, End int64
}

// UserState serves the user state of one stateful transform. Appends and
// clears of a bundle are visible to the later requests of the same and later
// bundles; whether they are kept is the implementation's business (the
// runner keeps them with the transaction attempt that ran the bundle).
// Methods are called from the State stream's goroutine, only while a bundle
// of the stage holding the transform is running. Returned slices must not
// change afterwards (pages of one answer are cut from them on successive
// calls).
type UserState interface {
	// Get returns the state's chunks; their concatenation is the answer.
	Get(k UserStateKey) ([][]byte, error)
	// Append adds data.
	Append(k UserStateKey, data []byte) error
	// Clear removes the state (for UserStateOrderedList, the range).
	Clear(k UserStateKey) error
}

// RegisterUserState makes the State service answer user state requests of
// transform transformID (a pipeline transform id, unique across stages)
// from us. Registering the same id again replaces us.
func (s *Server) RegisterUserState(transformID string, us UserState) {
	s.userStates.Store(transformID, us)
}

// userStateKey converts a request's user state key; ok=false for other
// keys (side inputs).
func userStateKey(k *fnpb.StateKey) (transform string, key UserStateKey, ok bool) {
	switch t := k.GetType().(type) {
	case *fnpb.StateKey_BagUserState_:
		b := t.BagUserState
		return b.GetTransformId(), UserStateKey{Kind: UserStateBag, StateID: b.GetUserStateId(), Key: b.GetKey(), Window: b.GetWindow()}, true
	case *fnpb.StateKey_MultimapUserState_:
		m := t.MultimapUserState
		return m.GetTransformId(), UserStateKey{Kind: UserStateMultimap, StateID: m.GetUserStateId(), Key: m.GetKey(), Window: m.GetWindow(), MapKey: m.GetMapKey()}, true
	case *fnpb.StateKey_MultimapKeysUserState_:
		m := t.MultimapKeysUserState
		return m.GetTransformId(), UserStateKey{Kind: UserStateMultimapKeys, StateID: m.GetUserStateId(), Key: m.GetKey(), Window: m.GetWindow()}, true
	case *fnpb.StateKey_OrderedListUserState_:
		o := t.OrderedListUserState
		uk := UserStateKey{Kind: UserStateOrderedList, StateID: o.GetUserStateId(), Key: o.GetKey(), Window: o.GetWindow(), Start: math.MinInt64, End: math.MaxInt64}
		if r := o.GetRange(); r != nil {
			uk.Start, uk.End = r.GetStart(), r.GetEnd()
		}
		return o.GetTransformId(), uk, true
	}
	return "", UserStateKey{}, false
}

// answerUserState answers one user state request, or returns nil if req is
// not about user state. A request of an instruction that is not a running
// bundle (one that failed or was abandoned: its attempt is being aborted) is
// refused, so that a late write can never leak into the next attempt.
func (s *Server) answerUserState(req *fnpb.StateRequest) *fnpb.StateResponse {
	transform, key, ok := userStateKey(req.GetStateKey())
	if !ok {
		return nil
	}
	fail := func(format string, args ...any) *fnpb.StateResponse {
		msg := fmt.Sprintf(format, args...)
		s.log.Warn("fnapi: user state request refused", "instruction", req.GetInstructionId(), "error", msg)
		return &fnpb.StateResponse{Id: req.GetId(), Error: msg}
	}
	what := fmt.Sprintf("%s state %q of transform %q (instruction %s)", key.Kind, key.StateID, transform, req.GetInstructionId())
	s.mu.Lock()
	p, running := s.mu.pending[req.GetInstructionId()]
	s.mu.Unlock()
	if !running || p.bundle == nil {
		return fail("fnapi: %s: the instruction is not a running bundle", what)
	}
	v, ok := s.userStates.Load(transform)
	if !ok {
		return fail("fnapi: %s: no user state is registered for the transform", what)
	}
	us := v.(UserState)
	switch r := req.GetRequest().(type) {
	case *fnpb.StateRequest_Get:
		chunks, err := us.Get(key)
		if err != nil {
			return fail("fnapi: %s: get: %v", what, err)
		}
		data, token, err := statePage(chunks, r.Get.GetContinuationToken())
		if err != nil {
			return fail("fnapi: %s: %v", what, err)
		}
		return &fnpb.StateResponse{Id: req.GetId(), Response: &fnpb.StateResponse_Get{Get: &fnpb.StateGetResponse{Data: data, ContinuationToken: token}}}
	case *fnpb.StateRequest_Append:
		if key.Kind == UserStateMultimapKeys {
			return fail("fnapi: %s: append to the keys of a multimap", what)
		}
		if err := us.Append(key, r.Append.GetData()); err != nil {
			return fail("fnapi: %s: append: %v", what, err)
		}
		return &fnpb.StateResponse{Id: req.GetId(), Response: &fnpb.StateResponse_Append{Append: &fnpb.StateAppendResponse{}}}
	case *fnpb.StateRequest_Clear:
		if err := us.Clear(key); err != nil {
			return fail("fnapi: %s: clear: %v", what, err)
		}
		return &fnpb.StateResponse{Id: req.GetId(), Response: &fnpb.StateResponse_Clear{Clear: &fnpb.StateClearResponse{}}}
	}
	return fail("fnapi: %s: request %T not supported", what, req.GetRequest())
}
