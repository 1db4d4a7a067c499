package main

import (
	"encoding/binary"
	"net"
	"testing"
	"time"
)

func h2frame(kind, flags byte, stream uint32, payload []byte) []byte {
	buf := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), kind, flags}
	buf = binary.BigEndian.AppendUint32(buf, stream)
	return append(buf, payload...)
}

func grpcMessage(declared uint32, sent int) []byte {
	buf := binary.BigEndian.AppendUint32([]byte{0}, declared)
	return append(buf, make([]byte, sent)...)
}

func newWatched(t testing.TB, limit, receiveLimit int64) (*budget, *watchedConn) {
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	b := newBudget(limit, receiveLimit, time.Second)
	return b, b.watch(server).(*watchedConn)
}

// The client's bytes of two calls: stream 1 a padded message of 1,000 bytes in two DATA
// frames, stream 3 the first 100 bytes of a message declaring 5,000.
func twoCalls() []byte {
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out = append(out, h2frame(0x4, 0, 0, nil)...)
	out = append(out, h2frame(h2Headers, 0x4, 1, []byte{0x83, 0x86})...)
	first := grpcMessage(1000, 1000)
	padded := append([]byte{3}, first[:600]...)
	out = append(out, h2frame(h2Data, h2Padded, 1, append(padded, 0, 0, 0))...)
	out = append(out, h2frame(h2Data, h2EndStream, 1, first[600:])...)
	out = append(out, h2frame(h2Headers, 0x4, 3, []byte{0x83, 0x86})...)
	return append(out, h2frame(h2Data, 0, 3, grpcMessage(5000, 100))...)
}

func TestPrefixesAreBookedWhateverTheReadBoundaries(t *testing.T) {
	stream := twoCalls()
	for size := 1; size <= len(stream); size++ {
		b, c := newWatched(t, 1<<20, 1<<20)
		for at := 0; at < len(stream); at += size {
			c.client(stream[at:min(at+size, len(stream))])
		}
		if b.booked != 6000 {
			t.Fatalf("reads of %d bytes: %d booked, want 6000", size, b.booked)
		}
		if s := c.streams[1]; s == nil || !s.halfClosed || s.seen != 1 || s.remaining != 0 || s.prefixLen != 0 {
			t.Fatalf("reads of %d bytes: stream 1 is %+v", size, s)
		}
		c.broker(h2frame(h2Headers, h2EndStream|0x4, 1, []byte{0x88})) // the broker's trailers
		if b.booked != 5000 {
			t.Fatalf("after stream 1 ended: %d booked, want 5000", b.booked)
		}
		c.client(h2frame(h2RstStream, 0, 3, []byte{0, 0, 0, 8})) // the client cancels
		if b.booked != 0 || len(b.byHost) != 0 {
			t.Fatalf("after stream 3 was reset: %d booked, %v", b.booked, b.byHost)
		}
	}
}

func TestOneAddressBooksAtMostItsShare(t *testing.T) {
	b, c := newWatched(t, 10_000, 4_000) // share: half the budget
	c.client([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	for _, id := range []uint32{1, 3} {
		c.client(h2frame(h2Headers, 0x4, id, nil))
		c.client(h2frame(h2Data, 0, id, grpcMessage(3000, 3000)))
	}
	if c.streams[1].refusedAt != -1 || c.streams[3].refusedAt != 0 || b.booked != 3000 {
		t.Fatalf("booked %d; refusals %d, %d", b.booked, c.streams[1].refusedAt, c.streams[3].refusedAt)
	}
	c.client(h2frame(h2Headers, 0x4, 5, nil)) // over the receive limit: grpc refuses it
	c.client(h2frame(h2Data, 0, 5, grpcMessage(9000, 10)))
	if c.streams[5].refusedAt != -1 || b.booked != 3000 {
		t.Fatalf("an oversized message was booked: %d", b.booked)
	}
	next := h2frame(h2Data, 0, 1, grpcMessage(2000, 10)) // stream 1's next message comes ...
	c.client(next[:9])
	c.broker(h2frame(h2RstStream, 0, 1, []byte{0, 0, 0, 0})) // ... as the broker ends it
	c.client(next[9:])
	c.Close()
	c.client(h2frame(h2Headers, 0x4, 7, nil)) // what grpc had read before the close
	c.client(h2frame(h2Data, 0, 7, grpcMessage(1000, 10)))
	if b.booked != 0 {
		t.Fatalf("a closed connection kept %d bytes booked", b.booked)
	}
}

// BenchmarkUnaryCall: what the watch costs one unary call (its HEADERS, one DATA frame of a
// 100-byte message, the broker's trailers).
func BenchmarkUnaryCall(bench *testing.B) {
	b, c := newWatched(bench, 1<<30, 1<<20)
	c.client([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	headers := h2frame(h2Headers, 0x4, 0, make([]byte, 120))
	data := h2frame(h2Data, h2EndStream, 0, grpcMessage(100, 100))
	trailers := h2frame(h2Headers, h2EndStream|0x4, 0, make([]byte, 30))
	id := uint32(1)
	for bench.Loop() {
		binary.BigEndian.PutUint32(headers[5:], id)
		binary.BigEndian.PutUint32(data[5:], id)
		binary.BigEndian.PutUint32(trailers[5:], id)
		c.client(headers)
		c.client(data)
		c.broker(trailers)
		id += 2
	}
	if b.booked != 0 {
		bench.Fatalf("%d bytes left booked", b.booked)
	}
}
