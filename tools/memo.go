package tools

import (
	"container/list"
	"encoding/json"
	"sync"
)

// memo keeps the latest tool results keyed by tool, arguments and the versions (path, size,
// mtime) of the files read, so a repeated call on a large snapshot skips the analysis too.
type memo struct {
	mu    sync.Mutex
	max   int
	lru   *list.List // of *memoEntry
	index map[string]*list.Element
}

type memoEntry struct {
	key string
	val any
}

func newMemo(max int) *memo {
	return &memo{max: max, lru: list.New(), index: map[string]*list.Element{}}
}

func (m *memo) get(key string) (any, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.index[key]; ok {
		m.lru.MoveToFront(el)
		return el.Value.(*memoEntry).val, true
	}
	return nil, false
}

func (m *memo) put(key string, val any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.index[key]; ok {
		el.Value.(*memoEntry).val = val
		m.lru.MoveToFront(el)
		return
	}
	m.index[key] = m.lru.PushFront(&memoEntry{key, val})
	for m.lru.Len() > m.max {
		old := m.lru.Remove(m.lru.Back()).(*memoEntry)
		delete(m.index, old.key)
	}
}

// memoized returns the remembered result of tool on (args, versions) or computes and keeps it.
// Results are treated as immutable.
func memoized[T any](e *env, tool string, args any, versions []string, fn func() (T, error)) (T, error) {
	a, err := json.Marshal(args)
	if err != nil {
		return fn()
	}
	v, _ := json.Marshal(versions)
	key := tool + "\x00" + string(a) + "\x00" + string(v)
	if got, ok := e.memo.get(key); ok {
		return got.(T), nil
	}
	out, err := fn()
	if err == nil {
		e.memo.put(key, out)
	}
	return out, err
}
