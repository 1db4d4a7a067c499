// rocketmq-client-go/v2 (the remoting client) against an rmq-spark broker through a name
// server: a producer sends COUNT messages synchronously (SENT <msgId> <queueId> <queueOffset>
// <body>), then a push consumer of GROUP receives them (RECV <queueId> <queueOffset> <body>)
// and shuts down once it has every one, which persists its offsets. Prints DONE at the end.
//
// Usage: remotingcheck NAMESRV TOPIC GROUP COUNT
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func fail(format string, args ...interface{}) {
	fmt.Printf("ERROR "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	rlog.SetLogLevel("error")
	namesrv, topic, group := os.Args[1], os.Args[2], os.Args[3]
	count, err := strconv.Atoi(os.Args[4])
	if err != nil {
		fail("count: %v", err)
	}
	resolver := primitive.NewPassthroughResolver([]string{namesrv})

	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(resolver), producer.WithGroupName(group+"-producer"),
		producer.WithRetry(2), producer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		fail("producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail("producer start: %v", err)
	}
	want := map[string]bool{}
	for i := 0; i < count; i++ {
		body := fmt.Sprintf("go-%d", i)
		var res *primitive.SendResult
		for attempt := 0; ; attempt++ { // the route may not be at the name server yet
			res, err = p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
			if err == nil || attempt == 30 {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil || res.Status != primitive.SendOK {
			fail("send %s: %v %v", body, err, res)
		}
		fmt.Printf("SENT %s %d %d %s\n", res.MsgID, res.MessageQueue.QueueId, res.QueueOffset, body)
		want[body] = true
	}
	_ = p.Shutdown()

	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(resolver), consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		fail("consumer: %v", err)
	}
	var mu sync.Mutex
	got := map[string]bool{}
	all := make(chan struct{})
	err = c.Subscribe(topic, consumer.MessageSelector{},
		func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				fmt.Printf("RECV %d %d %s\n", m.Queue.QueueId, m.QueueOffset, string(m.Body))
				if want[string(m.Body)] && !got[string(m.Body)] {
					got[string(m.Body)] = true
					if len(got) == len(want) {
						close(all)
					}
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		fail("subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		fail("consumer start: %v", err)
	}
	select {
	case <-all:
	case <-time.After(120 * time.Second):
		fail("received %d of %d", len(got), len(want))
	}
	// The client commits its offsets 10 s after it starts, then every 5 s, over an open
	// connection; shutdown commits too, but oneway just before closing the socket, which a
	// close with unread bytes turns into a reset that can discard them. 12 s covers one
	// periodic commit after the last message.
	time.Sleep(12 * time.Second)
	if err := c.Shutdown(); err != nil {
		fail("consumer shutdown: %v", err)
	}
	fmt.Println("DONE")
}
