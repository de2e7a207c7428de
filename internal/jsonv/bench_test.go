package jsonv

import (
	"bytes"
	"encoding/json"
	"testing"
)

// typicalRecord is a typical record of Vigil's transaction stream.
const typicalRecord = `{"tx_id":"t000123","user_id":"u00042","amount":42.5,"currency":"EUR","merchant":"m17","ip":"10.1.2.3","device":"d9","ts":1700000000123}`

// nestedRecord exercises arrays, nesting, escapes and non-ASCII text.
const nestedRecord = `{"tx_id":"t000124","tags":["card-present","vip","3ds"],"geo":{"lat":48.8566,"lon":2.3522,"city":"Paris \u00cele-de-France"},` +
	`"items":[{"sku":"A-1","qty":2,"price":9.99},{"sku":"B-22","qty":1,"price":120}],"note":"line1\nline2 \"quoted\"","flagged":false,"ref":null}`

func BenchmarkDecode(b *testing.B) {
	for _, in := range []struct{ name, data string }{{"typical", typicalRecord}, {"nested", nestedRecord}} {
		b.Run(in.name+"/jsonv", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				if _, err := Decode(in.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(in.data)))
			data := []byte(in.data)
			for b.Loop() {
				var v any
				if err := json.Unmarshal(data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSkip(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(nestedRecord)))
	for b.Loop() {
		if _, err := Skip(nestedRecord); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, in := range []struct{ name, data string }{{"typical", typicalRecord}, {"nested", nestedRecord}} {
		v, err := Decode(in.data)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(in.name+"/jsonv", func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf = Append(buf[:0], v)
			}
			b.SetBytes(int64(len(buf)))
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			for b.Loop() {
				buf.Reset()
				if err := enc.Encode(v); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(buf.Len()))
		})
	}
}

// BenchmarkDecodeSlots decodes the fields a ruleset reads of a typical
// record into slots, as replay does for a stream with DecodeFields.
func BenchmarkDecodeSlots(b *testing.B) {
	names := []string{"user_id", "ts", "tx_id", "amount", "ip", "currency"}
	slots := make([]any, len(names))
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalRecord)))
	for b.Loop() {
		if _, _, _, err := DecodePrefixSlots(typicalRecord, names, slots); err != nil {
			b.Fatal(err)
		}
	}
}
