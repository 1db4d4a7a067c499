package main

// The request-bytes budget (broker.inflight_request_bytes_max), kept before grpc reads a
// request: each gRPC message's declared length (the 5-byte prefix at its start) is booked
// when the prefix comes off the connection, and a call waits for that decision before it asks
// grpc for the message. grpc gives a stream no more window than one message asks for once it
// reads it, so a message that does not fit is answered RESOURCE_EXHAUSTED having cost at most
// the stream's first window, never its declared size. One client address books at most half
// the budget, or one maximal message; a booking is given back when its stream ends (the
// broker's trailers or a reset either way) or its connection closes; a connection whose booked
// message stops arriving for the handshake timeout is closed, so a stalled sender cannot sit
// on the budget. Only frame headers and gRPC length prefixes are read: no HPACK.

import (
	"encoding/binary"
	"log"
	"net"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc"
)

const (
	h2Data, h2Headers, h2RstStream = 0x0, 0x1, 0x3
	h2EndStream, h2Padded          = 0x1, 0x8
	h2PrefaceBytes                 = 24
	grpcPrefixBytes                = 5
	overBudget                     = "rmq-spark: broker.inflight_request_bytes_max reached, request refused; retry later"
	stallCheckEvery                = time.Second
	stallWarnEvery                 = 10 * time.Second
)

// budget: the bytes booked, per client address too, and the connections it watches.
type budget struct {
	limit, share, unbookedOver int64
	stallAfter                 time.Duration
	mu                         sync.Mutex
	booked                     int64
	byHost                     map[string]int64
	conns                      map[string]*watchedConn // by remote address
}

func newBudget(limit, receiveLimit int64, stallAfter time.Duration) *budget {
	return &budget{
		limit: limit, share: max(limit/2, receiveLimit), unbookedOver: receiveLimit,
		stallAfter: stallAfter, byHost: map[string]int64{}, conns: map[string]*watchedConn{},
	}
}

func (b *budget) book(host string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byHost[host]+n > b.share || b.booked+n > b.limit {
		return false
	}
	b.booked += n
	b.byHost[host] += n
	return true
}

func (b *budget) give(host string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.booked -= n
	if b.byHost[host] -= n; b.byHost[host] <= 0 {
		delete(b.byHost, host)
	}
}

// watch wraps a client connection (after TLS) so that its requests are booked.
func (b *budget) watch(conn net.Conn) net.Conn {
	host := conn.RemoteAddr().String()
	if tcp, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		host = tcp.IP.String()
	}
	w := &watchedConn{Conn: conn, budget: b, host: host, key: conn.RemoteAddr().String(),
		preface: h2PrefaceBytes, streams: map[uint32]*watchedStream{}}
	b.mu.Lock()
	b.conns[w.key] = w
	b.mu.Unlock()
	return w
}

// await blocks a call until the prefix of its message number k (from 0) has been judged;
// false: refused. A call the budget does not know (its connection is gone) goes on: grpc
// ends it.
func (b *budget) await(stream grpc.ServerStream, remote string, k int) bool {
	b.mu.Lock()
	conn := b.conns[remote]
	b.mu.Unlock()
	id, ok := streamID(stream)
	if conn == nil || !ok {
		return true
	}
	conn.mu.Lock()
	s := conn.streams[id]
	conn.mu.Unlock()
	if s == nil {
		return true
	}
	for {
		conn.mu.Lock()
		refused := s.refusedAt >= 0 && k >= s.refusedAt
		decided := refused || s.seen > k || s.halfClosed || s.ended
		conn.mu.Unlock()
		if decided {
			return !refused
		}
		select {
		case <-s.notify:
		case <-stream.Context().Done():
			return true // grpc ends the call
		}
	}
}

// watchStalls closes, once a second while bytes are booked, the connections whose booked
// message has not moved for stallAfter.
func (b *budget) watchStalls() {
	var warned time.Time
	for range time.Tick(stallCheckEvery) {
		b.mu.Lock()
		if b.booked == 0 {
			b.mu.Unlock()
			continue
		}
		conns := make([]*watchedConn, 0, len(b.conns))
		for _, conn := range b.conns {
			conns = append(conns, conn)
		}
		b.mu.Unlock()
		now := time.Now()
		for _, conn := range conns {
			if conn.stalledSince(now.Add(-b.stallAfter)) {
				if now.Sub(warned) >= stallWarnEvery { // a flood must not flood the log
					warned = now
					log.Printf("closed a connection from %s whose booked request stalled", conn.host)
				}
				conn.Close()
			}
		}
	}
}

