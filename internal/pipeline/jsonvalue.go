package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/textutil"
)

// Lossless JSON. Values are made of map[string]any, []any, string, bool, nil
// and json.Number; a number keeps its exact text, so integers beyond 2^53
// and spellings like 1.10 survive. The parser refuses what would make two
// readers disagree: duplicate object keys, invalid UTF-8, trailing data, and
// negative zero (which has no lossless meaning for most consumers).

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 128

var (
	errTrailing  = errors.New("trailing data after the JSON value")
	errDepth     = errors.New("JSON nested too deeply")
	errNegZero   = errors.New("negative zero is not allowed")
	errDuplicate = errors.New("duplicate object key")
)

// ParseJSON decodes one lossless JSON value from text.
func ParseJSON(text string) (any, error) {
	p := parser{s: text}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.fail(errTrailing)
	}
	return v, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) fail(err error) error {
	return fmt.Errorf("offset %d: %w", p.i, err)
}

func (p *parser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.fail(errDepth)
	}
	if p.i >= len(p.s) {
		return nil, p.fail(errors.New("unexpected end of JSON"))
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return true, nil
	case strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return false, nil
	case strings.HasPrefix(p.s[p.i:], "null"):
		p.i += 4
		return nil, nil
	default:
		return nil, p.fail(fmt.Errorf("unexpected character %q", c))
	}
}

func (p *parser) object(depth int) (any, error) {
	p.i++ // {
	obj := map[string]any{}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return obj, nil
	}
	for {
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, p.fail(errors.New("expected an object key"))
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[key]; dup {
			return nil, p.fail(fmt.Errorf("%w %q", errDuplicate, key))
		}
		p.space()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, p.fail(errors.New("expected ':'"))
		}
		p.i++
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		obj[key] = v
		p.space()
		if p.i >= len(p.s) {
			return nil, p.fail(errors.New("unterminated object"))
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return obj, nil
		default:
			return nil, p.fail(errors.New("expected ',' or '}'"))
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	p.i++ // [
	arr := []any{}
	p.space()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return arr, nil
	}
	for {
		p.space()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.space()
		if p.i >= len(p.s) {
			return nil, p.fail(errors.New("unterminated array"))
		}
		switch p.s[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return arr, nil
		default:
			return nil, p.fail(errors.New("expected ',' or ']'"))
		}
	}
}

// str parses a string starting at the opening quote. Strings without
// escapes are returned as substrings of the input (no copy).
func (p *parser) str() (string, error) {
	start := p.i + 1
	for j := start; j < len(p.s); j++ {
		c := p.s[j]
		switch {
		case c == '"':
			s := p.s[start:j]
			if !utf8.ValidString(s) {
				return "", p.fail(errors.New("invalid UTF-8 in string"))
			}
			p.i = j + 1
			return s, nil
		case c == '\\':
			return p.escapedStr(start)
		case c < 0x20:
			p.i = j
			return "", p.fail(errors.New("control character in string"))
		}
	}
	return "", p.fail(errors.New("unterminated string"))
}

// escapedStr decodes a string with escapes. A lone UTF-16 surrogate
// (\ud800 without its pair) is refused: decoders would otherwise replace it
// silently, and the value would not be what the model sent.
func (p *parser) escapedStr(start int) (string, error) {
	var b strings.Builder
	j := start
	for j < len(p.s) {
		c := p.s[j]
		switch {
		case c == '"':
			out := b.String()
			if !utf8.ValidString(out) {
				return "", p.fail(errors.New("invalid UTF-8 in string"))
			}
			p.i = j + 1
			return out, nil
		case c < 0x20:
			p.i = j
			return "", p.fail(errors.New("control character in string"))
		case c != '\\':
			b.WriteByte(c)
			j++
			continue
		}
		if j+1 >= len(p.s) {
			break
		}
		switch e := p.s[j+1]; e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, n, err := p.unicodeEscape(j)
			if err != nil {
				return "", err
			}
			b.WriteRune(r)
			j += n
			continue
		default:
			p.i = j
			return "", p.fail(fmt.Errorf("invalid escape \\%c", e))
		}
		j += 2
	}
	return "", p.fail(errors.New("unterminated string"))
}

