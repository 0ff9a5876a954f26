// Package bound keeps answers a small constant size whatever a snapshot holds: it cuts every
// string in an answer to MaxString bytes with a marker that says so and names the whole
// string by its length and a hash, so a cut frame name or site still matches across tools.
// It knows nothing of snapshots or tools: it works on any Go value by reflection.
package bound

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxString is the most bytes one string of an answer may hold, marker included. Real
// snapshots' longest strings (C++ frame names of templated kernels, advice sentences) stay
// under it.
const MaxString = 1024

// Marker starts the note that ends a cut string: "…[cut: 15728640 bytes, sha256 0123456789ab]".
const Marker = "…[cut: "

// String returns s when it fits MaxString, else its prefix (at a character boundary) and a
// marker with its length and the first 12 hex digits of its SHA-256. Equal strings give equal
// results, and a string already cut is returned as is.
func String(s string) string {
	if len(s) <= MaxString {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	tail := Marker + strconv.Itoa(len(s)) + " bytes, sha256 " + hex.EncodeToString(sum[:6]) + "]"
	cut := MaxString - len(tail)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tail
}

// Page is a string an answer may hold up to MaxPage bytes: one page of a longer string read
// on purpose (read-raw-section's frame text). Strings leaves a Page that fits alone.
type Page string

// MaxPage is the most bytes of a Page.
const MaxPage = 8000

var pageType = reflect.TypeFor[Page]()

// limit is the bound of a string value of type t.
func limit(t reflect.Type) int {
	if t == pageType {
		return MaxPage
	}
	return MaxString
}

// IsCut reports whether s is a string String cut.
func IsCut(s string) bool {
	return len(s) <= MaxString && strings.Contains(s, Marker) && strings.HasSuffix(s, "]")
}

// Strings returns v when no string reachable from it (exported fields, slices, arrays, maps,
// pointers, interfaces) is longer than MaxString; else a copy in which every such string is
// cut by String. v itself is never changed, so a result shared between callers (a memoized
// answer) stays whole and safe to read concurrently.
func Strings[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	if !tooLong(rv, 0) {
		return v
	}
	out := reflect.New(rv.Type()).Elem()
	out.Set(cutCopy(rv, 0))
	return out.Interface().(T)
}

// maxDepth stops the walk on (impossible in answers, but cheap to guard) cyclic values.
const maxDepth = 64

// tooLong reports whether a string longer than MaxString is reachable from v.
func tooLong(v reflect.Value, depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch v.Kind() {
	case reflect.String:
		return v.Len() > limit(v.Type())
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && tooLong(v.Elem(), depth+1)
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if t.Field(i).IsExported() && tooLong(v.Field(i), depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return false // bytes (a PNG), not text
		}
		for i := range v.Len() {
			if tooLong(v.Index(i), depth+1) {
				return true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if tooLong(it.Key(), depth+1) || tooLong(it.Value(), depth+1) {
				return true
			}
		}
	}
	return false
}

// cutCopy returns v, or a copy of it with long strings cut, sharing whatever needs no cut.
func cutCopy(v reflect.Value, depth int) reflect.Value {
	if !tooLong(v, depth) {
		return v
	}
	switch v.Kind() {
	case reflect.String:
		out := reflect.New(v.Type()).Elem()
		out.SetString(String(v.String()))
		return out
	case reflect.Pointer:
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(cutCopy(v.Elem(), depth+1))
		return out
	case reflect.Interface:
		out := reflect.New(v.Type()).Elem()
		out.Set(cutCopy(v.Elem(), depth+1))
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v) // unexported fields too
		t := v.Type()
		for i := range v.NumField() {
			if t.Field(i).IsExported() {
				out.Field(i).Set(cutCopy(v.Field(i), depth+1))
			}
		}
		return out
	case reflect.Slice:
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(cutCopy(v.Index(i), depth+1))
		}
		return out
	case reflect.Array:
		out := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			out.Index(i).Set(cutCopy(v.Index(i), depth+1))
		}
		return out
	case reflect.Map:
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			out.SetMapIndex(cutCopy(it.Key(), depth+1), cutCopy(it.Value(), depth+1))
		}
		return out
	}
	return v
}