// streamID: grpc's HTTP/2 stream id of a call. grpc does not export it; the field is read
// (never written) from the stream grpc puts in the call's context, and a grpc whose stream
// has no such field books nothing (tests/broker/test_request_memory.py fails on it).
func streamID(stream grpc.ServerStream) (uint32, bool) {
	v := reflect.ValueOf(grpc.ServerTransportStreamFromContext(stream.Context()))
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	index, ok := idFields.Load(v.Type())
	if !ok {
		field, found := v.Type().Elem().FieldByName("id")
		if !found || field.Type.Kind() != reflect.Uint32 {
			field.Index = nil
		}
		index, _ = idFields.LoadOrStore(v.Type(), field.Index)
	}
	if index.([]int) == nil {
		return 0, false
	}
	return uint32(v.Elem().FieldByIndex(index.([]int)).Uint()), true
}

// idFields: a stream type's index path to its id field (nil: it has none).
var idFields sync.Map

type watchedStream struct {
	prefix     [grpcPrefixBytes]byte
	prefixLen  int
	remaining  int64 // bytes of the current message still to come
	booked     int64
	seen       int // messages whose prefix came
	refusedAt  int // the first message refused, -1: none
	halfClosed bool
	ended      bool
	lastData   time.Time
	notify     chan struct{}
}

// watchedConn reads the frame headers of both directions as the bytes pass: the client's
// HEADERS open a stream, its DATA carry the prefixes; END_STREAM on the broker's HEADERS or
// RST_STREAM either way end one.
type watchedConn struct {
	net.Conn
	budget    *budget
	host, key string
	closeOnce sync.Once

	// the client's bytes (grpc's reader goroutine only)
	preface             int
	head                [9]byte
	headLen             int
	inPayload           bool
	frameLeft, dataLeft int
	kind, flags         byte
	padPending          bool
	stream              *watchedStream // the current DATA frame's, nil: not watched
	frameStream         uint32
	maxStream           uint32

	// the broker's bytes (grpc's writer goroutine only)
	outHead    [9]byte
	outHeadLen int
	outSkip    int

	mu      sync.Mutex
	streams map[uint32]*watchedStream
	closed  bool // no stream is watched, nothing booked, any more
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.client(p[:n])
	}
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.broker(p)
	return c.Conn.Write(p)
}

func (c *watchedConn) Close() error {
	c.closeOnce.Do(func() {
		c.budget.mu.Lock()
		if c.budget.conns[c.key] == c {
			delete(c.budget.conns, c.key)
		}
		c.budget.mu.Unlock()
		c.mu.Lock()
		c.closed = true
		ids := make([]uint32, 0, len(c.streams))
		for id := range c.streams {
			ids = append(ids, id)
		}
		c.mu.Unlock()
		for _, id := range ids {
			c.end(id)
		}
	})
	return c.Conn.Close()
}

func (c *watchedConn) client(data []byte) {
	for len(data) > 0 {
		if c.preface > 0 {
			data = skip(&c.preface, data)
			continue
		}
		if !c.inPayload {
			k := copy(c.head[c.headLen:], data)
			c.headLen += k
			data = data[k:]
			if c.headLen == len(c.head) {
				c.headLen = 0
				c.startFrame()
			}
			continue
		}
		k := min(c.frameLeft, len(data))
		if c.stream != nil {
			c.data(data[:k])
		}
		c.frameLeft -= k
		data = data[k:]
		if c.frameLeft == 0 {
			c.endFrame()
		}
	}
}

func (c *watchedConn) startFrame() {
	length := int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
	c.kind, c.flags = c.head[3], c.head[4]
	c.frameStream = binary.BigEndian.Uint32(c.head[5:9]) & 0x7FFFFFFF
	c.frameLeft, c.dataLeft, c.padPending, c.stream = length, length, false, nil
	switch c.kind {
	case h2Headers:
		if c.frameStream > c.maxStream { // a new stream (trailers of an old one are not)
			c.maxStream = c.frameStream
			c.mu.Lock()
			if !c.closed {
				c.streams[c.frameStream] = &watchedStream{refusedAt: -1, notify: make(chan struct{}, 1)}
			}
			c.mu.Unlock()
		}
	case h2Data:
		c.mu.Lock()
		c.stream = c.streams[c.frameStream]
		c.mu.Unlock()
		c.padPending = c.flags&h2Padded != 0
	}
	c.inPayload = true
	if length == 0 {
		c.endFrame()
	}
}

