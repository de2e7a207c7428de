package workload

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
)

// Stream mix of normal traffic, and per-event probabilities.
const (
	txShare    = 0.70 // transactions; logins take loginShare, devices the rest (8%)
	loginShare = 0.22
	// failedLogin is the chance that a normal login fails (a mistyped password).
	failedLogin = 0.04
	// newDevice is the chance that a normal device event reports a new device.
	newDevice = 0.03
	// bigTicket is the chance that a normal transaction is a rare large purchase.
	bigTicket = 0.002
)

// pcgStream is the fixed second PCG seed word; Config.Seed is the first.
const pcgStream = 0x7669_6769_6c00_0001

// Generate validates c, writes the workload to w and returns the planted fraud
// cases, sorted by user number. It writes exactly c.Events lines (after
// defaults) through its own buffer and returns the validation error, or the
// first write error wrapped, with the cases only on success.
func Generate(w io.Writer, c Config) ([]Planted, error) {
	g, err := newGenerator(c)
	if err != nil {
		return nil, err
	}
	out := bufio.NewWriterSize(w, 64<<10)
	line := make([]byte, 0, 512) // reused: formatting a line allocates nothing
	planted, err := g.generate(func(e event) error {
		line = appendRecord(line[:0], &e, g.c.Partitions)
		_, err := out.Write(line)
		return err
	})
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("workload: write: %w", err)
	}
	return planted, nil
}

// newGenerator validates c and returns a generator for it, defaults applied.
func newGenerator(c Config) (*generator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	// The per-user traits hash from their own salt, apart from the PCG stream.
	salt := splitmix(c.Seed)
	return &generator{
		c:    c,
		rng:  rand.New(rand.NewPCG(c.Seed, pcgStream)),
		salt: salt.next(),
	}, nil
}

// generator holds the state of one workload's generation.
type generator struct {
	c    Config
	rng  *rand.Rand
	salt uint64 // for userTraits
	// emit writes one event out, in the output's order; its error stops
	// the generation. It takes a copy: a pointer passed through a function
	// value escapes, which would cost an allocation per event.
	emit func(event) error

	cases  []Planted
	nextTx int64      // last transaction number given out
	held   delayQueue // late events and duplicates, by arrival
	seq    uint64     // holding-back counter
}

// generate plants the fraud cases, passes every event to emit in output
// order and returns the planted cases, or emit's first error. A generator
// generates once.
func (g *generator) generate(emit func(event) error) ([]Planted, error) {
	g.emit = emit
	if err := g.run(g.plant()); err != nil {
		return nil, err
	}
	return g.cases, nil
}

// run merges normal traffic with the planted events (sorted by time) in
// event-time order, holds back late events and duplicates, and emits
// everything.
func (g *generator) run(planted []event) error {
	budget := g.c.Events - len(planted) // lines left for normal events and duplicates
	// Normal events arrive as a Poisson process spread over the span; duplicates
	// take a share of the budget but no time of their own.
	meanGap := g.c.spanMs() / (float64(budget) / (1 + txShare*g.c.Duplicates))
	offset := 0.0
	for budget > 0 || len(planted) > 0 {
		var e event
		if ts := g.c.Start + int64(offset); budget > 0 && (len(planted) == 0 || ts <= planted[0].ts) {
			e = g.normal(ts)
			budget--
			offset += g.rng.ExpFloat64() * meanGap
		} else {
			e, planted = planted[0], planted[1:]
		}
		if err := g.place(&e, &budget); err != nil {
			return err
		}
	}
	for len(g.held) > 0 {
		e := g.held.pop()
		if err := g.emit(e); err != nil {
			return err
		}
	}
	return nil
}

// place emits e now or holds it back, and may hold back a duplicate of it
// (taken from budget). Events come in event-time order, so every held event
// whose arrival has come is emitted first.
func (g *generator) place(e *event, budget *int) error {
	for len(g.held) > 0 && g.held[0].arrival <= e.ts {
		h := g.held.pop()
		if err := g.emit(h); err != nil {
			return err
		}
	}
	if e.kind == kindTx {
		g.nextTx++
		e.tx = g.nextTx
		if e.mustFlag {
			c := &g.cases[e.planted]
			c.TxIDs = append(c.TxIDs, txID(e.tx))
		}
	}
	if e.planted >= 0 {
		return g.emit(*e)
	}
	var delay int64
	if g.c.OutOfOrder > 0 && g.rng.Float64() < g.c.OutOfOrder {
		delay = 1 + g.rng.Int64N(g.c.MaxDelay)
		g.hold(*e, e.ts+delay)
	} else if err := g.emit(*e); err != nil {
		return err
	}
	if e.kind == kindTx && *budget > 0 && g.c.Duplicates > 0 && g.rng.Float64() < g.c.Duplicates {
		// A retry: after the original, within MaxDelay of the transaction's time.
		g.hold(*e, e.ts+delay+g.rng.Int64N(g.c.MaxDelay-delay+1))
		*budget--
	}
	return nil
}

// hold queues e to be written once events reach time arrival.
func (g *generator) hold(e event, arrival int64) {
	e.arrival = arrival
	e.seq = g.seq
	g.seq++
	g.held.push(e)
}

// normal returns a normal event at time ts of a user picked by activity.
func (g *generator) normal(ts int64) event {
	var u int
	if g.rng.Float64() < heavyShare {
		u = heavyEvery * g.rng.IntN((g.c.Users+heavyEvery-1)/heavyEvery)
	} else {
		u = g.rng.IntN(g.c.Users)
	}
	p := userTraits(g.salt, u)
	e := event{ts: ts, user: int64(u) + 1, devUser: int64(u) + 1, devTag: 'a', planted: -1}
	if p.devices == 2 && g.rng.IntN(10) < 3 {
		e.devTag = 'b'
	}
	switch x := g.rng.Float64(); {
	case x < txShare:
		e.kind = kindTx
		e.home, e.country = p.home, p.home
		e.ip = p.pickIP(g.rng.Float64())
		e.card = 'a'
		if p.cards == 2 && g.rng.IntN(10) < 2 {
			e.card = 'b'
		}
		if g.rng.Float64() < 0.6 {
			e.merch = p.favorites[g.rng.IntN(len(p.favorites))]
		} else {
			f := g.rng.Float64() // popular merchants first
			e.merch = int32(f * f * merchants)
		}
		if g.rng.Float64() < bigTicket {
			e.cents = logNormalCents(6.4, 0.6, g.rng.NormFloat64())
		} else {
			e.cents = logNormalCents(p.mu, 0.85, g.rng.NormFloat64())
		}
	case x < txShare+loginShare:
		e.kind = kindLogin
		e.ip = p.pickIP(g.rng.Float64())
		e.flag = g.rng.Float64() < failedLogin
	default:
		e.kind = kindDevice
		e.flag = g.rng.Float64() < newDevice
	}
	return e
}

// delayQueue is a binary min-heap of held-back events by (arrival, seq).
type delayQueue []event

// less orders held events by arrival, then by when they were held.
func (q delayQueue) less(i, j int) bool {
	if q[i].arrival != q[j].arrival {
		return q[i].arrival < q[j].arrival
	}
	return q[i].seq < q[j].seq
}

// push adds e.
func (q *delayQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

// pop removes and returns the first event; the queue must not be empty.
func (q *delayQueue) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, least) {
			least = l
		}
		if r < len(h) && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return top
}
