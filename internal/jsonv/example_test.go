package jsonv_test

import (
	"fmt"

	"github.com/vigil-cep/vigil/internal/jsonv"
)

func ExampleDecode() {
	v, err := jsonv.Decode(`{"tx_id":"t1","amount":42.5,"tags":["vip"],"ref":null}`)
	if err != nil {
		panic(err)
	}
	m := v.(map[string]any)
	fmt.Println(m["tx_id"], m["amount"], m["tags"], m["ref"])

	_, err = jsonv.Decode(`{"tx_id" "t1"}`)
	fmt.Println(err)
	// Output:
	// t1 42.5 [vip] <nil>
	// invalid JSON at offset 9: expected ':' after object key
}

func ExampleObject() {
	var amount any
	_, err := jsonv.Object(`{"tx_id":"t1","items":[1,2,3],"amount":42.5}`, func(key, rest string) (int, error) {
		if key == "amount" {
			v, n, err := jsonv.DecodePrefix(rest)
			amount = v
			return n, err
		}
		return jsonv.Skip(rest)
	})
	fmt.Println(amount, err)
	// Output: 42.5 <nil>
}

func ExampleAppend() {
	b := jsonv.Append(nil, map[string]any{
		"z":    1.0,
		"a":    []any{"<b>", 1e21, int64(7)},
		"raw":  jsonv.Raw(`{"pre":"encoded"}`),
		"none": nil,
	})
	fmt.Println(string(b))
	// Output: {"a":["<b>",1e+21,7],"none":null,"raw":{"pre":"encoded"},"z":1}
}