// unicodeEscape decodes \uXXXX at j (and its low surrogate, if it is a high
// one), returning the rune and the bytes consumed.
func (p *parser) unicodeEscape(j int) (rune, int, error) {
	hex4 := func(at int) (rune, bool) {
		if at+6 > len(p.s) || p.s[at] != '\\' || p.s[at+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(p.s[at+2:at+6], 16, 32)
		return rune(v), err == nil
	}
	r, ok := hex4(j)
	if !ok {
		p.i = j
		return 0, 0, p.fail(errors.New("invalid \\u escape"))
	}
	switch {
	case r >= 0xD800 && r < 0xDC00:
		lo, ok := hex4(j + 6)
		if !ok || lo < 0xDC00 || lo >= 0xE000 {
			p.i = j
			return 0, 0, p.fail(errors.New("unpaired UTF-16 surrogate"))
		}
		return (r-0xD800)<<10 + (lo - 0xDC00) + 0x10000, 12, nil
	case r >= 0xDC00 && r < 0xE000:
		p.i = j
		return 0, 0, p.fail(errors.New("unpaired UTF-16 surrogate"))
	}
	return r, 6, nil
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	intStart := p.i
	if n := digits(); n == 0 || (n > 1 && p.s[intStart] == '0') {
		return nil, p.fail(errors.New("invalid number"))
	}
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, p.fail(errors.New("invalid number fraction"))
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		expStart := p.i
		if digits() == 0 {
			return nil, p.fail(errors.New("invalid number exponent"))
		}
		// Every reader expands a number to its exponent (a schema's
		// keywords as a rational, 1e1000000 a million digits): an exponent
		// beyond maxExponent would cost work out of all proportion to the
		// text, and no reader holds such a number anyway.
		if exp := strings.TrimLeft(p.s[expStart:p.i], "0"); len(exp) > len(strconv.Itoa(maxExponent)) ||
			(len(exp) == len(strconv.Itoa(maxExponent)) && exp > strconv.Itoa(maxExponent)) {
			p.i = start
			return nil, p.fail(fmt.Errorf("number out of range: its exponent is beyond ±%d", maxExponent))
		}
	}
	text := p.s[start:p.i]
	if text[0] == '-' && isZero(text) {
		p.i = start
		return nil, p.fail(errNegZero)
	}
	if _, ok := new(big.Rat).SetString(text); !ok {
		// A schema's numeric keywords read it as a rational: one whose
		// exponent is beyond that (1e1000001) is not a number here.
		p.i = start
		return nil, p.fail(errors.New("number out of range"))
	}
	return json.Number(text), nil
}

// maxExponent bounds the written exponent of a JSON number: far beyond
// float64's (±308), so every number a reader can hold passes.
const maxExponent = 1000

// isZero reports whether a syntactically valid number's mantissa is zero.
func isZero(text string) bool {
	for _, c := range text {
		switch {
		case c == 'e' || c == 'E':
			return true
		case c >= '1' && c <= '9':
			return false
		}
	}
	return true
}

// errInvalidValue marks a value that no JSON text represents losslessly:
// a json.Number whose text is not a number, text that is not UTF-8.
var errInvalidValue = errors.New("not a JSON value")

// CanonicalJSON encodes a lossless value: object keys sorted, no
// insignificant space, numbers as their original text, no HTML escaping.
func CanonicalJSON(v any) (string, error) {
	var b strings.Builder
	if err := appendCanonical(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

func appendCanonical(b *strings.Builder, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		// Its text is written as is: it must be a number, not any JSON.
		if n, err := ParseJSON(string(v)); err != nil {
			return fmt.Errorf("%w: number %q: %w", errInvalidValue, textutil.Truncate(string(v), 64), err)
		} else if n, ok := n.(json.Number); !ok || n != v {
			// Not a number, or one with space around it.
			return fmt.Errorf("%w: %q is not a number", errInvalidValue, textutil.Truncate(string(v), 64))
		}
		b.WriteString(string(v))
	case string:
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: text holds invalid UTF-8", errInvalidValue)
		}
		appendString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := appendCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			if !utf8.ValidString(k) {
				return fmt.Errorf("%w: a key holds invalid UTF-8", errInvalidValue)
			}
			appendString(b, k)
			b.WriteByte(':')
			if err := appendCanonical(b, v[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("NaN and infinities are not JSON")
		}
		if v == 0 && math.Signbit(v) {
			return errNegZero
		}
		b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	default:
		return fmt.Errorf("%T is not a lossless JSON value", v)
	}
	return nil
}

const hexDigits = "0123456789abcdef"

func appendString(b *strings.Builder, s string) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
		start = i + 1
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// toLossless turns a body's Go value into a lossless value: JSON text
// (json.RawMessage) is parsed; strings, booleans and nil pass as they are;
// anything else is marshalled with encoding/json and parsed back.
func toLossless(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool:
		return v, nil
	case string, json.Number:
		if _, err := CanonicalJSON(v); err != nil {
			return nil, err
		}
		return v, nil
	case json.RawMessage:
		return ParseJSON(string(v))
	case map[string]any, []any:
		// Already lossless-shaped only if its leaves are; canonicalising
		// checks that without a round trip through encoding/json, which
		// would rewrite invalid text to U+FFFD instead of refusing it.
		_, err := CanonicalJSON(v)
		if err == nil {
			return v, nil
		}
		if errors.Is(err, errInvalidValue) {
			return nil, err
		}
	}
	if !validText(reflect.ValueOf(v), 0) {
		// encoding/json would write U+FFFD instead: refuse it.
		return nil, fmt.Errorf("%w: text holds invalid UTF-8", errInvalidValue)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return ParseJSON(string(data))
}

// maxTextDepth bounds validText's walk.
const maxTextDepth = 1000

// validText reports whether every string in v (struct fields, elements,
// map keys and values) is valid UTF-8; past maxTextDepth (a cycle, say) it
// leaves the value to encoding/json, which refuses cycles.
func validText(v reflect.Value, depth int) bool {
	if depth > maxTextDepth {
		return true
	}
	depth++
	switch v.Kind() {
	case reflect.String:
		return utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return v.IsNil() || validText(v.Elem(), depth)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return true // []byte is written as base64
		}
		for i := range v.Len() {
			if !validText(v.Index(i), depth) {
				return false
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if !validText(it.Key(), depth) || !validText(it.Value(), depth) {
				return false
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !validText(v.Field(i), depth) {
				return false
			}
		}
	}
	return true
}
