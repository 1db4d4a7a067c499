package main

// One gRPC call relayed to the broker: any method, bytes in and out (the broker decodes).

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// rawCodec passes a message's bytes through: the broker parses and builds the protobufs.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	p := v.(*[]byte)
	*p = append((*p)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

type front struct {
	relay  *relay
	caps   *capListener
	budget *budget
}

// handle serves every method (grpc.UnknownServiceHandler): it opens the call on the relay,
// forwards the client's messages and hands back the broker's.
func (f *front) handle(_ any, stream grpc.ServerStream) error {
	ctx := stream.Context()
	method, _ := grpc.MethodFromServerStream(stream)
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		if _, refused := p.AuthInfo.(refusedInfo); refused {
			return status.Error(codes.Unavailable, plaintextRefused)
		}
		if p.Addr != nil {
			remote = p.Addr.String()
			f.caps.prove(remote)
		}
	}
	if !f.budget.await(stream, remote, 0) { // refused: the broker never sees the call
		return status.Error(codes.ResourceExhausted, overBudget)
	}
	var id uint32
	var queue *callQueue
	if streamsRequests(method) {
		id, queue = f.relay.open()
		defer f.relay.forget(id)
		f.relay.send(openFrame(kindOpen, id, method, stream, nil))
		go f.forwardRequests(id, stream, queue, remote)
	} else {
		var request []byte
		if err := stream.RecvMsg(&request); err != nil {
			if err == io.EOF {
				return status.Error(codes.Internal, "a unary call ended without its request")
			}
			return err // the call ended before its request came: the broker never saw it
		}
		id, queue = f.relay.open()
		defer f.relay.forget(id)
		f.relay.send(openFrame(kindCall, id, method, stream, request))
	}
	for {
		select {
		case <-queue.notify:
			for _, e := range queue.take() {
				if done, err := f.answer(id, stream, e); done {
					return err
				}
			}
		case <-ctx.Done():
			f.relay.send(frame(kindCancel, id, 0))
			return status.FromContextError(ctx.Err()).Err()
		case <-f.relay.closed:
			return status.Error(codes.Unavailable, "the broker behind this front is gone")
		}
	}
}

// answer applies one of the broker's frames to the call; done: the call ended.
func (f *front) answer(id uint32, stream grpc.ServerStream, e event) (bool, error) {
	switch e.kind {
	case kindMsg, kindReply:
		payload := e.payload
		if err := stream.SendMsg(&payload); err != nil {
			f.relay.send(frame(kindCancel, id, 0))
			return true, err
		}
		return e.kind == kindReply, nil
	case kindClose:
		code, details, trailer := parseClose(e.payload)
		if len(trailer) > 0 {
			stream.SetTrailer(trailer)
		}
		if code == 0 {
			return true, nil
		}
		return true, status.Error(codes.Code(code), details)
	}
	return false, nil
}

// streamsRequests: whether a method's client may send more than one request
// (MessagingService's Telemetry). Any other call is relayed in one CALL frame once its one
// request came; a second request on it is not read (as grpc-go's own unary handlers do).
func streamsRequests(method string) bool { return method == telemetryMethod }

const telemetryMethod = "/apache.rocketmq.v2.MessagingService/Telemetry"

// forwardRequests relays the client's messages, each once the budget has booked it (the
// first one before the call was opened); a refused one ends the call RESOURCE_EXHAUSTED.
func (f *front) forwardRequests(id uint32, stream grpc.ServerStream, queue *callQueue, remote string) {
	for k := 0; ; k++ {
		if k > 0 && !f.budget.await(stream, remote, k) {
			f.relay.send(frame(kindCancel, id, 0))
			queue.push(event{kind: kindClose, payload: closePayload(codes.ResourceExhausted, overBudget)})
			return
		}
		var raw []byte
		err := stream.RecvMsg(&raw)
		if err == io.EOF {
			f.relay.send(frame(kindHalfClose, id, 0))
			return
		}
		if err != nil {
			return // the call ended: the handler tells the broker
		}
		buf := frame(kindMsg, id, len(raw))
		f.relay.send(append(buf, raw...))
	}
}

// openFrame: u16 method, u16 peer, i64 deadline in us (-1: none), u16 count, then per
// metadata value u16 key, u32 value. A CALL frame (kind kindCall) has u32 request size and
// the request before that.
func openFrame(kind byte, id uint32, method string, stream grpc.ServerStream, request []byte) []byte {
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	peerText := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		peerText = peerName(p.Addr)
	}
	deadlineUs := int64(-1)
	if deadline, ok := ctx.Deadline(); ok {
		deadlineUs = max(int64(time.Until(deadline)/time.Microsecond), 0)
	}
	size := 2 + len(method) + 2 + len(peerText) + 8 + 2
	count := 0
	for key, values := range md {
		for _, value := range values {
			size += 2 + len(key) + 4 + len(value)
			count++
		}
	}
	if kind == kindCall {
		size += 4 + len(request)
	}
	buf := frame(kind, id, size)
	if kind == kindCall {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(request)))
		buf = append(buf, request...)
	}
	buf = appendString16(buf, method)
	buf = appendString16(buf, peerText)
	buf = binary.BigEndian.AppendUint64(buf, uint64(deadlineUs))
	buf = binary.BigEndian.AppendUint16(buf, uint16(count))
	for key, values := range md {
		for _, value := range values {
			buf = appendString16(buf, key)
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(value)))
			buf = append(buf, value...)
		}
	}
	return buf
}

func appendString16(buf []byte, text string) []byte {
	buf = binary.BigEndian.AppendUint16(buf, uint16(len(text)))
	return append(buf, text...)
}

// peerName is grpc's own spelling of a peer: ipv4:1.2.3.4:5 or ipv6:[::1]:5.
func peerName(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return "ipv4:" + ip4.String() + ":" + strconv.Itoa(tcp.Port)
	}
	return "ipv6:[" + tcp.IP.String() + "]:" + strconv.Itoa(tcp.Port)
}

// closePayload is a close frame's payload (see parseClose), without trailers.
func closePayload(code codes.Code, details string) []byte {
	buf := binary.BigEndian.AppendUint32(nil, uint32(code))
	buf = appendString16(buf, details)
	return binary.BigEndian.AppendUint16(buf, 0)
}

// parseClose: u32 code, u16 details, u16 count, then per trailer u16 key, u32 value.
func parseClose(p []byte) (uint32, string, metadata.MD) {
	if len(p) < 8 {
		return uint32(codes.Internal), "a malformed close from the broker", nil
	}
	code := binary.BigEndian.Uint32(p[0:4])
	n := int(binary.BigEndian.Uint16(p[4:6]))
	if len(p) < 6+n+2 {
		return uint32(codes.Internal), "a malformed close from the broker", nil
	}
	details := string(p[6 : 6+n])
	rest := p[6+n:]
	count := int(binary.BigEndian.Uint16(rest[0:2]))
	rest = rest[2:]
	var trailer metadata.MD
	for i := 0; i < count && len(rest) >= 2; i++ {
		klen := int(binary.BigEndian.Uint16(rest[0:2]))
		if len(rest) < 2+klen+4 {
			break
		}
		key := strings.ToLower(string(rest[2 : 2+klen]))
		vlen := int(binary.BigEndian.Uint32(rest[2+klen : 6+klen]))
		if len(rest) < 6+klen+vlen {
			break
		}
		if trailer == nil {
			trailer = metadata.MD{}
		}
		trailer.Append(key, string(rest[6+klen:6+klen+vlen]))
		rest = rest[6+klen+vlen:]
	}
	return code, details, trailer
}
