package kafkaclient

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefusesTellsARefusalFromAnAcceptAndRemembersAnAccept: a listening
// address is not refusing, and is not dialled again within acceptedFor
// (the stage loops ask every 500 ms); a closed one is refusing with
// ECONNREFUSED once its accept is older than acceptedFor.
func TestRefusesTellsARefusalFromAnAcceptAndRemembersAnAccept(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	accepts := make(chan struct{}, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepts <- struct{}{}
		}
	}()
	if err := refuses(addr); err != nil {
		t.Fatalf("a listening address: refuses = %v, want nil", err)
	}
	select {
	case <-accepts:
	case <-time.After(5 * time.Second):
		t.Fatal("the first check did not dial")
	}
	if err := refuses(addr); err != nil {
		t.Fatalf("again: refuses = %v, want nil", err)
	}
	select {
	case <-accepts:
		t.Fatal("a second check within acceptedFor dialled again")
	case <-time.After(100 * time.Millisecond):
	}
	l.Close()
	if err := refuses(addr); err != nil {
		t.Fatalf("closed, but accepted %v ago: refuses = %v, want nil (remembered)", acceptedFor, err)
	}
	accepted.Lock()
	accepted.at[addr] = time.Now().Add(-acceptedFor)
	accepted.Unlock()
	err = refuses(addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("closed: refuses = %v, want ECONNREFUSED", err)
	}
	if err := refuses(addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("closed, asked again: refuses = %v, want ECONNREFUSED (a refusal is not remembered as an accept)", err)
	}
}

func TestAskableAndRefusedErrors(t *testing.T) {
	refused := map[int32]error{2: errors.New("two"), 0: errors.New("zero")}
	if got := askable([]int32{0, 1, 2, 3}, refused); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("askable = %v, want [1 3]", got)
	}
	if got := askable([]int32{0, 1}, nil); len(got) != 2 {
		t.Errorf("askable with none refused = %v, want [0 1]", got)
	}
	if err := refusedErrors([]int32{0, 1, 2}, refused); err == nil || err.Error() != "zero\ntwo" {
		t.Errorf("refusedErrors = %q, want the partitions' errors in their order", err)
	}
	if err := refusedErrors([]int32{1}, refused); err != nil {
		t.Errorf("refusedErrors of none refused = %v, want nil", err)
	}
}
