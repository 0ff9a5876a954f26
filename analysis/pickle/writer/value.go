package writer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
)

// List is a Python list with identity: writing the same *List twice writes a memo GET the
// second time.
type List struct{ Items []any }

// Tuple is a Python tuple with identity.
type Tuple struct{ Items []any }

// Item is one dict entry.
type Item struct{ Key, Value any }

// Dict is a Python dict with identity; items keep their order.
type Dict struct{ Items []Item }

// Str is a str object with identity: the same *Str written twice is shared through the memo.
// (A plain Go string is a new str object each time, as a fresh Python string would be.)
type Str struct{ S string }

// Interned is a string shared by value (like Python's interned dict keys).
type Interned string

// Raw is written verbatim into the pickle stream (ignored for JSON).
type Raw []byte

// sink is what the encoders write to: the pickle Writer or the JSON writer.
type sink interface {
	None()
	Bool(bool)
	Int(int64)
	Uint(uint64)
	BigInt(*big.Int)
	Float(float64)
	Str(string)
	SharedStr(string)
	StrAs(h any, s string)
	Ref(h any) bool
	StartDict(h any, n int)
	StartList(h any, n int)
	StartTuple(h any, n int)
	Next()
	EndDict()
	EndList()
	EndTuple()
	Raw(b ...byte)
	Err() error
}

// Value writes a tree of plain values: nil, bool, Go integers, *big.Int, float32/64, string,
// Interned, *Str, *List, *Dict, *Tuple, Raw, json.Number, []any (a list) and map[string]any
// (a dict with sorted keys; keys that are all integers sort numerically).
func (w *Writer) Value(v any) error { return emit(w, v) }

// Dumps pickles one value tree.
func Dumps(v any, cfg Config) ([]byte, error) {
	var buf bytes.Buffer
	w := NewWriter(&buf, cfg)
	w.Begin()
	if err := w.Value(v); err != nil {
		return nil, err
	}
	if err := w.Finish(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func emit(s sink, v any) error {
	if err := s.Err(); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		s.None()
	case bool:
		s.Bool(x)
	case int:
		s.Int(int64(x))
	case int8:
		s.Int(int64(x))
	case int16:
		s.Int(int64(x))
	case int32:
		s.Int(int64(x))
	case int64:
		s.Int(x)
	case uint:
		s.Uint(uint64(x))
	case uint8:
		s.Uint(uint64(x))
	case uint16:
		s.Uint(uint64(x))
	case uint32:
		s.Uint(uint64(x))
	case uint64:
		s.Uint(x)
	case *big.Int:
		s.BigInt(x)
	case float32:
		s.Float(float64(x))
	case float64:
		s.Float(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			s.Int(i)
		} else if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			s.Uint(u)
		} else if f, err := x.Float64(); err == nil {
			s.Float(f)
		} else {
			return fmt.Errorf("pickle writer: bad json.Number %q", string(x))
		}
	case string:
		s.Str(x)
	case Interned:
		s.SharedStr(string(x))
	case *Str:
		if !s.Ref(x) {
			s.StrAs(x, x.S)
		}
	case Raw:
		s.Raw(x...)
	case *List:
		if !s.Ref(x) {
			s.StartList(x, len(x.Items))
			if err := emitItems(s, x.Items); err != nil {
				return err
			}
			s.EndList()
		}
	case *Tuple:
		if !s.Ref(x) {
			s.StartTuple(x, len(x.Items))
			if err := emitItems(s, x.Items); err != nil {
				return err
			}
			s.EndTuple()
		}
	case *Dict:
		if s.Ref(x) {
			break
		}
		s.StartDict(x, len(x.Items))
		for _, it := range x.Items {
			if err := emit(s, it.Key); err != nil {
				return err
			}
			if err := emit(s, it.Value); err != nil {
				return err
			}
			s.Next()
		}
		s.EndDict()
	case []any:
		s.StartList(nil, len(x))
		if err := emitItems(s, x); err != nil {
			return err
		}
		s.EndList()
	case map[string]any:
		keys := sortedKeys(x)
		s.StartDict(nil, len(keys))
		for _, k := range keys {
			s.Str(k)
			if err := emit(s, x[k]); err != nil {
				return err
			}
			s.Next()
		}
		s.EndDict()
	default:
		return fmt.Errorf("pickle writer: %w %T", errUnsupported, v)
	}
	return s.Err()
}

// sortedKeys sorts map keys; when every key is an integer they sort numerically (as PyTorch's
// roundup_power2_divisions keys "1", "2", ..., "32768" appear).
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	numeric := true
	for k := range m {
		keys = append(keys, k)
		if _, err := strconv.ParseInt(k, 10, 64); err != nil {
			numeric = false
		}
	}
	if numeric {
		sort.Slice(keys, func(i, j int) bool {
			a, _ := strconv.ParseInt(keys[i], 10, 64)
			b, _ := strconv.ParseInt(keys[j], 10, 64)
			return a < b
		})
	} else {
		sort.Strings(keys)
	}
	return keys
}

// emitItems writes the elements of a list or tuple.
func emitItems(s sink, items []any) error {
	for _, it := range items {
		if err := emit(s, it); err != nil {
			return err
		}
		s.Next()
	}
	return nil
}
