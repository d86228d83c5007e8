// Command pulsar_go_client drives the official Pulsar Go client against the broker for
// the test suite, so that unmodified Go applications are proven to work. Every line it
// prints on stdout is one JSON object with an "event" field; the client's own log goes
// to stderr.
//
//	produce URL TOPIC COUNT [name=N] [batching=none|default|key] [chunking=true]
//	        [size=BYTES] [keys=K] [first=F] [sendTimeoutMs=MS] [maxMessages=M]
//	        [delayMs=D] [schema=bytes] [TLS and token options]
//	    sends COUNT messages with sequence ids F..F+COUNT-1 (SendAsync, then Flush, so
//	    that a run of ids can share a batch): "m-<id>", or BYTES bytes of payload(id);
//	    with keys=K the key "k<id % K>". Prints {"event":"producer","lastSequenceId":N},
//	    then in id order {"event":"sent","sequenceId":..,"messageId":".."} or
//	    {"event":"failed","sequenceId":..,"error":".."}. schema=bytes: the producer
//	    declares the client's BytesSchema (type NONE on the wire) and sends values.
//	consume URL TOPIC SUBSCRIPTION COUNT [timeoutMs=MS] [type=Exclusive|Shared|
//	        Failover|Key_Shared] [schema=bytes] [TLS and token options]
//	    receives up to COUNT messages from the earliest position, acknowledging each;
//	    prints {"event":"received",...} per message and {"event":"timeout","after":N}
//	    when none came for timeoutMs. schema=bytes: the consumer declares BytesSchema and
//	    decodes each message with GetSchemaValue (which asks the broker for the schema
//	    version the message carries); "value" is then the decoded value and
//	    "schemaVersion" the version as hex.
//	terminate URL TOPIC SUBSCRIPTION ADMIN_URL [sendTimeoutMs=MS] [timeoutMs=MS]
//	        [TLS and token options]
//	    subscribes (and never acknowledges), then sends 1 KiB messages one at a time
//	    (Send, then 1 ms) and once one was stored terminates the topic through
//	    ADMIN_URL (POST .../terminate, no credentials); prints
//	    {"event":"terminated","status":N}, then for the first send that fails
//	    {"event":"sendFailed","topicTerminated":B,"producerClosed":B,"error":"..",
//	    "afterMs":N} (B: errors.Is ErrTopicTerminated / ErrProducerClosed, afterMs since
//	    the termination), or {"event":"noError"} when none failed within timeoutMs.
//
//	txn URL TOPIC SUBSCRIPTION COUNT [timeoutMs=MS] [TLS and token options]
//	    with transactions enabled: subscribes (Exclusive, from the earliest), sends
//	    COUNT messages "c-<i>" in a transaction and COUNT messages "a-<i>" in another,
//	    checks for timeoutMs that none is received before the first is committed, then
//	    commits the first and aborts the second; receives what comes (until timeoutMs
//	    passes with nothing) and acknowledges it in a third transaction, committed; then
//	    subscribes again and counts what is delivered again within timeoutMs. Prints
//	    {"event":"txn","name":"commit"|"abort"|"ack","most":M,"least":L} per transaction,
//	    {"event":"sent","txn":"commit"|"abort","value":"..","messageId":".."} per send,
//	    {"event":"visibleBeforeCommit","count":N}, {"event":"ended","txn":..} per commit
//	    or abort, {"event":"received",...} per message received and
//	    {"event":"redelivered","count":N}.
//
// All end with {"event":"done"}. TLS and token options: tlsTrustCerts=PATH,
// tlsAllowInsecure=true, tlsValidateHostname=true, token=JWT; listenerName=NAME names
// the broker's advertised listener for lookups.
//
// A message id is "ledger:entry:partition:batchIndex" (batch index 0 for a message sent
// alone), or the client's "ledger:entry:partition;ledger:entry:partition" (first and last
// chunk) for a chunked message. "lastSequenceId" is what LastSequenceID() says when the
// producer was created: -1, since the Go client does not take it from the broker's answer.
// The Go client exposes neither a received message's sequence id nor whether it had a
// key: "sequenceId" is always -1 and an empty key is printed as null.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

const valueLimit = 256

var out = json.NewEncoder(os.Stdout)

func emit(event map[string]any) {
	if err := out.Encode(event); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

// payload is "m-<index>", or exactly size bytes: "m-<index> " then letters from index on.
func payload(index int64, size int) []byte {
	head := []byte("m-" + strconv.FormatInt(index, 10))
	if size <= len(head) {
		return head
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + (index+int64(i))%26)
	}
	copy(body, head)
	body[len(head)] = ' '
	return body
}

