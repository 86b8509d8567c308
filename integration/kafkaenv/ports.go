package kafkaenv

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// loopback is the only address test brokers listen on.
const loopback = "127.0.0.1"

// checkPortFree returns ErrPortInUse, naming the port and its role, when
// 127.0.0.1:port cannot be bound.
func checkPortFree(role string, port int) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("%w: %s port %d is out of range 1..65535", ErrBadOptions, role, port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: %s port %s:%d is taken by another process (choose another port, or 0 for a free one)", ErrPortInUse, role, loopback, port)
		}
		return fmt.Errorf("%w: %s port %s:%d cannot be bound: %v", ErrPortInUse, role, loopback, port, err)
	}
	return l.Close()
}

// choosePorts returns the broker and controller ports: the given ones after
// checking they are free, or free ports picked by the kernel for zeros.
// A picked port is released before the broker binds it; another process
// could take it in between, in which case the broker fails to start and
// Start reports ErrNotReady with the bind error from its log.
func choosePorts(broker, controller int) (int, int, error) {
	if broker != 0 && broker == controller {
		return 0, 0, fmt.Errorf("%w: broker and controller ports are both %d", ErrBadOptions, broker)
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	pick := func(role string, port int) (int, error) {
		if port != 0 {
			return port, checkPortFree(role, port)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return 0, fmt.Errorf("kafkaenv: pick a free %s port on %s: %w", role, loopback, err)
		}
		held = append(held, l) // held until both are picked, so they differ
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	b, err := pick("broker", broker)
	if err != nil {
		return 0, 0, err
	}
	c, err := pick("controller", controller)
	if err != nil {
		return 0, 0, err
	}
	return b, c, nil
}
