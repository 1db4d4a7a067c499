// The official rocketmq-clients Go v5 client consumes from a broker: a PushConsumer whose
// listener fails the first attempt of the message with body "fail once", then a
// SimpleConsumer of another group that receives and acknowledges. Prints one line per event:
//
//	PUSH <message id> <delivery attempt> <body> <ms since start>
//	SIMPLE <message id> <delivery attempt> <body> <ms since start>
//
// and "DONE" once the push listener acknowledged `expected` messages (the failed one at
// attempt 2) and the simple consumer received `expected` messages, or "TIMEOUT".
// Usage: consumecheck <endpoint> <topic> <expected> [tls]
// With "tls" the client keeps its default EnableSsl (true: TLS, any certificate trusted).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

var start = time.Now()

func emit(kind string, mv *rmq.MessageView) string {
	body := string(mv.GetBody())
	fmt.Printf("%s %s %d %s %d\n", kind, mv.GetMessageId(), mv.GetDeliveryAttempt(),
		strings.ReplaceAll(body, " ", "_"), time.Since(start).Milliseconds())
	return body
}

func config(endpoint, group string) *rmq.Config {
	return &rmq.Config{Endpoint: endpoint, ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{}}
}

func fail(what string, err error) {
	fmt.Printf("ERROR %s: %v\n", what, err)
	os.Exit(2)
}

func main() {
	endpoint, topic := os.Args[1], os.Args[2]
	expected, _ := strconv.Atoi(os.Args[3])
	if len(os.Args) < 5 || os.Args[4] != "tls" {
		rmq.EnableSsl = false // plaintext gRPC; the broker's port serves both
	}
	all := map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}

	var mu sync.Mutex
	acked := map[string]bool{}
	listener := &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
		body := emit("PUSH", mv)
		if body == "fail once" && mv.GetDeliveryAttempt() == 1 {
			return rmq.FAILURE
		}
		mu.Lock()
		acked[mv.GetMessageId()] = true
		mu.Unlock()
		return rmq.SUCCESS
	}}
	push, err := rmq.NewPushConsumer(config(endpoint, "go-push"),
		rmq.WithPushAwaitDuration(5*time.Second),
		rmq.WithPushSubscriptionExpressions(all),
		rmq.WithPushMessageListener(listener))
	if err != nil {
		fail("push consumer", err)
	}
	if err := push.Start(); err != nil {
		fail("push start", err)
	}
	simple, err := rmq.NewSimpleConsumer(config(endpoint, "go-simple"),
		rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(all))
	if err != nil {
		fail("simple consumer", err)
	}
	if err := simple.Start(); err != nil {
		fail("simple start", err)
	}
	received := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if len(received) < expected {
			views, err := simple.Receive(context.Background(), 16, 20*time.Second)
			if err != nil && !strings.Contains(err.Error(), "MESSAGE_NOT_FOUND") {
				fmt.Printf("RECEIVE-ERROR %v\n", err)
			}
			for _, mv := range views {
				emit("SIMPLE", mv)
				if err := simple.Ack(context.Background(), mv); err != nil {
					fail("ack", err)
				}
				received[mv.GetMessageId()] = true
			}
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		mu.Lock()
		pushed := len(acked)
		mu.Unlock()
		if pushed >= expected && len(received) >= expected {
			fmt.Println("DONE")
			simple.GracefulStop()
			push.GracefulStop()
			return
		}
	}
	fmt.Println("TIMEOUT")
	os.Exit(1)
}