func (c *watchedConn) endFrame() {
	c.inPayload = false
	switch {
	case c.kind == h2RstStream:
		c.end(c.frameStream)
	case c.flags&h2EndStream != 0 && (c.kind == h2Data || c.kind == h2Headers):
		c.mu.Lock()
		if s := c.streams[c.frameStream]; s != nil {
			s.halfClosed = true
			wake(s.notify)
		}
		c.mu.Unlock()
	}
	c.stream = nil
}

// data: payload bytes of the current DATA frame, its padding skipped.
func (c *watchedConn) data(b []byte) {
	if c.padPending && len(b) > 0 {
		c.padPending = false
		c.dataLeft = max(c.dataLeft-1-int(b[0]), 0)
		b = b[1:]
	}
	b = b[:min(len(b), c.dataLeft)]
	c.dataLeft -= len(b)
	if len(b) == 0 {
		return
	}
	s := c.stream
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.ended { // the broker ended it while this frame came: nothing more to book
		return
	}
	s.lastData = time.Now()
	for len(b) > 0 {
		if s.remaining > 0 {
			k := min(s.remaining, int64(len(b)))
			s.remaining -= k
			b = b[int(k):]
			continue
		}
		k := copy(s.prefix[s.prefixLen:], b)
		s.prefixLen += k
		b = b[k:]
		if s.prefixLen == grpcPrefixBytes {
			s.prefixLen = 0
			s.remaining = int64(binary.BigEndian.Uint32(s.prefix[1:]))
			c.judge(s, s.remaining)
		}
	}
}

// judge books the message a prefix declares (conn lock held), in place of the stream's
// previous one; a message that does not fit is refused, and its call with it.
func (c *watchedConn) judge(s *watchedStream, declared int64) {
	if s.refusedAt < 0 && !c.rebook(s, declared) {
		s.refusedAt = s.seen
	}
	s.seen++
	wake(s.notify)
}

// rebook makes the stream's booking its current message's declared size; false: it does not
// fit (the booking stays as it was).
func (c *watchedConn) rebook(s *watchedStream, declared int64) bool {
	if declared > c.budget.unbookedOver {
		declared = 0 // grpc refuses it at its prefix
	}
	switch {
	case declared > s.booked:
		if !c.budget.book(c.host, declared-s.booked) {
			return false
		}
	case declared < s.booked:
		c.budget.give(c.host, s.booked-declared)
	}
	s.booked = declared
	return true
}

// end forgets a stream and gives its booking back.
func (c *watchedConn) end(id uint32) {
	c.mu.Lock()
	s := c.streams[id]
	delete(c.streams, id)
	if s != nil {
		s.ended = true
		wake(s.notify)
	}
	c.mu.Unlock()
	if s != nil && s.booked > 0 {
		c.budget.give(c.host, s.booked)
	}
}

// broker reads the frame headers of grpc's bytes for the client.
func (c *watchedConn) broker(data []byte) {
	for len(data) > 0 {
		if c.outSkip > 0 {
			data = skip(&c.outSkip, data)
			continue
		}
		k := copy(c.outHead[c.outHeadLen:], data)
		c.outHeadLen += k
		data = data[k:]
		if c.outHeadLen < len(c.outHead) {
			return
		}
		c.outHeadLen = 0
		h := c.outHead
		c.outSkip = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		id := binary.BigEndian.Uint32(h[5:9]) & 0x7FFFFFFF
		if id != 0 && (h[3] == h2RstStream || (h[3] == h2Headers && h[4]&h2EndStream != 0)) {
			c.end(id)
		}
	}
}

// stalledSince: a booked message of this connection has had no byte since limit.
func (c *watchedConn) stalledSince(limit time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.streams {
		if s.booked > 0 && (s.remaining > 0 || s.prefixLen > 0) && s.lastData.Before(limit) {
			return true
		}
	}
	return false
}

// skip drops up to *left bytes of data, counting them off.
func skip(left *int, data []byte) []byte {
	k := min(*left, len(data))
	*left -= k
	return data[k:]
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