func formatID(id pulsar.MessageID) string {
	if text := id.String(); strings.Contains(text, ";") {
		return text
	}
	return fmt.Sprintf("%d:%d:%d:%d", id.LedgerID(), id.EntryID(), id.PartitionIdx(), id.BatchIdx())
}

type options map[string]string

func (o options) text(name, fallback string) string {
	if value, ok := o[name]; ok {
		return value
	}
	return fallback
}

func (o options) number(name string, fallback int64) int64 {
	value, err := strconv.ParseInt(o.text(name, strconv.FormatInt(fallback, 10)), 10, 64)
	if err != nil {
		fail(fmt.Errorf("option %s: %w", name, err))
	}
	return value
}

func (o options) flag(name string) bool {
	return o.text(name, "false") == "true"
}

func main() {
	if len(os.Args) < 5 {
		fail(fmt.Errorf("usage: produce URL TOPIC COUNT ... | consume URL TOPIC SUBSCRIPTION COUNT ... | " +
			"txn URL TOPIC SUBSCRIPTION COUNT ... | terminate URL TOPIC SUBSCRIPTION ADMIN_URL ..."))
	}
	opts := options{}
	for _, arg := range os.Args[2:] {
		if name, value, ok := strings.Cut(arg, "="); ok && name != "" {
			opts[name] = value
		}
	}
	clientOptions := pulsar.ClientOptions{
		URL:                        os.Args[2],
		OperationTimeout:           30 * time.Second,
		ConnectionTimeout:          10 * time.Second,
		TLSTrustCertsFilePath:      opts.text("tlsTrustCerts", ""),
		TLSAllowInsecureConnection: opts.flag("tlsAllowInsecure"),
		TLSValidateHostname:        opts.flag("tlsValidateHostname"),
		ListenerName:               opts.text("listenerName", ""),
		EnableTransaction:          os.Args[1] == "txn",
		Logger: pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(os.Stderr,
			&slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if token, ok := opts["token"]; ok {
		clientOptions.Authentication = pulsar.NewAuthenticationToken(token)
	}
	client, err := pulsar.NewClient(clientOptions)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "produce":
		count, err := strconv.Atoi(os.Args[4])
		if err != nil {
			fail(err)
		}
		produce(client, os.Args[3], count, opts)
	case "consume":
		if len(os.Args) < 6 {
			fail(fmt.Errorf("consume URL TOPIC SUBSCRIPTION COUNT"))
		}
		count, err := strconv.Atoi(os.Args[5])
		if err != nil {
			fail(err)
		}
		consume(client, os.Args[3], os.Args[4], count, opts)
	case "txn":
		if len(os.Args) < 6 {
			fail(fmt.Errorf("txn URL TOPIC SUBSCRIPTION COUNT"))
		}
		count, err := strconv.Atoi(os.Args[5])
		if err != nil {
			fail(err)
		}
		transactions(client, os.Args[3], os.Args[4], count, opts)
	case "terminate":
		if len(os.Args) < 6 {
			fail(fmt.Errorf("terminate URL TOPIC SUBSCRIPTION ADMIN_URL"))
		}
		terminateWhileSending(client, os.Args[3], os.Args[4], os.Args[5], opts)
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
	client.Close()
	emit(map[string]any{"event": "done"})
	os.Exit(0)
}

func producerOptions(topic string, opts options) pulsar.ProducerOptions {
	result := pulsar.ProducerOptions{
		Topic:                   topic,
		Name:                    opts.text("name", ""),
		SendTimeout:             -1,
		BatchingMaxPublishDelay: time.Duration(opts.number("delayMs", 50)) * time.Millisecond,
		BatchingMaxMessages:     uint(opts.number("maxMessages", 1000)),
	}
	if ms := opts.number("sendTimeoutMs", 0); ms > 0 {
		result.SendTimeout = time.Duration(ms) * time.Millisecond
	}
	switch batching := opts.text("batching", "none"); batching {
	case "none":
		result.DisableBatching = true
	case "default":
	case "key":
		result.BatcherBuilderType = pulsar.KeyBasedBatchBuilder
	default:
		fail(fmt.Errorf("batching %q", batching))
	}
	if opts.flag("chunking") {
		result.DisableBatching = true
		result.EnableChunking = true
	}
	if bytesSchema(opts) {
		result.Schema = pulsar.NewBytesSchema(nil)
	}
	return result
}

// bytesSchema: schema=bytes, the client's BytesSchema declared (none by default).
func bytesSchema(opts options) bool {
	switch schema := opts.text("schema", "none"); schema {
	case "none":
		return false
	case "bytes":
		return true
	default:
		fail(fmt.Errorf("schema %q", schema))
		return false
	}
}

type outcome struct {
	id  pulsar.MessageID
	err error
}

func produce(client pulsar.Client, topic string, count int, opts options) {
	producer, err := client.CreateProducer(producerOptions(topic, opts))
	if err != nil {
		fail(err)
	}
	defer producer.Close()
	emit(map[string]any{"event": "producer", "lastSequenceId": producer.LastSequenceID()})
	first, size, keys := opts.number("first", 0), int(opts.number("size", 0)), opts.number("keys", 0)
	outcomes := make([]outcome, count)
	var pending sync.WaitGroup
	for n := range count {
		sequenceID := first + int64(n)
		message := &pulsar.ProducerMessage{Payload: payload(sequenceID, size), SequenceID: &sequenceID}
		if bytesSchema(opts) {
			message.Payload, message.Value = nil, payload(sequenceID, size)
		}
		if keys > 0 {
			message.Key = "k" + strconv.FormatInt(sequenceID%keys, 10)
		}
		pending.Add(1)
		producer.SendAsync(context.Background(), message,
			func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				outcomes[n] = outcome{id, err}
				pending.Done()
			})
	}
	if err := producer.FlushWithCtx(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "flush:", err)
	}
	pending.Wait()
	for n, result := range outcomes {
		sequenceID := first + int64(n)
		if result.err != nil {
			emit(map[string]any{"event": "failed", "sequenceId": sequenceID, "error": result.err.Error()})
		} else {
			emit(map[string]any{"event": "sent", "sequenceId": sequenceID, "messageId": formatID(result.id)})
		}
	}
}

