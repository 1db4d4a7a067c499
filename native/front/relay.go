package main

// The relay: gRPC calls multiplexed over one stream socket to the Python broker.
//
// Frame: u32 length (of what follows), u8 kind, u32 call id, payload (big-endian).
// Front -> broker: CALL (OPEN, the one request and HALF_CLOSE in one frame: every call whose
// client does not stream requests), OPEN, MSG, HALF_CLOSE, CANCEL. Broker -> front: MSG,
// CLOSE, REPLY (MSG then CLOSE OK in one frame, the answer of a unary call).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
)

const (
	kindOpen      = 1
	kindMsg       = 2
	kindHalfClose = 3
	kindCancel    = 4
	kindClose     = 5
	kindReply     = 6
	kindCall      = 7
	headerBytes   = 9
	maxFrameBytes = 1 << 30
)

// event is what the broker said about one call.
type event struct {
	kind    byte
	payload []byte
}

// callQueue is an unbounded queue of events for one call: the relay's reader never blocks
// on a slow client (the broker bounds what it sends: a stream's batches, one answer).
type callQueue struct {
	mu     sync.Mutex
	events []event
	notify chan struct{}
}

func newCallQueue() *callQueue { return &callQueue{notify: make(chan struct{}, 1)} }

func (q *callQueue) push(e event) {
	q.mu.Lock()
	q.events = append(q.events, e)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *callQueue) take() []event {
	q.mu.Lock()
	events := q.events
	q.events = nil
	q.mu.Unlock()
	return events
}

// relay owns the socket to the broker: one writer goroutine batching frames, one reader
// routing the broker's frames to their calls.
type relay struct {
	conn   net.Conn
	out    chan []byte
	mu     sync.Mutex
	calls  map[uint32]*callQueue
	nextID uint32
	closed chan struct{}
	once   sync.Once
}

func newRelay(conn net.Conn) *relay {
	r := &relay{
		conn:   conn,
		out:    make(chan []byte, 4096),
		calls:  make(map[uint32]*callQueue),
		closed: make(chan struct{}),
	}
	go r.writeLoop()
	return r
}

func frame(kind byte, id uint32, payloadBytes int) []byte {
	buf := make([]byte, headerBytes, headerBytes+payloadBytes)
	binary.BigEndian.PutUint32(buf[0:4], uint32(5+payloadBytes))
	buf[4] = kind
	binary.BigEndian.PutUint32(buf[5:9], id)
	return buf
}

func (r *relay) send(buf []byte) {
	select {
	case r.out <- buf:
	case <-r.closed:
	}
}

// open registers a call and returns its id and queue.
func (r *relay) open() (uint32, *callQueue) {
	q := newCallQueue()
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.calls[id] = q
	r.mu.Unlock()
	return id, q
}

func (r *relay) forget(id uint32) {
	r.mu.Lock()
	delete(r.calls, id)
	r.mu.Unlock()
}

func (r *relay) writeLoop() {
	w := bufio.NewWriterSize(r.conn, 256*1024)
	for {
		var buf []byte
		select {
		case buf = <-r.out:
		case <-r.closed:
			return
		}
		if _, err := w.Write(buf); err != nil {
			r.fail(err)
			return
		}
	drain:
		for {
			select {
			case buf = <-r.out:
				if _, err := w.Write(buf); err != nil {
					r.fail(err)
					return
				}
			default:
				break drain
			}
		}
		if err := w.Flush(); err != nil {
			r.fail(err)
			return
		}
	}
}

// readLoop routes the broker's frames until the socket ends; returns why it ended.
func (r *relay) readLoop() error {
	rd := bufio.NewReaderSize(r.conn, 256*1024)
	header := make([]byte, headerBytes)
	for {
		if _, err := io.ReadFull(rd, header); err != nil {
			r.fail(err)
			return err
		}
		length := binary.BigEndian.Uint32(header[0:4])
		if length < 5 || length > maxFrameBytes {
			err := errors.New("relay: bad frame length from the broker")
			r.fail(err)
			return err
		}
		payload := make([]byte, length-5)
		if _, err := io.ReadFull(rd, payload); err != nil {
			r.fail(err)
			return err
		}
		id := binary.BigEndian.Uint32(header[5:9])
		r.mu.Lock()
		q := r.calls[id]
		r.mu.Unlock()
		if q != nil { // a call that ended (cancelled) meanwhile: nobody listens
			q.push(event{kind: header[4], payload: payload})
		}
	}
}

func (r *relay) fail(err error) {
	r.once.Do(func() {
		close(r.closed)
		r.conn.Close()
	})
}
