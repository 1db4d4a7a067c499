package main

// The public port: connection caps, and TLS and plaintext on one port (the first byte of a
// TLS ClientHello record is 0x16, HTTP/2's plaintext preface starts with 'P').

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

const tlsRecordHandshake = 0x16

// capListener refuses a connection past max_connections or max_connections_per_address.
type capListener struct {
	net.Listener
	maxTotal, maxPerAddress int
	mu                      sync.Mutex
	total                   int
	perAddress              map[string]int
	warned                  bool
}

func newCapListener(l net.Listener, maxTotal, maxPerAddress int) *capListener {
	return &capListener{
		Listener: l, maxTotal: maxTotal, maxPerAddress: maxPerAddress,
		perAddress: make(map[string]int),
	}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := conn.RemoteAddr().String()
		if tcp, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			host = tcp.IP.String()
		}
		l.mu.Lock()
		full := l.total >= l.maxTotal || l.perAddress[host] >= l.maxPerAddress
		if !full {
			l.total++
			l.perAddress[host]++
		} else if !l.warned {
			l.warned = true
			log.Printf("native front: a connection from %s refused: at broker.max_connections=%d "+
				"or max_connections_per_address=%d (logged once)", host, l.maxTotal, l.maxPerAddress)
		}
		l.mu.Unlock()
		if full {
			conn.Close()
			continue
		}
		return &countedConn{Conn: conn, owner: l, host: host}, nil
	}
}

func (l *capListener) release(host string) {
	l.mu.Lock()
	l.total--
	if l.perAddress[host]--; l.perAddress[host] <= 0 {
		delete(l.perAddress, host)
	}
	l.mu.Unlock()
}

type countedConn struct {
	net.Conn
	owner *capListener
	host  string
	once  sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.owner.release(c.host) })
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
}

type plainInfo struct{ credentials.CommonAuthInfo }

func (plainInfo) AuthType() string { return "insecure" }

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
		return server, info, nil
	}
	if s.enforcing {
		return nil, nil, errors.New("plaintext refused (broker.tls_mode=enforcing)")
	}
	return conn, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (s *sniffCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the native front is a server")
}

func (s *sniffCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (s *sniffCreds) Clone() credentials.TransportCredentials { c := *s; return &c }

func (s *sniffCreds) OverrideServerName(string) error { return nil }