var subscriptionTypes = map[string]pulsar.SubscriptionType{
	"Exclusive":  pulsar.Exclusive,
	"Shared":     pulsar.Shared,
	"Failover":   pulsar.Failover,
	"Key_Shared": pulsar.KeyShared,
}

func receivedEvent(message pulsar.Message) map[string]any {
	data := message.Payload()
	digest := sha256.Sum256(data)
	event := map[string]any{
		"event":        "received",
		"key":          nil,
		"size":         len(data),
		"sha256":       hex.EncodeToString(digest[:]),
		"sequenceId":   -1,
		"producerName": message.ProducerName(),
		"messageId":    formatID(message.ID()),
	}
	if key := message.Key(); key != "" {
		event["key"] = key
	}
	if len(data) <= valueLimit {
		event["value"] = string(data)
	}
	return event
}

func consume(client pulsar.Client, topic, subscription string, count int, opts options) {
	kind, ok := subscriptionTypes[opts.text("type", "Exclusive")]
	if !ok {
		fail(fmt.Errorf("subscription type %q", opts["type"]))
	}
	consumerOptions := pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            subscription,
		Type:                        kind,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	}
	decode := bytesSchema(opts)
	if decode {
		consumerOptions.Schema = pulsar.NewBytesSchema(nil)
	}
	consumer, err := client.Subscribe(consumerOptions)
	if err != nil {
		fail(err)
	}
	defer consumer.Close()
	wait := time.Duration(opts.number("timeoutMs", 30000)) * time.Millisecond
	for n := range count {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		message, err := consumer.Receive(ctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			emit(map[string]any{"event": "timeout", "after": n})
			return
		}
		event := receivedEvent(message)
		if decode {
			var value []byte
			if err := message.GetSchemaValue(&value); err != nil {
				fail(fmt.Errorf("decoding %s: %w", formatID(message.ID()), err))
			}
			event["value"] = string(value)
			event["schemaVersion"] = hex.EncodeToString(message.SchemaVersion())
		}
		emit(event)
		if err := consumer.Ack(message); err != nil {
			fail(err)
		}
	}
}

func subscribeExclusive(client pulsar.Client, topic, subscription string) pulsar.Consumer {
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            subscription,
		Type:                        pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		fail(err)
	}
	return consumer
}

// receiveFor is every message that arrives until none came for wait.
func receiveFor(consumer pulsar.Consumer, wait time.Duration) []pulsar.Message {
	var messages []pulsar.Message
	for {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		message, err := consumer.Receive(ctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return messages
		}
		messages = append(messages, message)
	}
}

