package workload

import "math"

// country is where an IP address is located; a user's home country also sets
// the currency of their cards.
type country struct {
	code, currency string
	// weight is the share (percent) of users living there; 0 for countries
	// that only fraud comes from.
	weight int
	// prefixes are first octets of the country's IPv4 addresses, distinct
	// across countries so that an address tells its country.
	prefixes [2]byte
}

// countries is a read-only table; the weights sum to 100.
var countries = [...]country{
	{"DE", "EUR", 25, [2]byte{84, 91}},
	{"FR", "EUR", 15, [2]byte{90, 82}},
	{"GB", "GBP", 15, [2]byte{81, 86}},
	{"US", "USD", 15, [2]byte{73, 98}},
	{"NL", "EUR", 8, [2]byte{145, 77}},
	{"ES", "EUR", 8, [2]byte{88, 80}},
	{"IT", "EUR", 7, [2]byte{79, 93}},
	{"PL", "PLN", 4, [2]byte{83, 89}},
	{"SE", "SEK", 3, [2]byte{78, 85}},
	{"BR", "BRL", 0, [2]byte{177, 189}},
	{"NG", "NGN", 0, [2]byte{105, 102}},
	{"VN", "VND", 0, [2]byte{113, 171}},
	{"ID", "IDR", 0, [2]byte{36, 114}},
}

// merchants is the number of merchants, m0000 to m4999.
const merchants = 5000

// heavyEvery makes every heavyEvery-th user (index 0, 20, 40, ...) a heavy
// user, and heavyShare is the share of normal events drawn from heavy users
// alone: 5% of the users make about a fifth of the traffic on top of their
// uniform share, as real activity is skewed.
const (
	heavyEvery = 20
	heavyShare = 0.2
)

// profile holds a user's stable traits, derived from the seed and the user's
// index alone (see userTraits), so that no per-user table is kept.
type profile struct {
	home    uint8     // index into countries
	ips     [3]uint32 // IPv4 addresses, the first nIPs in use
	nIPs    int
	devices int // 1 or 2: device letters a, b
	cards   int // 1 or 2: card letters a, b
	// mu is the location of the log-normal amount: most amounts fall in 5–200.
	mu        float64
	favorites [4]int32 // merchants the user returns to
}

// splitmix is the SplitMix64 generator: a stateless hash of (seed, user) when
// started from their mix, used for stable per-user traits.
type splitmix uint64

// next returns the next 64 random bits.
func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// intn returns a number in [0, n) (with a bias below 2^-32, irrelevant here).
func (s *splitmix) intn(n int) int { return int((s.next() >> 32) * uint64(n) >> 32) }

// float returns a number in [0, 1).
func (s *splitmix) float() float64 { return float64(s.next()>>11) * 0x1p-53 }

// userTraits derives user u's profile from salt (a hash of the seed).
func userTraits(salt uint64, u int) profile {
	s := splitmix(salt ^ uint64(u)*0xd1b54a32d192ed03)
	var p profile
	w := s.intn(100)
	for i, c := range countries {
		if w < c.weight {
			p.home = uint8(i)
			break
		}
		w -= c.weight
	}
	// Most people pay from home Wi-Fi and a phone network; few from three places.
	switch x := s.intn(1000); {
	case x < 720:
		p.nIPs = 1
	case x < 985:
		p.nIPs = 2
	default:
		p.nIPs = 3
	}
	for i := range p.nIPs {
		p.ips[i] = randomIP(p.home, s.next())
	}
	p.devices = 1 + s.intn(4)/3 // 1 in 4 users has two devices
	p.cards = 1 + s.intn(7)/6   // 1 in 7 has two cards
	p.mu = 3.0 + 0.8*s.float()
	for i := range p.favorites {
		p.favorites[i] = int32(s.intn(merchants))
	}
	return p
}

// randomIP returns an address of country c built from the bits of r.
func randomIP(c uint8, r uint64) uint32 {
	prefix := uint32(countries[c].prefixes[r&1])
	return prefix<<24 | uint32(r>>8&0xffff)<<8 | uint32(1+(r>>24)%254)
}

// pickIP picks one of the user's addresses: the first most of the time.
func (p *profile) pickIP(x float64) uint32 {
	switch {
	case p.nIPs >= 2 && x < 0.20:
		return p.ips[1]
	case p.nIPs == 3 && x < 0.23:
		return p.ips[2]
	}
	return p.ips[0]
}

// logNormalCents returns exp(mu + sigma*n) as a whole number of cents, at least 1.
func logNormalCents(mu, sigma, n float64) int64 {
	return max(1, int64(math.Round(math.Exp(mu+sigma*n)*100)))
}
