// rmq-front: the broker's gRPC wire layer (HTTP/2, TLS, connection caps, keepalive) in a
// process of its own. Every call is relayed, bytes in and bytes out, to the Python broker
// that started it (validation, ACL, the store and every other rule stay there).
//
// The broker passes two descriptors: -relay-fd, a stream socket to itself (the relay), and
// -listen-fd, the bound, listening public socket. When the relay ends the front exits; on SIGTERM it stops
// accepting, lets running calls finish for -grace and exits.
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// maxCallsPerConnection bounds one connection's calls at once (grpc's default is unbounded);
// the official Java client keeps 256 sends in flight per producer on one connection.
const maxCallsPerConnection = 1024

// maxHeaderListBytes bounds a call's metadata (grpc's own servers take 8-16 KiB); it also
// keeps every key and value within the relay's 16-bit lengths and count.
const maxHeaderListBytes = 16 << 10

// gcPercent: the front's heap is small (calls in flight and their bytes) and nearly all of it
// garbage within a call, so the collector runs a quarter as often as Go's default (100) would
// have it (a fifth less CPU per relayed send). softMemoryLimit bounds what that costs in
// memory when large requests are in flight: near it the collector runs as often as it must.
// GOGC and GOMEMLIMIT in the environment still decide.
const (
	gcPercent       = 400
	softMemoryLimit = 256 << 20
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("rmq-front: ")
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(softMemoryLimit)
	}
	tlsMode := flag.String("tls-mode", "permissive", "permissive, enforcing or disabled")
	certFile := flag.String("cert", "", "PEM certificate chain (TLS modes)")
	keyFile := flag.String("key", "", "PEM private key of -cert")
	maxConns := flag.Int("max-connections", 1000, "client connections at once")
	maxPerAddress := flag.Int("max-connections-per-address", 100, "connections from one address")
	handshake := flag.Duration("handshake-timeout", 10*time.Second,
		"a connection that opened no call this long is closed")
	keepaliveTime := flag.Duration("keepalive-time", 60*time.Second, "ping a quiet client this often")
	keepaliveTimeout := flag.Duration("keepalive-timeout", 20*time.Second, "an unanswered ping closes")
	idle := flag.Duration("idle-timeout", 10*time.Minute, "a connection without calls this long closes")
	receiveLimit := flag.Int("receive-limit", 130<<20, "largest request message in bytes")
	inflightBytes := flag.Int64("inflight-bytes", 256<<20,
		"request bytes booked at once, by their declared length, before they are read")
	relayFd := flag.Int("relay-fd", 3, "descriptor of the relay socket to the broker")
	listenFd := flag.Int("listen-fd", 4, "descriptor of the listening public socket")
	grace := flag.Duration("grace", 5*time.Second, "how long running calls may finish on SIGTERM")
	flag.Parse()

	relayConn, err := net.FileConn(os.NewFile(uintptr(*relayFd), "relay"))
	if err != nil {
		log.Fatalf("descriptor %d is not the relay socket: %v", *relayFd, err)
	}
	listener, err := net.FileListener(os.NewFile(uintptr(*listenFd), "listener"))
	if err != nil {
		log.Fatalf("descriptor %d is not a listening socket: %v", *listenFd, err)
	}
	requests := newBudget(*inflightBytes, int64(*receiveLimit), *handshake)
	go requests.watchStalls()
	creds := &sniffCreds{enforcing: *tlsMode == "enforcing", budget: requests}
	if *tlsMode != "disabled" && *certFile != "" {
		pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatalf("cannot load the certificate: %v", err)
		}
		creds.config = &tls.Config{
			Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"},
			MinVersion: tls.VersionTLS12,
		}
	}
	r := newRelay(relayConn)
	caps := newCapListener(listener, *maxConns, *maxPerAddress, *handshake)
	f := &front{relay: r, caps: caps, budget: requests}
	server := grpc.NewServer(
		grpc.Creds(creds),
		grpc.UnknownServiceHandler(f.handle),
		grpc.ForceServerCodec(rawCodec{}),
		grpc.MaxRecvMsgSize(*receiveLimit),
		grpc.MaxConcurrentStreams(maxCallsPerConnection),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.ConnectionTimeout(*handshake),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: *idle, Time: *keepaliveTime, Timeout: *keepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: 10 * time.Second, PermitWithoutStream: true,
		}),
	)
	go func() {
		err := r.readLoop()
		log.Printf("the relay to the broker ended (%v): stopping", err)
		server.Stop()
		os.Exit(0)
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stopped := make(chan struct{})
		go func() { server.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(*grace):
			server.Stop()
		}
		os.Exit(0)
	}()
	if err := server.Serve(caps); err != nil {
		log.Fatalf("serving: %v", err)
	}
}
