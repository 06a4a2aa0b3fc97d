package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var errClosed = errors.New("connection closed")

// checkLoopback refuses every address that is not 127.0.0.1 (or localhost): this tool only ever loads a
// coordinator on the same machine.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return fmt.Errorf("address %q: only 127.0.0.1 is ever targeted", addr)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("address %q: bad port", addr)
	}
	return nil
}

type call struct {
	corr int32
	resp kmsg.Response
	done chan error
}

// Conn is one TCP connection to a broker or gateway. Requests may be pipelined: responses come back in
// request order (Kafka answers one connection's requests in order), so a FIFO of pending calls matches
// them, and the correlation id is checked.
type Conn struct {
	c       net.Conn
	wmu     sync.Mutex
	corr    int32
	fmt     *kmsg.RequestFormatter
	pending chan *call
	buf     []byte
	closed  chan struct{}
	once    sync.Once
	err     error
}

func Dial(addr string, clientID string, timeout time.Duration) (*Conn, error) {
	if err := checkLoopback(addr); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cn := &Conn{
		c:       c,
		fmt:     kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID)),
		pending: make(chan *call, 64),
		closed:  make(chan struct{}),
	}
	go cn.readLoop()
	return cn, nil
}

func (cn *Conn) Close() { cn.fail(errClosed) }

func (cn *Conn) fail(err error) {
	cn.once.Do(func() {
		cn.err = err
		close(cn.closed)
		_ = cn.c.Close()
	})
}

// Do sends req and waits for its response, decoded into a fresh response of the request's kind.
func (cn *Conn) Do(req kmsg.Request) (kmsg.Response, error) {
	cl := &call{resp: req.ResponseKind(), done: make(chan error, 1)}
	cn.wmu.Lock()
	select {
	case <-cn.closed:
		cn.wmu.Unlock()
		return nil, cn.err
	default:
	}
	cn.corr++
	cl.corr = cn.corr
	cn.buf = cn.fmt.AppendRequest(cn.buf[:0], req, cl.corr)
	select {
	case cn.pending <- cl:
	case <-cn.closed:
		cn.wmu.Unlock()
		return nil, cn.err
	}
	_, err := cn.c.Write(cn.buf)
	cn.wmu.Unlock()
	if err != nil {
		cn.fail(err)
	}
	select {
	case err := <-cl.done:
		if err != nil {
			return nil, err
		}
		return cl.resp, nil
	case <-cn.closed:
		// The reader may have answered just before closing.
		select {
		case err := <-cl.done:
			if err == nil {
				return cl.resp, nil
			}
			return nil, err
		default:
			return nil, cn.err
		}
	}
}

func (cn *Conn) readLoop() {
	r := bufio.NewReaderSize(cn.c, 64<<10)
	var size [4]byte
	var body []byte
	for {
		if _, err := io.ReadFull(r, size[:]); err != nil {
			cn.fail(fmt.Errorf("read: %w", err))
			return
		}
		n := int(binary.BigEndian.Uint32(size[:]))
		if n < 4 || n > 256<<20 {
			cn.fail(fmt.Errorf("bad response size %d", n))
			return
		}
		// A fresh buffer each time: decoded byte fields may point into it.
		body = make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			cn.fail(fmt.Errorf("read: %w", err))
			return
		}
		var cl *call
		select {
		case cl = <-cn.pending:
		default:
			cn.fail(errors.New("response without a request"))
			return
		}
		corr := int32(binary.BigEndian.Uint32(body[:4]))
		if corr != cl.corr {
			cn.fail(fmt.Errorf("correlation id %d, expected %d", corr, cl.corr))
			return
		}
		rest := body[4:]
		if cl.resp.IsFlexible() && cl.resp.Key() != 18 {
			var err error
			if rest, err = skipTags(rest); err != nil {
				cl.done <- err
				continue
			}
		}
		cl.done <- cl.resp.ReadFrom(rest)
	}
}

// skipTags skips a response header's tagged fields (flexible versions).
func skipTags(b []byte) ([]byte, error) {
	num, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[k:]
	for i := uint64(0); i < num; i++ {
		_, k = binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < size {
			return nil, errors.New("bad tag size")
		}
		b = b[k+int(size):]
	}
	return b, nil
}
