// The official rocketmq-clients Go v5 client signs with SessionCredentials{AccessKey,
// AccessSecret}: send one message, then receive it with a SimpleConsumer of a group. Prints
//
//	SENT <message id>        RECEIVED <message id> <body>        REFUSED <error>
//
// and "DONE" (or "TIMEOUT" when nothing came in 30 s).
// Usage: authcheck <endpoint> <access key> <secret key> <topic> <group>
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

func main() {
	endpoint, ak, sk, topic, group := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	rmq.EnableSsl = false // the test broker serves plaintext gRPC
	signed := &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}
	producer, err := rmq.NewProducer(&rmq.Config{Endpoint: endpoint, Credentials: signed},
		rmq.WithTopics(topic))
	if err == nil {
		err = producer.Start()
	}
	var receipts []*rmq.SendReceipt
	if err == nil {
		receipts, err = producer.Send(context.Background(),
			&rmq.Message{Topic: topic, Body: []byte("from go")})
	}
	if err != nil {
		fmt.Printf("REFUSED %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		fmt.Println("DONE")
		return
	}
	fmt.Printf("SENT %s\n", receipts[0].MessageID)
	producer.GracefulStop()
	consumer, err := rmq.NewSimpleConsumer(
		&rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: signed},
		rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err == nil {
		err = consumer.Start()
	}
	if err != nil {
		fmt.Printf("ERROR consumer: %v\n", err)
		os.Exit(2)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		views, _ := consumer.Receive(context.Background(), 8, 20*time.Second)
		for _, mv := range views {
			fmt.Printf("RECEIVED %s %s\n", mv.GetMessageId(),
				strings.ReplaceAll(string(mv.GetBody()), " ", "_"))
			_ = consumer.Ack(context.Background(), mv)
		}
		if len(views) > 0 {
			fmt.Println("DONE")
			consumer.GracefulStop()
			return
		}
	}
	fmt.Println("TIMEOUT")
	os.Exit(1)
}
