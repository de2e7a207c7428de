package workload

import "strconv"

// streamKind says which stream an event belongs to.
type streamKind uint8

const (
	kindTx streamKind = iota
	kindLogin
	kindDevice
)

// event is one record before it is written. Identifiers are kept as numbers
// and formatted only when written, so that generating an event allocates nothing.
type event struct {
	ts      int64
	arrival int64  // for a held-back event: the time at which it is written
	seq     uint64 // order of holding back, to break arrival ties
	user    int64  // user number, from 1
	tx      int64  // transaction number, from 1
	cents   int64  // amount
	devUser int64  // device number: the owner's user number, or random for attackers
	ip      uint32
	merch   int32
	kind    streamKind
	country uint8 // transactions: where the IP is
	home    uint8 // transactions: the user's home, which sets the currency
	card    byte  // card letter
	devTag  byte  // device letter: a, b for the user's own, x for an attacker's
	// flag is FAILED for a login, new_device for a device event.
	flag bool
	// planted is the index of the planted case the event belongs to, or -1.
	planted int32
	// mustFlag marks a planted transaction that a good ruleset must flag.
	mustFlag bool
}

// streamNames are the streams' names, by kind: the "stream" of a line, and
// over Kafka the topic of a record (Streams).
var streamNames = [...]string{kindTx: "transactions", kindLogin: "logins", kindDevice: "devices"}

// Streams returns the workload's stream names, in a new slice: transactions,
// logins, devices. Over Kafka each is the topic of its records (Produce), the
// topic a ruleset reads a stream from unless it names another
// (examples/fraud.yaml names these).
func Streams() []string { return append([]string(nil), streamNames[:]...) }

// appendRecord appends e as one NDJSON line, newline included. With more
// than one partition the line carries the user's partition, as a Kafka
// producer keyed by user_id would choose it.
func appendRecord(b []byte, e *event, partitions int) []byte {
	b = append(b, `{"stream":"`...)
	b = append(b, streamNames[e.kind]...)
	b = append(b, `","value":`...)
	b = appendValue(b, e)
	if partitions > 1 {
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(partitionOf(e.user, partitions)), 10)
	}
	return append(b, "}\n"...)
}

// appendValue appends e's value, the JSON object of its stream's fields: the
// "value" of a line, and the value of a Kafka record.
func appendValue(b []byte, e *event) []byte {
	switch e.kind {
	case kindTx:
		b = append(b, `{"tx_id":"t`...)
		b = appendPadded(b, e.tx, 7)
		b = append(b, `","user_id":"u`...)
		b = appendPadded(b, e.user, 6)
		b = append(b, `","amount":`...)
		b = appendCents(b, e.cents)
		b = append(b, `,"currency":"`...)
		b = append(b, countries[e.home].currency...)
		b = append(b, `","merchant":"m`...)
		b = appendPadded(b, int64(e.merch), 4)
		b = append(b, `","card":"c`...)
		b = appendPadded(b, e.user, 6)
		b = append(b, e.card, '"')
		b = append(b, `,"ip":"`...)
		b = appendIP(b, e.ip)
		b = append(b, `","device":"d`...)
		b = appendPadded(b, e.devUser, 6)
		b = append(b, e.devTag, '"')
		b = append(b, `,"country":"`...)
		b = append(b, countries[e.country].code...)
		b = append(b, `","ts":`...)
	case kindLogin:
		b = append(b, `{"user_id":"u`...)
		b = appendPadded(b, e.user, 6)
		if e.flag {
			b = append(b, `","status":"FAILED","ip":"`...)
		} else {
			b = append(b, `","status":"SUCCESS","ip":"`...)
		}
		b = appendIP(b, e.ip)
		b = append(b, `","device":"d`...)
		b = appendPadded(b, e.devUser, 6)
		b = append(b, e.devTag, '"')
		b = append(b, `,"ts":`...)
	case kindDevice:
		b = append(b, `{"user_id":"u`...)
		b = appendPadded(b, e.user, 6)
		b = append(b, `","device":"d`...)
		b = appendPadded(b, e.devUser, 6)
		b = append(b, e.devTag, '"')
		if e.flag {
			b = append(b, `,"event":"new_device","ts":`...)
		} else {
			b = append(b, `,"event":"seen","ts":`...)
		}
	}
	b = strconv.AppendInt(b, e.ts, 10)
	return append(b, '}')
}

// partitionOf spreads users over partitions with a multiplicative hash, so
// that neighbouring user numbers land on different partitions.
func partitionOf(user int64, partitions int) int {
	return int((uint64(user) * 0x9E3779B97F4A7C15 >> 32) % uint64(partitions))
}

// appendPadded appends n (non-negative) in decimal, zero-padded to width digits.
func appendPadded(b []byte, n int64, width int) []byte {
	var digits [20]byte
	i := len(digits)
	for {
		i--
		digits[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	for range width - (len(digits) - i) {
		b = append(b, '0')
	}
	return append(b, digits[i:]...)
}

// appendCents appends cents/100 as a JSON number without trailing zeros: 4250 → 42.5.
func appendCents(b []byte, cents int64) []byte {
	b = strconv.AppendInt(b, cents/100, 10)
	switch c := cents % 100; {
	case c == 0:
	case c%10 == 0:
		b = append(b, '.', byte('0'+c/10))
	default:
		b = append(b, '.', byte('0'+c/10), byte('0'+c%10))
	}
	return b
}

// appendIP appends ip in dotted-quad form.
func appendIP(b []byte, ip uint32) []byte {
	b = strconv.AppendUint(b, uint64(ip>>24), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(ip>>16&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(ip>>8&0xff), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, uint64(ip&0xff), 10)
}

// txID formats transaction number n as a tx_id.
func txID(n int64) string { return string(appendPadded([]byte{'t'}, n, 7)) }
