package main

// The public port: connection caps, and TLS and plaintext on one port (the first byte of a
// TLS ClientHello record is 0x16, HTTP/2's plaintext preface starts with 'P').

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"
)

const tlsRecordHandshake = 0x16

// capListener holds the connection caps. At max_connections or max_connections_per_address
// the oldest connection that has not opened a call yet ("unproven") is closed to make room,
// else the new one; a connection still unproven after the handshake timeout is closed, so a
// crowd of idle sockets cannot keep clients out.
type capListener struct {
	net.Listener
	maxTotal, maxPerAddress int
	handshake               time.Duration
	mu                      sync.Mutex
	perAddress              map[string]int
	live                    map[string]*countedConn // by remote address
	unproven                *list.List              // of *countedConn, oldest first
	warned                  time.Time               // the last cap warning
}

func newCapListener(l net.Listener, maxTotal, maxPerAddress int, handshake time.Duration) *capListener {
	return &capListener{
		Listener: l, maxTotal: maxTotal, maxPerAddress: maxPerAddress, handshake: handshake,
		perAddress: make(map[string]int), live: make(map[string]*countedConn),
		unproven: list.New(),
	}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				l.mu.Lock()
				l.warnf("accepting a connection: %v (the open-files limit); retrying", err)
				l.mu.Unlock()
			}
			return nil, err // grpc retries a temporary error, backing off
		}
		if conn := l.admit(raw); conn != nil {
			return conn, nil
		}
	}
}

// admit counts raw in, making room if it must; nil: refused (closed).
func (l *capListener) admit(raw net.Conn) net.Conn {
	host := raw.RemoteAddr().String()
	if tcp, ok := raw.RemoteAddr().(*net.TCPAddr); ok {
		host = tcp.IP.String()
	}
	l.mu.Lock()
	var victim *countedConn
	if len(l.live) >= l.maxTotal || l.perAddress[host] >= l.maxPerAddress {
		victim = l.oldestUnproven(host, len(l.live) >= l.maxTotal)
		if victim == nil {
			l.warn("a connection from %s refused: at broker.max_connections=%d or "+
				"max_connections_per_address=%d, every connection busy", host)
			l.mu.Unlock()
			raw.Close()
			return nil
		}
		l.warn("an idle connection closed to admit one from %s: at broker.max_connections=%d "+
			"or max_connections_per_address=%d", host)
		l.forget(victim)
	}
	conn := &countedConn{Conn: raw, owner: l, host: host, key: raw.RemoteAddr().String()}
	conn.element = l.unproven.PushBack(conn)
	l.live[conn.key] = conn
	l.perAddress[host]++
	l.mu.Unlock()
	if victim != nil {
		victim.Conn.Close()
	}
	conn.timer = time.AfterFunc(l.handshake, func() {
		if !conn.proven.Load() {
			conn.Close()
		}
	})
	return conn
}

// oldestUnproven: the connection to close for a new one from host (lock held); any
// address's when the total cap is reached, else host's own.
func (l *capListener) oldestUnproven(host string, anyAddress bool) *countedConn {
	for e := l.unproven.Front(); e != nil; e = e.Next() {
		conn := e.Value.(*countedConn)
		if anyAddress || conn.host == host {
			return conn
		}
	}
	return nil
}

// warn logs a cap's line for host: see warnf.
func (l *capListener) warn(format string, host string) {
	l.warnf(format, host, l.maxTotal, l.maxPerAddress)
}

// warnf logs at most one line per 10 s (lock held): a flood must not flood the log.
func (l *capListener) warnf(format string, args ...any) {
	if now := time.Now(); now.Sub(l.warned) >= 10*time.Second {
		l.warned = now
		log.Printf(format, args...)
	}
}

// prove marks the connection from remote as having opened a call.
func (l *capListener) prove(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	conn := l.live[remote]
	if conn != nil && conn.element != nil {
		l.unproven.Remove(conn.element)
		conn.element = nil
		conn.proven.Store(true)
	}
}

// forget uncounts conn (lock held); false: it was not counted any more.
func (l *capListener) forget(conn *countedConn) bool {
	if l.live[conn.key] != conn {
		return false
	}
	delete(l.live, conn.key)
	if conn.element != nil {
		l.unproven.Remove(conn.element)
		conn.element = nil
	}
	if l.perAddress[conn.host]--; l.perAddress[conn.host] <= 0 {
		delete(l.perAddress, conn.host)
	}
	return true
}

type countedConn struct {
	net.Conn
	owner   *capListener
	host    string
	key     string
	element *list.Element // in owner.unproven while unproven (owner's lock)
	proven  atomic.Bool
	timer   *time.Timer
}

func (c *countedConn) Close() error {
	c.owner.mu.Lock()
	c.owner.forget(c)
	c.owner.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	return c.Conn.Close()
}

// prefixConn gives back the byte read to tell TLS from plaintext.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// sniffCreds: TLS when the client starts a TLS handshake, plaintext otherwise (unless
// enforcing). grpc bounds the handshake by its ConnectionTimeout.
type sniffCreds struct {
	config    *tls.Config // nil: plaintext only
	enforcing bool
	budget    *budget // books each request before grpc reads it (requests.go)
}

type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

// refusedInfo marks a plaintext connection to an enforcing port: its calls are answered
// with plaintextRefused, none reaches the broker, and it never counts as a connection that
// opened a call (the caps may close it for another, the handshake timeout still applies).
type refusedInfo struct{ credentials.CommonAuthInfo }

func (refusedInfo) AuthType() string { return "plaintext-refused" }

// plaintextRefused is what the default front answers a plaintext call under enforcing.
const plaintextRefused = "rmq-spark: this port requires TLS (broker.tls_mode=enforcing)"

func (s *sniffCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	first := make([]byte, 1)
	if _, err := io.ReadFull(raw, first); err != nil {
		return nil, nil, err
	}
	conn := &prefixConn{Conn: raw, prefix: first}
	if first[0] == tlsRecordHandshake && s.config != nil {
		server := tls.Server(conn, s.config)
		if err := server.Handshake(); err != nil {
			return nil, nil, err
		}
		info := credentials.TLSInfo{
			State:          server.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		}
		return s.budget.watch(server), info, nil
	}
	if s.enforcing {
		return conn, refusedInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
	}
	return s.budget.watch(conn), plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (s *sniffCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the native front is a server")
}

func (s *sniffCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (s *sniffCreds) Clone() credentials.TransportCredentials { c := *s; return &c }

func (s *sniffCreds) OverrideServerName(string) error { return nil }
