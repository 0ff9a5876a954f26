package pickle

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Protocol 0 writes strings as text lines; these decode them as CPython's pickle.load does.

// unquoteString decodes the argument of STRING: a Python 2 str repr, quoted with ' or " and
// escaped as codecs.escape_decode reads it. Python 3 decodes the bytes as ASCII; non-ASCII
// bytes are kept as they are rather than refused.
func unquoteString(line []byte) (string, error) {
	if len(line) < 2 || line[0] != line[len(line)-1] || (line[0] != '\'' && line[0] != '"') {
		return "", errors.New("the string is not quoted")
	}
	s := line[1 : len(line)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			out = append(out, c)
			continue
		}
		i++
		switch c = s[i]; c {
		case '\n':
		case '\\', '\'', '"':
			out = append(out, c)
		case 'a':
			out = append(out, '\a')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, '\v')
		case 'x':
			if i+2 >= len(s) {
				return "", fmt.Errorf("truncated \\x escape")
			}
			n, err := strconv.ParseUint(string(s[i+1:i+3]), 16, 8)
			if err != nil {
				return "", fmt.Errorf("invalid \\x escape")
			}
			out = append(out, byte(n))
			i += 2
		case '0', '1', '2', '3', '4', '5', '6', '7':
			n := int(c - '0')
			for j := 0; j < 2 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '7'; j++ {
				i++
				n = n*8 + int(s[i]-'0')
			}
			out = append(out, byte(n))
		default: // an unknown escape keeps its backslash
			out = append(out, '\\', c)
		}
	}
	return string(out), nil
}

// rawUnicodeEscape decodes the argument of UNICODE (the raw-unicode-escape codec): bytes are
// Latin-1 code points, except that \uXXXX and \UXXXXXXXX escapes stand for one code point
// when an odd number of backslashes precedes the u (as in CPython).
func rawUnicodeEscape(line []byte) (string, error) {
	out := make([]byte, 0, len(line))
	for i := 0; i < len(line); {
		c := line[i]
		if c != '\\' {
			out = utf8.AppendRune(out, rune(c))
			i++
			continue
		}
		start := i
		for i < len(line) && line[i] == '\\' {
			i++
		}
		run := i - start
		if run%2 == 0 || i == len(line) || (line[i] != 'u' && line[i] != 'U') {
			for range run {
				out = append(out, '\\')
			}
			continue
		}
		for range run - 1 {
			out = append(out, '\\')
		}
		width := 4
		if line[i] == 'U' {
			width = 8
		}
		i++
		if i+width > len(line) {
			return "", errors.New("truncated \\u escape")
		}
		n, err := strconv.ParseUint(string(line[i:i+width]), 16, 32)
		if err != nil || n > utf8.MaxRune {
			return "", fmt.Errorf("invalid escape \\%c%s", line[i-1], line[i:i+width])
		}
		out = utf8.AppendRune(out, rune(n))
		i += width
	}
	return string(out), nil
}