func newTransaction(client pulsar.Client, name string) pulsar.Transaction {
	txn, err := client.NewTransaction(time.Minute)
	if err != nil {
		fail(fmt.Errorf("new transaction (%s): %w", name, err))
	}
	id := txn.GetTxnID()
	emit(map[string]any{"event": "txn", "name": name, "most": id.MostSigBits, "least": id.LeastSigBits})
	return txn
}

func endTransaction(txn pulsar.Transaction, name string, commit bool) {
	end := txn.Abort
	if commit {
		end = txn.Commit
	}
	if err := end(context.Background()); err != nil {
		fail(fmt.Errorf("ending the transaction %s: %w", name, err))
	}
	emit(map[string]any{"event": "ended", "txn": name})
}

func sendInTransaction(producer pulsar.Producer, txn pulsar.Transaction, name, prefix string, count int) {
	for n := range count {
		value := prefix + strconv.Itoa(n)
		id, err := producer.Send(context.Background(),
			&pulsar.ProducerMessage{Payload: []byte(value), Transaction: txn})
		if err != nil {
			fail(fmt.Errorf("send %s in the transaction %s: %w", value, name, err))
		}
		emit(map[string]any{"event": "sent", "txn": name, "value": value, "messageId": formatID(id)})
	}
}

func transactions(client pulsar.Client, topic, subscription string, count int, opts options) {
	wait := time.Duration(opts.number("timeoutMs", 2000)) * time.Millisecond
	consumer := subscribeExclusive(client, topic, subscription)
	producer, err := client.CreateProducer(producerOptions(topic, opts))
	if err != nil {
		fail(err)
	}
	defer producer.Close()
	committed := newTransaction(client, "commit")
	aborted := newTransaction(client, "abort")
	sendInTransaction(producer, committed, "commit", "c-", count)
	sendInTransaction(producer, aborted, "abort", "a-", count)
	emit(map[string]any{"event": "visibleBeforeCommit", "count": len(receiveFor(consumer, wait))})
	endTransaction(committed, "commit", true)
	endTransaction(aborted, "abort", false)
	acks := newTransaction(client, "ack")
	for _, message := range receiveFor(consumer, wait) {
		emit(receivedEvent(message))
		if err := consumer.AckWithTxn(message, acks); err != nil {
			fail(fmt.Errorf("acknowledging %s in a transaction: %w", formatID(message.ID()), err))
		}
	}
	endTransaction(acks, "ack", true)
	consumer.Close()
	again := subscribeExclusive(client, topic, subscription)
	defer again.Close()
	emit(map[string]any{"event": "redelivered", "count": len(receiveFor(again, wait))})
}

// terminateWhileSending is the Go client's own termination check: a producer sending
// when its topic is terminated must fail with ErrTopicTerminated (or ErrProducerClosed),
// not time out.
func terminateWhileSending(client pulsar.Client, topic, subscription, adminURL string, opts options) {
	consumer := subscribeExclusive(client, topic, subscription)
	defer consumer.Close()
	if _, ok := opts["sendTimeoutMs"]; !ok {
		opts["sendTimeoutMs"] = "2000"
	}
	producer, err := client.CreateProducer(producerOptions(topic, opts))
	if err != nil {
		fail(err)
	}
	defer producer.Close()
	stored, failed := make(chan struct{}, 1), make(chan error, 1)
	go func() {
		for {
			_, err := producer.Send(context.Background(), &pulsar.ProducerMessage{Payload: make([]byte, 1024)})
			if err != nil {
				failed <- err
				return
			}
			select {
			case stored <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		}
	}()
	select {
	case <-stored:
	case err := <-failed:
		fail(fmt.Errorf("sending before the termination: %w", err))
	}
	path := strings.TrimPrefix(topic, "persistent://")
	response, err := http.Post(strings.TrimSuffix(adminURL, "/")+"/admin/v2/persistent/"+path+"/terminate",
		"application/json", nil)
	if err != nil {
		fail(fmt.Errorf("terminating %s: %w", topic, err))
	}
	_ = response.Body.Close()
	terminatedAt := time.Now()
	emit(map[string]any{"event": "terminated", "status": response.StatusCode})
	select {
	case err := <-failed:
		emit(map[string]any{
			"event":           "sendFailed",
			"topicTerminated": errors.Is(err, pulsar.ErrTopicTerminated),
			"producerClosed":  errors.Is(err, pulsar.ErrProducerClosed),
			"error":           err.Error(),
			"afterMs":         time.Since(terminatedAt).Milliseconds(),
		})
	case <-time.After(time.Duration(opts.number("timeoutMs", 10000)) * time.Millisecond):
		emit(map[string]any{"event": "noError"})
	}
}
